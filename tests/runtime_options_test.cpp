#include "lockstep/runtime_options.hpp"

#include "lockstep/error.hpp"
#include "runtime/log.hpp"
#include "runtime/spin_wait.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <csignal>
#include <array>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

using namespace std::chrono_literals;
using lockstep::runtime_options;
using lockstep::value_error;

namespace {

constexpr std::array<const char*, 9> variables{
  "LOCKSTEP_TIMEOUT",          "LOCKSTEP_SCHEDULER_THREADS", "LOCKSTEP_SCHEDULER_SLEEP_US",
  "LOCKSTEP_SCHEDULER_POLICY", "LOCKSTEP_LOG",               "LOCKSTEP_SPIN_US",
  "LOCKSTEP_TIMELINE",         "LOCKSTEP_TIMELINE_STEPS",    "LOCKSTEP_DUMP_SIGNAL",
};

/// Unsets every LOCKSTEP_* variable for the life of a test and restores the
/// caller's values afterwards, so a CI environment that sets them cannot
/// change the results.
class clean_environment {
public:
  clean_environment() {
    for (std::size_t i = 0; i < variables.size(); ++i) {
      if (const char* value = std::getenv(variables[i]))
        saved_[i] = value;
      ::unsetenv(variables[i]);
    }
  }

  clean_environment(const clean_environment&) = delete;
  clean_environment& operator=(const clean_environment&) = delete;

  ~clean_environment() {
    for (std::size_t i = 0; i < variables.size(); ++i) {
      if (saved_[i])
        ::setenv(variables[i], saved_[i]->c_str(), 1);
      else
        ::unsetenv(variables[i]);
    }
  }

  void set(const char* name, const char* value) { ::setenv(name, value, 1); }

  void unset(const char* name) { ::unsetenv(name); }

private:
  std::array<std::optional<std::string>, variables.size()> saved_;
};

/// from_environment() with only `name` set to `value`.
runtime_options with_variable(const char* name, const char* value) {
  clean_environment env;
  env.set(name, value);
  return runtime_options::from_environment();
}

} // namespace

// -- from_environment ---------------------------------------------------------

TEST_CASE("runtime_options: defaults without environment variables") {
  clean_environment env;
  auto opts = runtime_options::from_environment();
  CHECK(opts.timeout == 300s);
  CHECK(opts.scheduler_threads == 0);
  CHECK(opts.scheduler_moderate_sleep == 0us);
  CHECK(opts.scheduler_policy == "stealing");
  CHECK(opts.log_level == "warn");
  CHECK_NOTHROW(opts.validate());
}

TEST_CASE("runtime_options: an empty variable counts as unset") {
  clean_environment env;
  for (const char* name : variables)
    env.set(name, "");
  auto opts = runtime_options::from_environment();
  CHECK(opts.timeout == 300s);
  CHECK(opts.scheduler_threads == 0);
  CHECK(opts.scheduler_moderate_sleep == 0us);
  CHECK(opts.scheduler_policy == "stealing");
  CHECK(opts.log_level == "warn");
}

TEST_CASE("runtime_options: all variables at once") {
  clean_environment env;
  env.set("LOCKSTEP_TIMEOUT", "12");
  env.set("LOCKSTEP_SCHEDULER_THREADS", "3");
  env.set("LOCKSTEP_SCHEDULER_SLEEP_US", "50");
  env.set("LOCKSTEP_SCHEDULER_POLICY", "sharing");
  env.set("LOCKSTEP_LOG", "debug");
  auto opts = runtime_options::from_environment();
  CHECK(opts.timeout == 12s);
  CHECK(opts.scheduler_threads == 3);
  CHECK(opts.scheduler_moderate_sleep == 50us);
  CHECK(opts.scheduler_policy == "sharing");
  CHECK(opts.log_level == "debug");
  CHECK_NOTHROW(opts.validate());
}

