#include "runtime/error_text.hpp"

#include "lockstep/text.hpp"

#include <algorithm>
#include <cstdint>

namespace lockstep {

namespace {

/// The length of the valid UTF-8 sequence at the start of `text`, or 0.
std::size_t valid_sequence_length(std::string_view text) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const auto lead = byte(0);
  if (lead < 0x80)
    return 1;
  std::size_t length = 0;
  std::uint32_t code = 0;
  if ((lead & 0xe0) == 0xc0) {
    length = 2;
    code = lead & 0x1f;
  } else if ((lead & 0xf0) == 0xe0) {
    length = 3;
    code = lead & 0x0f;
  } else if ((lead & 0xf8) == 0xf0) {
    length = 4;
    code = lead & 0x07;
  } else {
    return 0; // a continuation byte or 0xf8..0xff
  }
  if (text.size() < length)
    return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xc0) != 0x80)
      return 0;
    code = (code << 6) | (byte(i) & 0x3f);
  }
  constexpr std::uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < smallest[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff))
    return 0; // overlong, out of range, or a surrogate
  return length;
}

} // namespace

std::string escape_invalid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    if (const auto n = valid_sequence_length(text)) {
      out.append(text.substr(0, n));
      text.remove_prefix(n);
      continue;
    }
    constexpr char digits[] = "0123456789abcdef";
    const auto b = static_cast<unsigned char>(text[0]);
    out += "\\x";
    out += digits[b >> 4];
    out += digits[b & 0xf];
    text.remove_prefix(1);
  }
  return out;
}

namespace detail {

std::string joined_list(const std::vector<std::string>& items, std::size_t shown,
                        std::size_t total, std::string_view separator) {
  total = std::max(total, items.size());
  std::string out;
  const auto listed = total <= shown + 1 ? total : shown; // never "and 1 more"
  for (std::size_t i = 0; i < listed && i < items.size(); ++i) {
    if (i > 0)
      out += separator;
    out += items[i];
  }
  if (listed < total) {
    out += separator;
    out += "... and " + std::to_string(total - listed) + " more";
  }
  return out;
}

std::string workers_text(const std::vector<std::string>& ranks, std::size_t total) {
  const auto count = std::max(total, ranks.size());
  return (count == 1 ? "worker " : "workers ") + joined_list(ranks, items_in_errors, count);
}

} // namespace detail

} // namespace lockstep
