#include "lockstep/error.hpp"

#include "error_text.hpp"

namespace lockstep {

error::error(const std::string& what) : std::runtime_error(detail::escape_invalid_utf8(what)) {}

error::error(const char* what) : error(std::string(what)) {}

} // namespace lockstep