TEST_CASE("runtime_options: LOCKSTEP_TIMEOUT is in seconds, may be fractional") {
  CHECK(with_variable("LOCKSTEP_TIMEOUT", "2.5").timeout == 2500ms);
  CHECK(with_variable("LOCKSTEP_TIMEOUT", "1").timeout == 1000ms);
  CHECK(with_variable("LOCKSTEP_TIMEOUT", "0.25").timeout == 250ms);
  CHECK(with_variable("LOCKSTEP_TIMEOUT", "1e-3").timeout == 1ms);
  CHECK(with_variable("LOCKSTEP_TIMEOUT", "3600").timeout == 3'600'000ms);
  CHECK(with_variable("LOCKSTEP_TIMEOUT", " 7 ").timeout == 7000ms);
  // Rounded to the nearest millisecond, but never down to 0.
  CHECK(with_variable("LOCKSTEP_TIMEOUT", "0.0104").timeout == 10ms);
  CHECK(with_variable("LOCKSTEP_TIMEOUT", "0.0001").timeout == 1ms);
  CHECK(with_variable("LOCKSTEP_TIMEOUT", "1e9").timeout == runtime_options::max_timeout);
}

TEST_CASE("runtime_options: malformed LOCKSTEP_TIMEOUT") {
  const std::string expected = "\" is not valid: expected a number of seconds greater than 0 "
                               "and at most 1e9, such as \"300\" or \"2.5\"";
  for (const char* text : {"abc", "-1", "0", "0.0", "-0.5", "nan", "NaN", "inf", "-inf", "2.5s",
                           "1,5", "2e9", "1e400", "+3", "0x10", "."}) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(with_variable("LOCKSTEP_TIMEOUT", text),
                         ("LOCKSTEP_TIMEOUT=\"" + std::string{text} + expected).c_str(),
                         value_error);
  }
}

TEST_CASE("runtime_options: LOCKSTEP_SCHEDULER_THREADS") {
  CHECK(with_variable("LOCKSTEP_SCHEDULER_THREADS", "0").scheduler_threads == 0);
  CHECK(with_variable("LOCKSTEP_SCHEDULER_THREADS", "1").scheduler_threads == 1);
  CHECK(with_variable("LOCKSTEP_SCHEDULER_THREADS", "16").scheduler_threads == 16);
  CHECK(with_variable("LOCKSTEP_SCHEDULER_THREADS", "4096").scheduler_threads == 4096);
  for (const char* text : {"four", "-1", "2.5", "4x", "4097", "99999999999999999999999", "+2"}) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(with_variable("LOCKSTEP_SCHEDULER_THREADS", text),
                         ("LOCKSTEP_SCHEDULER_THREADS=\"" + std::string{text}
                          + "\" is not valid: expected a whole number of threads from 0 (one "
                            "per hardware thread) to 4096")
                           .c_str(),
                         value_error);
  }
}

TEST_CASE("runtime_options: LOCKSTEP_SCHEDULER_SLEEP_US") {
  CHECK(with_variable("LOCKSTEP_SCHEDULER_SLEEP_US", "0").scheduler_moderate_sleep == 0us);
  CHECK(with_variable("LOCKSTEP_SCHEDULER_SLEEP_US", "50").scheduler_moderate_sleep == 50us);
  CHECK(with_variable("LOCKSTEP_SCHEDULER_SLEEP_US", "1000000").scheduler_moderate_sleep == 1s);
  for (const char* text : {"-5", "fifty", "50us", "1.5", "1000001"}) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(with_variable("LOCKSTEP_SCHEDULER_SLEEP_US", text),
                         ("LOCKSTEP_SCHEDULER_SLEEP_US=\"" + std::string{text}
                          + "\" is not valid: expected a whole number of microseconds from 0 "
                            "to 1000000")
                           .c_str(),
                         value_error);
  }
}

TEST_CASE("runtime_options: LOCKSTEP_SPIN_US") {
  CHECK(with_variable("LOCKSTEP_SPIN_US", "0").spin_wait == 0us);
  CHECK(with_variable("LOCKSTEP_SPIN_US", "20").spin_wait == 20us);
  for (const char* text : {"-1", "lots", "1000001"}) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(with_variable("LOCKSTEP_SPIN_US", text),
                         ("LOCKSTEP_SPIN_US=\"" + std::string{text}
                          + "\" is not valid: expected a whole number of microseconds from 0 "
                            "to 1000000")
                           .c_str(),
                         value_error);
  }
  runtime_options opts;
  opts.spin_wait = -1us;
  CHECK_THROWS_WITH_AS(opts.validate(), "runtime_options::spin_wait must be from 0 to 1000000 us, got -1 us",
                       value_error);
}

