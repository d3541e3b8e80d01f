#pragma once

// The timeline: spans of what replicas, variable executors, input and the
// strategy actor do, written as Chrome trace-event JSON (Perfetto,
// chrome://tracing). Off by default; then every record site costs one
// load and one predictable branch (`timeline_on()`).
//
// When on, a thread records into its own ring of fixed size, without
// locks; a writer thread drains the rings every few milliseconds. When a
// ring is full the event is counted as dropped, never queued beyond it.
// The writer keeps only the steps the window asks for (timeline_window):
// those at the head are written as they come, the last `last` steps are
// held until the recording ends and written then, the rest are dropped.
//
// A step is one replica step: each `run` is one, and a multi-step loop's
// call is as many as it runs. Events on a replica's thread belong to that
// replica's step; a variable write to the step it was posted in; events
// on other threads to the step a replica entered last.
//
// A recording starts with the first strategy created while
// runtime_options::timeline names a file, and ends, writing the file's
// tail, when the last strategy holding it is gone (timeline_hold).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace lockstep::detail {

/// Which steps a recording keeps: steps [from, to] when `to` >= 0, or every
/// `every`-th step when `every` > 0, or else the first `first` and the last
/// `last`. Parsed from runtime_options::timeline_steps.
struct timeline_window {
  std::int64_t first = 50;
  std::int64_t last = 50;
  std::int64_t from = 0;
  std::int64_t to = -1;
  std::int64_t every = 0;

  /// "first:F,last:L", "A-B" (steps A to B), or "every:K"; "" is the
  /// default. Throws value_error naming the text otherwise.
  static timeline_window parse(std::string_view text);
  /// Whether step `step` is written as soon as it is drained.
  bool at_head(std::int64_t step) const noexcept;
  /// How many of the newest steps are held to be written at the end:
  /// `last` in the first/last form, else none.
  std::int64_t kept_last() const noexcept { return to < 0 && every == 0 ? last : 0; }
};

/// Who a span belongs to: one track per replica, per device's variable
/// executor, per input pipeline, plus the strategy actor and the
/// process itself.
enum class track_kind : std::uint8_t { process, strategy_actor, replica, variables, input };

/// A track's id for `kind`, `index` and `name` (a replica's global index;
/// for the variables of a device, its name); named `name`, or by default
/// "replica 0", "input 0", on first use.
std::uint32_t timeline_track(track_kind kind, std::uint32_t index, std::string_view name = {});

/// What a span says beyond its name (Chrome's "args"); unset fields are
/// left out. `op` and `dtype` must be static strings (to_string of the
/// enums); the two texts are copied, cut at 31 bytes.
struct timeline_args {
  const char* op = nullptr;
  const char* dtype = nullptr;
  std::int64_t bytes = -1;
  std::int64_t seq = -1;
  std::int64_t wait_ns = -1;
  std::int64_t reduce_ns = -1;
  char algorithm[32] = {};
  char label[32] = {};
  static void copy(char (&to)[32], std::string_view text) noexcept;
};

extern std::atomic<bool> timeline_enabled;

/// Whether a recording runs: the one branch every record site takes (a
/// relaxed load is a plain load).
inline bool timeline_on() noexcept {
  return __builtin_expect(timeline_enabled.load(std::memory_order_relaxed), false);
}

/// Nanoseconds on the recording's clock: steady_clock, plus the test hook
/// LOCKSTEP_TIMELINE_TEST_SKEW_NS (a whole number of nanoseconds, read
/// once), which shifts this process's clock to show that the workers'
/// timelines are aligned (clock_sync.hpp) whatever their clocks say.
std::int64_t timeline_now() noexcept;

/// A worker of several: the coordinator's clock minus this one's
/// (`offset_ns`, right to within `error_ns`), measured at the rendezvous.
/// The recording writes its times on the coordinator's clock from then
/// on, and both figures in its `lockstep` record.
void timeline_set_clock(std::int64_t offset_ns, std::int64_t error_ns) noexcept;

