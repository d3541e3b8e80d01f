#pragma once

// Text for error messages built from what users and files supply: quoted
// paths and names, and long lists (devices, dimensions, ranks) cut, so an error about 4095
// replicas stays a line, not a page. (Bytes that are not valid UTF-8 are
// escaped in every lockstep::error: lockstep/text.hpp.)

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::detail {

/// `text` in double quotes, as messages quote paths, names and values.
/// (One overload per kind of text: a std::string would convert to both a
/// string_view and a path.)
inline std::string in_quotes(std::string_view text) {
  return "\"" + std::string(text) + "\"";
}

inline std::string in_quotes(const std::string& text) {
  return in_quotes(std::string_view(text));
}

inline std::string in_quotes(const char* text) {
  return in_quotes(std::string_view(text));
}

inline std::string in_quotes(const std::filesystem::path& path) {
  return in_quotes(std::string_view(path.native()));
}

/// How many items of a list an error message shows before "... and N more".
inline constexpr std::size_t items_in_errors = 8;

/// The first `shown` of `items` joined by `separator`, then "... and N
/// more" (after another separator) when some of the `total` were left out.
/// `total` (at least `items.size()`) lets a caller with a long list make
/// strings of its first `shown + 1` only.
std::string joined_list(const std::vector<std::string>& items,
                        std::size_t shown = items_in_errors, std::size_t total = 0,
                        std::string_view separator = ", ");

/// "worker 3", or "workers 0, 2, 5" (cut as joined_list cuts): `ranks` as
/// text, `total` as there.
std::string workers_text(const std::vector<std::string>& ranks, std::size_t total = 0);

} // namespace lockstep::detail
