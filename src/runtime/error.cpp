#include "lockstep/error.hpp"

#include "lockstep/text.hpp"

namespace lockstep {

error::error(const std::string& what) : std::runtime_error(escape_invalid_utf8(what)) {}

error::error(const char* what) : error(std::string(what)) {}

} // namespace lockstep
