#pragma once

// lockstep's internal log: one spdlog logger named "lockstep" on stderr, at
// the level of get_runtime_options().log_level ("warn" unless LOCKSTEP_LOG
// says otherwise). Debian's CAF has its own logging compiled out, so this is
// the only log. Messages use fmt format strings:
//
//   LOCKSTEP_LOG_DEBUG("replica {} joined merge_call {}", rank, seq);
//
// The arguments are evaluated only when the level is enabled.

#include <spdlog/spdlog.h>

#include <string_view>

namespace lockstep::detail {

/// The "lockstep" logger, created on first use and registered with spdlog.
/// If an application registered a logger of that name first, lockstep logs
/// through it and keeps its level until set_runtime_options runs. Logging
/// never throws: a malformed LOCKSTEP_LOG leaves the level at "warn" (the
/// error surfaces where the runtime options are read).
spdlog::logger& logger();

/// Sets the logger's level from one of runtime_options' level names
/// ("trace" ... "off"); an unknown name means "warn".
void set_log_level(std::string_view level);

} // namespace lockstep::detail

/// Logs at `level` (an spdlog::level::level_enum) if that level is enabled.
#define LOCKSTEP_LOG_AT(level, ...)                                                               \
  do {                                                                                             \
    auto& lockstep_log_logger_ = ::lockstep::detail::logger();                                     \
    if (lockstep_log_logger_.should_log(level))                                                    \
      lockstep_log_logger_.log(level, __VA_ARGS__);                                                \
  } while (false)

#define LOCKSTEP_LOG_TRACE(...) LOCKSTEP_LOG_AT(::spdlog::level::trace, __VA_ARGS__)
#define LOCKSTEP_LOG_DEBUG(...) LOCKSTEP_LOG_AT(::spdlog::level::debug, __VA_ARGS__)
#define LOCKSTEP_LOG_INFO(...) LOCKSTEP_LOG_AT(::spdlog::level::info, __VA_ARGS__)
#define LOCKSTEP_LOG_WARN(...) LOCKSTEP_LOG_AT(::spdlog::level::warn, __VA_ARGS__)
#define LOCKSTEP_LOG_ERROR(...) LOCKSTEP_LOG_AT(::spdlog::level::err, __VA_ARGS__)
#define LOCKSTEP_LOG_CRITICAL(...) LOCKSTEP_LOG_AT(::spdlog::level::critical, __VA_ARGS__)
