#include "runtime/log.hpp"

#include "lockstep/error.hpp"
#include "lockstep/runtime_options.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <memory>
#include <utility>

namespace lockstep::detail {

namespace {

spdlog::level::level_enum to_spdlog_level(std::string_view level) {
  using spdlog::level::level_enum;
  constexpr std::pair<std::string_view, level_enum> levels[] = {
    {"trace", level_enum::trace}, {"debug", level_enum::debug},
    {"info", level_enum::info},   {"warn", level_enum::warn},
    {"error", level_enum::err},   {"critical", level_enum::critical},
    {"off", level_enum::off},
  };
  for (const auto& [name, value] : levels)
    if (name == level)
      return value;
  return level_enum::warn;
}

std::shared_ptr<spdlog::logger> make_logger() {
  if (auto existing = spdlog::get("lockstep"))
    return existing;
  auto result = std::make_shared<spdlog::logger>(
    "lockstep", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  try {
    result->set_level(to_spdlog_level(get_runtime_options().log_level));
  } catch (const error&) {
    result->set_level(spdlog::level::warn);
  }
  // Registering lets applications reach it with spdlog::get("lockstep"). If
  // another thread registered one in between, log through that one.
  try {
    spdlog::register_logger(result);
  } catch (const spdlog::spdlog_ex&) {
    if (auto existing = spdlog::get("lockstep"))
      return existing;
  }
  return result;
}

} // namespace

spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> instance = make_logger();
  return *instance;
}

void set_log_level(std::string_view level) {
  logger().set_level(to_spdlog_level(level));
}

} // namespace lockstep::detail