/// timeline_now() when the current recording started (its events' time
/// 0); 0 when none ever ran.
std::int64_t timeline_origin() noexcept;

/// Records a span [start, end] on `track` (Chrome's "X" event).
void timeline_span(std::uint32_t track, const char* name, const char* category,
                   std::int64_t start, std::int64_t end, const timeline_args& args = {});

/// Records one end of a flow arrow (Chrome's "s" / "f" events) at `at`:
/// the arrows with one `id` join the spans that enclose their ends.
void timeline_flow(std::uint32_t track, std::uint64_t id, bool start, std::int64_t at);

/// Reserves `count` consecutive step numbers and returns the first.
std::int64_t timeline_begin_steps(std::int64_t count) noexcept;

/// The step this thread's events belong to (a replica's call's first
/// step); -1: the latest step begun. A multi-step loop's replica moves on
/// with timeline_loop_step (declared in lockstep/strategy.hpp).
void timeline_set_thread_step(std::int64_t step) noexcept;

/// The step this thread's next event belongs to (-1 before any).
std::int64_t timeline_step() noexcept;

/// Makes this thread's events belong to `step` for its lifetime (a
/// variable write applied on an executor: the step it was posted in).
class timeline_step_scope {
public:
  explicit timeline_step_scope(std::int64_t step) noexcept;
  timeline_step_scope(const timeline_step_scope&) = delete;
  timeline_step_scope& operator=(const timeline_step_scope&) = delete;
  ~timeline_step_scope();

private:
  std::int64_t outer_step_;
  std::int64_t outer_first_;
};

/// The id of the flow arrow from replica `replica`'s merge_call wait in
/// call `seq` of `strategy` to the merge function it waits for.
std::uint64_t timeline_merge_flow(const void* strategy, std::uint64_t seq,
                                  std::size_t replica) noexcept;

/// A running recording of the timeline (what timeline_hold holds).
class timeline_recording;

/// Keeps the recording of runtime_options::timeline running while held;
/// starts one if none runs and the option names a file (for worker `rank`
/// of several, that name with ".rank-N" after it). The last holder's
/// release ends it and writes the file's tail. Null when no timeline is
/// asked for; io_error when the file cannot be written.
std::shared_ptr<timeline_recording> timeline_hold(std::int64_t rank = -1);

/// Time this thread spent waiting for peers since the last take: the
/// collectives' waits add to it (timeline_wait), and a collective's span
/// takes it to tell waiting from reducing.
std::int64_t timeline_take_wait() noexcept;
void timeline_add_wait(std::int64_t ns) noexcept;

/// Adds its lifetime to this thread's waiting time, when a recording runs.
class timeline_wait {
public:
  timeline_wait() noexcept : start_(timeline_on() ? timeline_now() : -1) {}
  timeline_wait(const timeline_wait&) = delete;
  timeline_wait& operator=(const timeline_wait&) = delete;
  ~timeline_wait() {
    if (start_ >= 0)
      timeline_add_wait(timeline_now() - start_);
  }

private:
  std::int64_t start_;
};

/// A span from construction to destruction, when a recording runs.
class timeline_scope {
public:
  timeline_scope(std::uint32_t track, const char* name, const char* category) noexcept
    : track_(track), name_(name), category_(category),
      start_(timeline_on() ? timeline_now() : -1) {}
  timeline_scope(const timeline_scope&) = delete;
  timeline_scope& operator=(const timeline_scope&) = delete;
  ~timeline_scope() {
    if (start_ >= 0)
      timeline_span(track_, name_, category_, start_, timeline_now(), args);
  }
  bool active() const noexcept { return start_ >= 0; }
  timeline_args args;

private:
  std::uint32_t track_;
  const char* name_;
  const char* category_;
  std::int64_t start_;
};

} // namespace lockstep::detail
