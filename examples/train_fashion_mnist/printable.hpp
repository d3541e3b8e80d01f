#pragma once

// Text given by a person (paths, option values) as it may appear in an
// error message or a note: a path on Linux is any bytes but '/' and NUL,
// and a terminal or a log reader shown raw bytes may garble them, or be
// driven by control sequences hidden in them.

#include <string>
#include <string_view>

namespace fashion_mnist {

/// `text` with every byte that is not part of valid UTF-8 written as
/// `\xNN`, and also, when `controls` is true, every ASCII control character
/// (newline, tab, escape, DEL, ...) as `\n`, `\t` or `\xNN`. Valid UTF-8
/// other than those passes unchanged, so calling it on an already escaped
/// message changes nothing: main() applies it with `controls` false to
/// every error message, whose own line breaks it keeps.
std::string printable(std::string_view text, bool controls = true);

/// The shortest text that reads back as `value` (std::to_chars): "0.001",
/// "1e-07", "1e+30", so that two settings that differ print differently.
std::string number_text(double value);

} // namespace fashion_mnist
