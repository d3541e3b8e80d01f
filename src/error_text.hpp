#pragma once

// Text for error messages built from what users and files supply: bytes
// that are not valid UTF-8 are escaped, so a message is always printable
// and valid JSON-able text, and long lists (devices, dimensions, ranks) are
// cut, so an error about 4095 replicas stays a line, not a page.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::detail {

/// How many items of a list an error message shows before "... and N more".
inline constexpr std::size_t items_in_errors = 8;

/// `text` with every byte that is not part of a valid UTF-8 sequence
/// (stray continuation bytes, truncated or overlong sequences, surrogates,
/// code points above U+10FFFF) written as `\xNN`. Valid text comes back
/// unchanged.
std::string escape_invalid_utf8(std::string_view text);

/// The first `shown` of `items` joined by ", ", then ", ... and N more" when
/// some were left out.
std::string joined_list(const std::vector<std::string>& items,
                        std::size_t shown = items_in_errors);

} // namespace lockstep::detail
