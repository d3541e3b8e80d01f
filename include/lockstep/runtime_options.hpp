#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace lockstep {

/// Process-wide runtime settings, in one place. Each has a default and a
/// `LOCKSTEP_*` environment variable that overrides it (an empty variable
/// counts as unset). Strategies and actor systems read them when they are
/// created.
struct runtime_options {
  // -- settings ---------------------------------------------------------------

  /// Default deadline of every blocking wait (run, merge_call, collectives);
  /// a wait that runs out throws `timeout_error`. TF has none; we default to
  /// 300 s. `LOCKSTEP_TIMEOUT`: seconds, may be fractional ("2.5"); rounded
  /// to the nearest millisecond, at least 1 ms, at most `max_timeout`.
  std::chrono::milliseconds timeout{std::chrono::seconds{300}};

  /// CAF scheduler worker threads; 0 = the number of hardware threads.
  /// `LOCKSTEP_SCHEDULER_THREADS`: a whole number, at most
  /// `max_scheduler_threads`.
  std::size_t scheduler_threads = 0;

  /// CAF work-stealing moderate sleep: how long an idle worker sleeps between
  /// polls. CAF's default of 50 us makes a hop from a plain thread to the
  /// scheduler cost ~85 us; 0 cuts it to ~10 us with no measurable idle CPU.
  /// `LOCKSTEP_SCHEDULER_SLEEP_US`: whole microseconds, at most
  /// `max_scheduler_moderate_sleep`.
  std::chrono::microseconds scheduler_moderate_sleep{0};

  /// CAF scheduler policy: "stealing" or "sharing".
  /// `LOCKSTEP_SCHEDULER_POLICY` (case-insensitive).
  std::string scheduler_policy = "stealing";

  /// How long a replica or strategy actor thread polls its mailbox before it
  /// sleeps, when the strategy's threads fit on the hardware threads (never
  /// when oversubscribed). On VMs whose idle vCPUs halt, a wake-up across
  /// CPUs costs tens of microseconds; polling briefly avoids it.
  /// `LOCKSTEP_SPIN_US`: whole microseconds, at most `max_spin_wait`; 0 off.
  std::chrono::microseconds spin_wait{50};

  /// Level of lockstep's log on stderr: "trace", "debug", "info", "warn",
  /// "error", "critical" or "off". `LOCKSTEP_LOG` (case-insensitive;
  /// "warning" means "warn").
  std::string log_level = "warn";

  /// Where to write a timeline of what the replicas, variables, input and
  /// collectives do (Chrome trace-event JSON, for Perfetto or
  /// chrome://tracing; docs/timeline.md); empty: none, and then recording
  /// costs one branch per event. A recording starts with the first
  /// strategy created while this is set and ends, writing the file's
  /// tail, when the last such strategy is gone. `LOCKSTEP_TIMELINE`.
  std::string timeline;

  /// Which steps the timeline keeps: "first:F,last:L" (the default,
  /// "first:50,last:50"), "A-B" (steps A to B, from 0) or "every:K" (every
  /// K-th step), so that a long job writes a bounded file. "" is the
  /// default. `LOCKSTEP_TIMELINE_STEPS`.
  std::string timeline_steps;

  /// A signal that makes the process write its flight recorders
  /// (lockstep::dump_flight_recorders) without stopping, e.g. SIGUSR1; 0:
  /// none. Watched on a thread of its own with sigwait (watch_dump_signal).
  /// `LOCKSTEP_DUMP_SIGNAL`: a name (`SIGUSR1`, `USR1`) or a number. Not
  /// SIGKILL, SIGSTOP, or a signal the kernel raises for a fault (SIGSEGV,
  /// SIGBUS, SIGFPE, SIGILL, SIGTRAP).
  int dump_signal = 0;

  // -- limits: larger values are rejected ------------------------------------

  /// The longest `timeout`: 10^9 s, so that a deadline in nanoseconds
  /// (`steady_clock::now() + timeout`) cannot overflow.
  static constexpr std::chrono::milliseconds max_timeout{std::chrono::seconds{1'000'000'000}};

  /// The most `scheduler_threads`.
  static constexpr std::size_t max_scheduler_threads = 4096;

  /// The longest `scheduler_moderate_sleep`: 1 s.
  static constexpr std::chrono::microseconds max_scheduler_moderate_sleep{std::chrono::seconds{1}};

  /// The longest `spin_wait`: 1 s.
  static constexpr std::chrono::microseconds max_spin_wait{std::chrono::seconds{1}};

  // -- construction and checks -----------------------------------------------

  /// The defaults, overridden by the `LOCKSTEP_*` environment variables that
  /// are set. A malformed value throws `value_error` naming the variable and
  /// its text.
  static runtime_options from_environment();

  /// Throws `value_error` naming the field if a setting is out of range: a
  /// timeout <= 0 or above `max_timeout`, a sleep or spin < 0 or above its maximum,
  /// too many threads, a policy or log level other than the lower-case
  /// names listed above, timeline steps in none of the forms above, or a
  /// dump signal that is not a signal or may not be waited for.
  void validate() const;
};

/// The process-wide settings: `runtime_options::from_environment()` on first
/// use, unless `set_runtime_options` ran first. The reference stays valid for
/// the life of the process, even after `set_runtime_options`.
const runtime_options& get_runtime_options();

/// Validates `options` (see `runtime_options::validate`) and makes them the
/// process-wide settings. Actor systems and strategies created afterwards use
/// them; the log level changes at once.
void set_runtime_options(runtime_options options);

} // namespace lockstep
