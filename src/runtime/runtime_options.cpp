#include "lockstep/runtime_options.hpp"

#include "lockstep/error.hpp"
#include "runtime/log.hpp"
#include "runtime/timeline.hpp"

#include <csignal>
#include <cstring>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <forward_list>
#include <mutex>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>

namespace lockstep {

namespace {

constexpr std::array<std::string_view, 7> log_levels{"trace", "debug", "info", "warn",
                                                     "error", "critical", "off"};
constexpr std::array<std::string_view, 2> scheduler_policies{"stealing", "sharing"};

template <std::size_t N>
bool is_one_of(std::string_view text, const std::array<std::string_view, N>& names) {
  return std::find(names.begin(), names.end(), text) != names.end();
}

template <std::size_t N>
std::string join(const std::array<std::string_view, N>& names) {
  std::string result;
  for (auto name : names) {
    if (!result.empty())
      result += ", ";
    result += name;
  }
  return result;
}

// -- reading environment variables --------------------------------------------

/// The variable's text, or nothing when it is unset or empty.
std::optional<std::string> env_text(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0')
    return std::nullopt;
  return std::string{value};
}

std::string_view trim(std::string_view text) {
  constexpr std::string_view blanks = " \t\n\r\f\v";
  auto first = text.find_first_not_of(blanks);
  if (first == std::string_view::npos)
    return {};
  auto last = text.find_last_not_of(blanks);
  return text.substr(first, last - first + 1);
}

std::string to_lower(std::string_view text) {
  std::string result{text};
  for (auto& c : result)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return result;
}

[[noreturn]] void throw_bad_variable(const char* name, const std::string& text,
                                     std::string_view expected) {
  std::string message = name;
  message += "=\"";
  message += text;
  message += "\" is not valid: expected ";
  message += expected;
  throw value_error(message);
}

/// A whole number in [0, max], or nothing.
std::optional<std::uint64_t> parse_count(std::string_view text, std::uint64_t max) {
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value > max)
    return std::nullopt;
  return value;
}

/// Seconds ("300", "2.5", "1e-3") as milliseconds, rounded to the nearest
/// millisecond but at least 1 ms; nothing unless the text is a finite number
/// in (0, max].
std::optional<std::chrono::milliseconds> parse_seconds(std::string_view text,
                                                       std::chrono::milliseconds max) {
  double seconds = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(seconds)
      || seconds <= 0)
    return std::nullopt;
  double millis = std::round(seconds * 1000.0);
  if (millis > static_cast<double>(max.count()))
    return std::nullopt;
  return std::chrono::milliseconds{std::max<std::int64_t>(1, static_cast<std::int64_t>(millis))};
}

// -- the process-wide settings ------------------------------------------------

/// Every value the settings ever had, newest first. Old values are kept so
/// that references from get_runtime_options() stay valid; set_runtime_options
/// is rare, so the list stays short.
struct process_settings {
  std::mutex mutex;
  std::forward_list<runtime_options> history;
  std::atomic<const runtime_options*> current{nullptr};
};

/// "SIGUSR1", "USR1" or "10": the signal's number.
std::optional<int> parse_signal(std::string_view text) {
  if (text.starts_with("SIG"))
    text.remove_prefix(3);
  for (int s = 1; s < NSIG; ++s)
    if (const char* name = ::sigabbrev_np(s); name != nullptr && text == name)
      return s;
  int number = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (error != std::errc{} || end != text.data() + text.size())
    return std::nullopt;
  return number;
}

/// A signal sigwait may take: not one the kernel raises for a fault, nor
/// one that cannot be blocked.
bool dump_signal_allowed(int signal) {
  if (signal <= 0 || signal >= NSIG)
    return false;
  for (const int refused : {SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP})
    if (signal == refused)
      return false;
  return true;
}

process_settings& settings() {
  static process_settings instance;
  return instance;
}

/// A variable of whole microseconds from 0 to `max`, if it is set.
std::optional<std::chrono::microseconds> env_microseconds(const char* variable,
                                                          std::chrono::microseconds max) {
  auto text = env_text(variable);
  if (!text)
    return std::nullopt;
  const auto limit = static_cast<std::uint64_t>(max.count());
  auto value = parse_count(trim(*text), limit);
  if (!value)
    throw_bad_variable(variable, *text,
                       "a whole number of microseconds from 0 to " + std::to_string(limit));
  return std::chrono::microseconds{static_cast<std::int64_t>(*value)};
}

} // namespace

// -- runtime_options ----------------------------------------------------------