TEST_CASE("waits on other processes spin for spin_wait, yielding between polls once this host's "
          "runnable threads outnumber its CPUs") {
  const auto cpus = lockstep::detail::usable_cpus();
  REQUIRE(cpus >= 1);
  const auto fits = lockstep::detail::spin_for_runnable(cpus, 50us);
  CHECK(fits.budget == 50us);
  CHECK_FALSE(fits.yield);
  const auto crowded = lockstep::detail::spin_for_runnable(cpus + 1, 50us);
  CHECK(crowded.budget == 50us);
  CHECK(crowded.yield);
}

TEST_CASE("runtime_options: LOCKSTEP_SCHEDULER_POLICY") {
  CHECK(with_variable("LOCKSTEP_SCHEDULER_POLICY", "stealing").scheduler_policy == "stealing");
  CHECK(with_variable("LOCKSTEP_SCHEDULER_POLICY", "sharing").scheduler_policy == "sharing");
  CHECK(with_variable("LOCKSTEP_SCHEDULER_POLICY", "Sharing").scheduler_policy == "sharing");
  CHECK_THROWS_WITH_AS(
    with_variable("LOCKSTEP_SCHEDULER_POLICY", "fifo"),
    "LOCKSTEP_SCHEDULER_POLICY=\"fifo\" is not valid: expected one of stealing, sharing",
    value_error);
}

TEST_CASE("runtime_options: LOCKSTEP_LOG") {
  for (const char* level : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    CAPTURE(level);
    CHECK(with_variable("LOCKSTEP_LOG", level).log_level == level);
  }
  CHECK(with_variable("LOCKSTEP_LOG", "DEBUG").log_level == "debug");
  CHECK(with_variable("LOCKSTEP_LOG", "warning").log_level == "warn");
  CHECK_THROWS_WITH_AS(with_variable("LOCKSTEP_LOG", "loud"),
                       "LOCKSTEP_LOG=\"loud\" is not valid: expected one of trace, debug, "
                       "info, warn, error, critical, off",
                       value_error);
}

TEST_CASE("runtime_options: LOCKSTEP_TIMELINE and LOCKSTEP_TIMELINE_STEPS") {
  CHECK(with_variable("LOCKSTEP_TIMELINE", "trace.json").timeline == "trace.json");
  for (const char* steps : {"first:5,last:0", "3-9", "every:100"}) {
    CAPTURE(steps);
    CHECK(with_variable("LOCKSTEP_TIMELINE_STEPS", steps).timeline_steps == steps);
  }
  CHECK_THROWS_WITH_AS(with_variable("LOCKSTEP_TIMELINE_STEPS", "every:0"),
                       "LOCKSTEP_TIMELINE_STEPS=\"every:0\" is not valid: expected "
                       "\"first:F,last:L\", \"A-B\" or \"every:K\"",
                       value_error);
}

TEST_CASE("runtime_options: LOCKSTEP_DUMP_SIGNAL") {
  CHECK(with_variable("LOCKSTEP_DUMP_SIGNAL", "SIGUSR1").dump_signal == SIGUSR1);
  CHECK(with_variable("LOCKSTEP_DUMP_SIGNAL", "USR2").dump_signal == SIGUSR2);
  CHECK(with_variable("LOCKSTEP_DUMP_SIGNAL", "10").dump_signal == 10);
  for (const char* bad : {"SIGKILL", "SIGSEGV", "STOP", "0", "999", "SIGNOPE", "-1"}) {
    CAPTURE(bad);
    const auto message =
      error_of<value_error>([&] { with_variable("LOCKSTEP_DUMP_SIGNAL", bad); });
    CHECK(message.find("LOCKSTEP_DUMP_SIGNAL") != std::string::npos);
  }
  runtime_options bad;
  bad.dump_signal = SIGKILL;
  CHECK_THROWS_AS(bad.validate(), value_error);
}

