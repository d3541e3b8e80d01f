#pragma once

// Text from users and files made safe to print: what lockstep does to every
// error message (lockstep::error), for an application's own messages too.

#include <string>
#include <string_view>

namespace lockstep {

/// `text` with every byte that is not part of a valid UTF-8 sequence
/// (stray continuation bytes, truncated or overlong sequences, surrogates,
/// code points above U+10FFFF) written as `\xNN`. Valid text comes back
/// unchanged, so escaping twice changes nothing more.
std::string escape_invalid_utf8(std::string_view text);

} // namespace lockstep
