#include "printable.hpp"

#include "lockstep/text.hpp"

#include <charconv>

namespace fashion_mnist {

namespace {

void escape_byte(std::string& out, unsigned char byte) {
  constexpr char hex[] = "0123456789abcdef";
  out += "\\x";
  out += hex[byte >> 4];
  out += hex[byte & 0xf];
}

} // namespace

std::string printable(std::string_view text, bool controls) {
  auto valid = lockstep::escape_invalid_utf8(text);
  if (!controls)
    return valid;
  std::string out;
  out.reserve(valid.size());
  for (const char c : valid) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (byte < 0x20 || byte == 0x7f)
      escape_byte(out, byte);
    else
      out += c;
  }
  return out;
}

std::string number_text(double value) {
  char text[64];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return {text, end};
}

} // namespace fashion_mnist