// -- validate -----------------------------------------------------------------

TEST_CASE("runtime_options: validate names the field and the value") {
  runtime_options opts;
  CHECK_NOTHROW(opts.validate());

  opts = {};
  opts.timeout = 0ms;
  CHECK_THROWS_WITH_AS(opts.validate(),
                       "runtime_options::timeout must be greater than 0 and at most 1e9 s, "
                       "got 0 ms",
                       value_error);
  opts.timeout = -5ms;
  CHECK_THROWS_AS(opts.validate(), value_error);
  opts.timeout = runtime_options::max_timeout + 1ms;
  CHECK_THROWS_AS(opts.validate(), value_error);

  opts = {};
  opts.scheduler_threads = 5000;
  CHECK_THROWS_WITH_AS(opts.validate(),
                       "runtime_options::scheduler_threads must be at most 4096, got 5000",
                       value_error);

  opts = {};
  opts.scheduler_moderate_sleep = -1us;
  CHECK_THROWS_WITH_AS(opts.validate(),
                       "runtime_options::scheduler_moderate_sleep must be from 0 to 1000000 "
                       "us, got -1 us",
                       value_error);

  opts = {};
  opts.scheduler_policy = "Sharing";
  CHECK_THROWS_WITH_AS(opts.validate(),
                       "runtime_options::scheduler_policy must be one of stealing, sharing, "
                       "got \"Sharing\"",
                       value_error);

  opts = {};
  opts.log_level = "verbose";
  CHECK_THROWS_WITH_AS(opts.validate(),
                       "runtime_options::log_level must be one of trace, debug, info, warn, "
                       "error, critical, off, got \"verbose\"",
                       value_error);
}

// -- the process-wide settings ------------------------------------------------

// The only test case that touches the process-wide settings, so its steps
// run in order whatever order doctest picks for the test cases.
TEST_CASE("runtime_options: get_runtime_options and set_runtime_options") {
  clean_environment env;

  // First use reads the environment; a malformed value throws and leaves
  // nothing behind, so the next call reads the environment again.
  env.set("LOCKSTEP_TIMEOUT", "soon");
  CHECK_THROWS_AS(lockstep::get_runtime_options(), value_error);
  env.set("LOCKSTEP_TIMEOUT", "2.5");
  env.set("LOCKSTEP_LOG", "error");
  const runtime_options& first = lockstep::get_runtime_options();
  CHECK(first.timeout == 2500ms);
  CHECK(first.log_level == "error");
  CHECK(lockstep::detail::logger().level() == spdlog::level::err);

  // Later changes to the environment do not matter any more.
  env.set("LOCKSTEP_TIMEOUT", "9");
  CHECK(&lockstep::get_runtime_options() == &first);
  CHECK(lockstep::get_runtime_options().timeout == 2500ms);

  // set_runtime_options validates, replaces the settings and sets the log
  // level; references to the old settings stay valid and unchanged.
  runtime_options bad;
  bad.scheduler_policy = "random";
  CHECK_THROWS_AS(lockstep::set_runtime_options(bad), value_error);
  CHECK(&lockstep::get_runtime_options() == &first);

  runtime_options next;
  next.timeout = 40ms;
  next.scheduler_threads = 2;
  next.log_level = "info";
  lockstep::set_runtime_options(next);
  const auto& current = lockstep::get_runtime_options();
  CHECK(current.timeout == 40ms);
  CHECK(current.scheduler_threads == 2);
  CHECK(current.log_level == "info");
  CHECK(first.timeout == 2500ms);
  CHECK(lockstep::detail::logger().level() == spdlog::level::info);

  // Log arguments are evaluated only when the level is enabled.
  int evaluated = 0;
  auto count = [&evaluated] { return ++evaluated; };
  LOCKSTEP_LOG_DEBUG("not shown {}", count());
  CHECK(evaluated == 0);
  next.log_level = "off";
  lockstep::set_runtime_options(next);
  CHECK(lockstep::detail::logger().level() == spdlog::level::off);
  LOCKSTEP_LOG_CRITICAL("not shown either {}", count());
  CHECK(evaluated == 0);
}
