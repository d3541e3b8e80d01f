#include "printable.hpp"

#include <charconv>
#include <cstdint>

namespace fashion_mnist {

namespace {

void escape_byte(std::string& out, unsigned char byte) {
  constexpr char hex[] = "0123456789abcdef";
  out += "\\x";
  out += hex[byte >> 4];
  out += hex[byte & 0xf];
}

/// The length of the valid UTF-8 sequence at the start of `text`, 0 if
/// there is none (RFC 3629: no overlong forms, no surrogates, nothing above
/// U+10FFFF).
std::size_t utf8_sequence(std::string_view text) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const auto lead = byte(0);
  if (lead < 0x80)
    return 1;
  std::size_t length = 0;
  std::uint32_t low = 0, high = 0xbf; // the range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf)
    length = 2, low = 0x80;
  else if (lead == 0xe0)
    length = 3, low = 0xa0;
  else if (lead == 0xed)
    length = 3, low = 0x80, high = 0x9f;
  else if (lead >= 0xe1 && lead <= 0xef)
    length = 3, low = 0x80;
  else if (lead == 0xf0)
    length = 4, low = 0x90;
  else if (lead >= 0xf1 && lead <= 0xf3)
    length = 4, low = 0x80;
  else if (lead == 0xf4)
    length = 4, low = 0x80, high = 0x8f;
  else
    return 0;
  if (text.size() < length || byte(1) < low || byte(1) > high)
    return 0;
  for (std::size_t i = 2; i < length; ++i)
    if (byte(i) < 0x80 || byte(i) > 0xbf)
      return 0;
  return length;
}

} // namespace

std::string printable(std::string_view text, bool controls) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const auto length = utf8_sequence(text);
    const auto first = static_cast<unsigned char>(text[0]);
    if (length == 0) {
      escape_byte(out, first);
      text.remove_prefix(1);
      continue;
    }
    if (controls && length == 1 && (first < 0x20 || first == 0x7f)) {
      if (first == '\n')
        out += "\\n";
      else if (first == '\t')
        out += "\\t";
      else
        escape_byte(out, first);
    } else {
      out.append(text.substr(0, length));
    }
    text.remove_prefix(length);
  }
  return out;
}

std::string number_text(double value) {
  char text[64];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return {text, end};
}

} // namespace fashion_mnist