runtime_options runtime_options::from_environment() {
  runtime_options result;
  if (auto text = env_text("LOCKSTEP_TIMEOUT")) {
    auto value = parse_seconds(trim(*text), max_timeout);
    if (!value)
      throw_bad_variable("LOCKSTEP_TIMEOUT", *text,
                         "a number of seconds greater than 0 and at most 1e9, such as "
                         "\"300\" or \"2.5\"");
    result.timeout = *value;
  }
  if (auto text = env_text("LOCKSTEP_SCHEDULER_THREADS")) {
    auto value = parse_count(trim(*text), max_scheduler_threads);
    if (!value)
      throw_bad_variable("LOCKSTEP_SCHEDULER_THREADS", *text,
                         "a whole number of threads from 0 (one per hardware thread) to "
                             + std::to_string(max_scheduler_threads));
    result.scheduler_threads = static_cast<std::size_t>(*value);
  }
  if (auto value = env_microseconds("LOCKSTEP_SCHEDULER_SLEEP_US", max_scheduler_moderate_sleep))
    result.scheduler_moderate_sleep = *value;
  if (auto value = env_microseconds("LOCKSTEP_SPIN_US", max_spin_wait))
    result.spin_wait = *value;
  if (auto text = env_text("LOCKSTEP_SCHEDULER_POLICY")) {
    auto policy = to_lower(trim(*text));
    if (!is_one_of(policy, scheduler_policies))
      throw_bad_variable("LOCKSTEP_SCHEDULER_POLICY", *text,
                         "one of " + join(scheduler_policies));
    result.scheduler_policy = std::move(policy);
  }
  if (auto text = env_text("LOCKSTEP_LOG")) {
    auto level = to_lower(trim(*text));
    if (level == "warning")
      level = "warn";
    if (!is_one_of(level, log_levels))
      throw_bad_variable("LOCKSTEP_LOG", *text, "one of " + join(log_levels));
    result.log_level = std::move(level);
  }
  if (auto text = env_text("LOCKSTEP_TIMELINE"))
    result.timeline = *text;
  if (auto text = env_text("LOCKSTEP_DUMP_SIGNAL")) {
    const auto signal = parse_signal(trim(*text));
    if (!signal || !dump_signal_allowed(*signal))
      throw_bad_variable("LOCKSTEP_DUMP_SIGNAL", *text,
                         "a signal name such as SIGUSR1, or its number, other than SIGKILL, "
                         "SIGSTOP and the fault signals");
    result.dump_signal = *signal;
  }
  if (auto text = env_text("LOCKSTEP_TIMELINE_STEPS")) {
    try {
      detail::timeline_window::parse(trim(*text));
    } catch (const value_error&) {
      throw_bad_variable("LOCKSTEP_TIMELINE_STEPS", *text,
                         "\"first:F,last:L\", \"A-B\" or \"every:K\"");
    }
    result.timeline_steps = std::string{trim(*text)};
  }
  return result;
}

void runtime_options::validate() const {
  auto fail = [](std::string message) { throw value_error("runtime_options::" + message); };
  if (timeout.count() <= 0 || timeout > max_timeout)
    fail("timeout must be greater than 0 and at most 1e9 s, got "
         + std::to_string(timeout.count()) + " ms");
  if (scheduler_threads > max_scheduler_threads)
    fail("scheduler_threads must be at most " + std::to_string(max_scheduler_threads)
         + ", got " + std::to_string(scheduler_threads));
  if (scheduler_moderate_sleep.count() < 0
      || scheduler_moderate_sleep > max_scheduler_moderate_sleep)
    fail("scheduler_moderate_sleep must be from 0 to "
         + std::to_string(max_scheduler_moderate_sleep.count()) + " us, got "
         + std::to_string(scheduler_moderate_sleep.count()) + " us");
  if (spin_wait.count() < 0 || spin_wait > max_spin_wait)
    fail("spin_wait must be from 0 to " + std::to_string(max_spin_wait.count()) + " us, got "
         + std::to_string(spin_wait.count()) + " us");
  if (!is_one_of(scheduler_policy, scheduler_policies))
    fail("scheduler_policy must be one of " + join(scheduler_policies) + ", got \""
         + scheduler_policy + "\"");
  if (!is_one_of(log_level, log_levels))
    fail("log_level must be one of " + join(log_levels) + ", got \"" + log_level + "\"");
  try {
    detail::timeline_window::parse(timeline_steps);
  } catch (const value_error& e) {
    fail(std::string{"timeline_steps: "} + e.what());
  }
  if (dump_signal != 0 && !dump_signal_allowed(dump_signal))
    fail("dump_signal must be 0 or a signal other than SIGKILL, SIGSTOP and the fault "
         "signals, got " + std::to_string(dump_signal));
}

// -- process-wide settings ----------------------------------------------------

const runtime_options& get_runtime_options() {
  auto& state = settings();
  if (auto* current = state.current.load(std::memory_order_acquire))
    return *current;
  std::lock_guard guard{state.mutex};
  if (auto* current = state.current.load(std::memory_order_relaxed))
    return *current;
  auto& stored = state.history.emplace_front(runtime_options::from_environment());
  state.current.store(&stored, std::memory_order_release);
  return stored;
}

void set_runtime_options(runtime_options options) {
  options.validate();
  auto& state = settings();
  std::string level = options.log_level;
  {
    std::lock_guard guard{state.mutex};
    auto& stored = state.history.emplace_front(std::move(options));
    state.current.store(&stored, std::memory_order_release);
  }
  detail::set_log_level(level);
}

} // namespace lockstep
