#pragma once

// Text for error messages built from what users and files supply: long
// lists (devices, dimensions, ranks) are cut, so an error about 4095
// replicas stays a line, not a page. (Bytes that are not valid UTF-8 are
// escaped in every lockstep::error: lockstep/text.hpp.)

#include <cstddef>
#include <string>
#include <vector>

namespace lockstep::detail {

/// How many items of a list an error message shows before "... and N more".
inline constexpr std::size_t items_in_errors = 8;

/// The first `shown` of `items` joined by ", ", then ", ... and N more" when
/// some of the `total` were left out. `total` (at least `items.size()`) lets
/// a caller with a long list make strings of its first `shown + 1` only.
std::string joined_list(const std::vector<std::string>& items,
                        std::size_t shown = items_in_errors, std::size_t total = 0);

} // namespace lockstep::detail
