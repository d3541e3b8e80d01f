#include "runtime/timeline.hpp"

#include "runtime/log.hpp"
#include "runtime/thread_start.hpp"

#include "lockstep/error.hpp"
#include "lockstep/runtime_options.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace lockstep::detail {

std::atomic<bool> timeline_enabled{false};

namespace {

// -- events and the rings that hold them --------------------------------------------

struct event {
  std::int64_t start = 0; // ns, timeline_now()
  std::int64_t end = 0;
  std::int64_t step = -1;
  const char* name = nullptr;
  const char* category = nullptr;
  std::uint64_t flow_id = 0;
  std::uint32_t track = 0;
  char phase = 'X'; // 'X' span, 's' / 'f' the ends of a flow arrow
  timeline_args args;
};

/// One thread's events: written by that thread only, drained by the
/// writer only (single producer, single consumer).
struct thread_ring {
  static constexpr std::size_t capacity = 4096;
  std::array<event, capacity> events;
  std::atomic<std::uint64_t> head{0}; // events written (the thread's)
  std::atomic<std::uint64_t> tail{0}; // events drained (the writer's)
  std::atomic<std::uint64_t> dropped{0};

  void push(const event& e) {
    const auto h = head.load(std::memory_order_relaxed);
    if (h - tail.load(std::memory_order_acquire) == capacity) {
      dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    events[h % capacity] = e;
    head.store(h + 1, std::memory_order_release);
  }

  template <class F>
  void drain(F&& take) {
    const auto h = head.load(std::memory_order_acquire);
    auto t = tail.load(std::memory_order_relaxed);
    for (; t != h; ++t)
      take(events[t % capacity]);
    tail.store(t, std::memory_order_release);
  }
};

// -- tracks -----------------------------------------------------------------------------

struct track_registry {
  std::mutex mutex;
  std::map<std::tuple<track_kind, std::uint32_t, std::string>, std::uint32_t> ids;
  std::vector<std::string> names; // by id
  std::vector<int> order;         // Chrome's thread_sort_index, by id
};

track_registry& tracks() {
  static auto* registry = new track_registry; // threads may record until exit
  return *registry;
}

std::string default_name(track_kind kind, std::uint32_t index) {
  switch (kind) {
    case track_kind::process:
      return "process";
    case track_kind::strategy_actor:
      return "strategy";
    case track_kind::replica:
      return "replica " + std::to_string(index);
    case track_kind::variables:
      return "variables " + std::to_string(index);
    case track_kind::input:
      return "input " + std::to_string(index);
  }
  return "track";
}

// -- the recording ---------------------------------------------------------------------

/// `text` as a JSON string, quotes included (bytes that are not UTF-8
/// replaced, never an exception).
std::string json_string(std::string_view text) {
  return nlohmann::json(std::string{text}).dump(-1, ' ', false,
                                                nlohmann::json::error_handler_t::replace);
}

class recorder;

struct current_recording {
  std::mutex mutex;
  std::weak_ptr<recorder> recording;
  std::atomic<std::uint64_t> generation{0};
  std::atomic<std::int64_t> steps{0};    // step numbers handed out
  std::atomic<std::int64_t> latest{-1};  // the step a replica thread entered last
  std::atomic<std::int64_t> origin{0};   // the last recording's time 0
  // A worker of several: the coordinator's clock minus this one's.
  std::atomic<std::int64_t> clock_offset{0};
  std::atomic<std::int64_t> clock_error{-1}; // -1: one process, no reference
};

current_recording& current() {
  static auto* state = new current_recording; // threads may record until exit
  return *state;
}

class recorder {
public:
  /// `rank`: this worker's, -1 alone; a worker of several writes times on
  /// the coordinator's clock (timeline_set_clock), so that the workers'
  /// files line up, one process alone from its start.
  recorder(std::string path, timeline_window window, std::int64_t rank)
    : path_(std::move(path)),
      window_(window),
      rank_(std::max<std::int64_t>(rank, 0)),
      aligned_(rank >= 0),
      origin_(timeline_now()) {
    file_ = std::fopen(path_.c_str(), "w");
    if (file_ == nullptr)
      throw io_error("timeline: cannot write " + path_ + ": " + std::strerror(errno));
    std::fputs("[\n", file_);
    write_metadata("process_name", 0, "\"name\":" + json_string(process_name()));
    write_metadata("process_sort_index", 0, "\"sort_index\":" + std::to_string(rank_));
    try {
      writer_ = start_thread("the timeline writer", [this] { write_loop(); });
    } catch (...) { // resource_error: no timeline, and no file begun
      std::fclose(file_);
      std::remove(path_.c_str());
      throw;
    }
  }

  recorder(const recorder&) = delete;
  recorder& operator=(const recorder&) = delete;

  ~recorder() {
    {
      std::lock_guard<std::mutex> lock{mutex_};
      stopping_ = true;
    }
    wake_.notify_one();
    writer_.join();
    drain();
    for (auto& [step, events] : tail_)
      for (const auto& e : events)
        write(e);
    std::uint64_t dropped = dropped_by_ended_;
    for (const auto& ring : rings_)
      dropped += ring->dropped.load(std::memory_order_relaxed);
    write_metadata("lockstep", 0,
                   "\"dropped_events\":" + std::to_string(dropped)
                     + ",\"written_events\":" + std::to_string(written_)
                     + ",\"steps_begun\":" + std::to_string(steps_seen_ + 1)
                     + ",\"window\":" + json_string(describe(window_))
                     + clock_fields(),
                   true);
    std::fputs("]\n", file_);
    if (std::fclose(file_) != 0)
      LOCKSTEP_LOG_ERROR("timeline: writing {} failed: {}", path_, std::strerror(errno));
  }

  std::int64_t origin() const noexcept { return origin_; }

  std::shared_ptr<thread_ring> new_ring() {
    auto ring = std::make_shared<thread_ring>();
    std::lock_guard<std::mutex> lock{rings_mutex_};
    rings_.push_back(ring);
    return ring;
  }

private:
  std::string process_name() const {
    return "worker " + std::to_string(rank_) + " (pid " + std::to_string(::getpid()) + ")";
  }

  /// The clock the times are on, for the lockstep record.
  std::string clock_fields() const {
    if (!aligned_)
      return ",\"clock\":\"this process's steady clock, from the recording's start\"";
    return ",\"clock\":\"the coordinator's (worker 0's) steady clock\",\"clock_offset_ns\":"
           + std::to_string(current().clock_offset.load(std::memory_order_relaxed))
           + ",\"clock_error_ns\":"
           + std::to_string(current().clock_error.load(std::memory_order_relaxed));
  }

  static std::string describe(const timeline_window& w) {
    if (w.to >= 0)
      return "steps " + std::to_string(w.from) + "-" + std::to_string(w.to);
    if (w.every > 0)
      return "every " + std::to_string(w.every) + " steps";
    return "first " + std::to_string(w.first) + " and last " + std::to_string(w.last) + " steps";
  }

  void write_loop() {
    std::unique_lock<std::mutex> lock{mutex_};
    while (!stopping_) {
      wake_.wait_for(lock, std::chrono::milliseconds{10});
      lock.unlock();
      drain();
      lock.lock();
    }
  }

  /// Takes every ring's events: those of steps at the window's head are
  /// written, the last `last` steps are kept for the end, the rest dropped.
  /// A ring held by the recorder alone belonged to a thread that has ended:
  /// drained a last time, it goes, so short-lived threads cost nothing
  /// lasting.
  void drain() {
    std::vector<std::shared_ptr<thread_ring>> live;
    std::vector<std::shared_ptr<thread_ring>> ended;
    {
      std::lock_guard<std::mutex> lock{rings_mutex_};
      for (const auto& ring : rings_)
        (ring.use_count() == 1 ? ended : live).push_back(ring);
      rings_ = live;
    }
    // Pairs with the release of an ended thread's last reference: its last
    // events are visible.
    std::atomic_thread_fence(std::memory_order_acquire);
    for (const auto* rings : {&live, &ended})
      for (const auto& ring : *rings)
        ring->drain([this](const event& e) { take(e); });
    for (const auto& ring : ended)
      dropped_by_ended_ += ring->dropped.load(std::memory_order_relaxed);
    std::fflush(file_);
  }

  void take(const event& e) {
    const auto step = std::max<std::int64_t>(e.step, 0);
    steps_seen_ = std::max(steps_seen_, step);
    if (window_.at_head(step)) {
      write(e);
      return;
    }
    // The tail: buckets for the newest steps seen, oldest first.
    const auto kept = window_.kept_last();
    if (step <= steps_seen_ - kept)
      return;
    auto at = std::find_if(tail_.begin(), tail_.end(),
                           [step](const auto& bucket) { return bucket.first >= step; });
    if (at == tail_.end() || at->first != step)
      at = tail_.insert(at, {step, {}});
    at->second.push_back(e);
    while (!tail_.empty() && tail_.front().first <= steps_seen_ - kept)
      tail_.pop_front();
  }

  void write(const event& e) {
    name_track(e.track);
    const auto base = aligned_ ? -current().clock_offset.load(std::memory_order_relaxed) : origin_;
    std::string line;
    const auto micros = [&line](const char* key, std::int64_t ns) {
      char number[64];
      std::snprintf(number, sizeof number, ",\"%s\":%.3f", key, static_cast<double>(ns) / 1e3);
      line += number;
    };
    line.reserve(256);
    line += "{\"name\":\"";
    line += e.name;
    line += "\",\"cat\":\"";
    line += e.category;
    line += "\",\"ph\":\"";
    line += e.phase;
    line += "\",\"pid\":" + std::to_string(rank_) + ",\"tid\":";
    line += std::to_string(e.track);
    micros("ts", e.start - base);
    if (e.phase == 'X') {
      micros("dur", e.end - e.start);
    } else {
      line += ",\"id\":" + std::to_string(e.flow_id);
      if (e.phase == 'f')
        line += ",\"bp\":\"e\"";
    }
    line += ",\"args\":{\"step\":" + std::to_string(e.step);
    const auto& a = e.args;
    const auto text = [&](const char* key, const char* value) {
      if (value != nullptr && *value != '\0')
        line += std::string{",\""} + key + "\":" + json_string(value);
    };
    const auto count = [&](const char* key, std::int64_t value) {
      if (value >= 0)
        line += std::string{",\""} + key + "\":" + std::to_string(value);
    };
    text("op", a.op);
    text("dtype", a.dtype);
    text("algorithm", a.algorithm);
    text("label", a.label);
    count("bytes", a.bytes);
    count("seq", a.seq);
    if (a.wait_ns >= 0)
      micros("wait_us", a.wait_ns);
    if (a.reduce_ns >= 0)
      micros("reduce_us", a.reduce_ns);
    line += "}},\n";
    std::fputs(line.c_str(), file_);
    ++written_;
  }

  /// Names a track the first time one of its events is written.
  void name_track(std::uint32_t track) {
    if (track < named_.size() && named_[track])
      return;
    if (named_.size() <= track)
      named_.resize(track + 1, false);
    named_[track] = true;
    std::string name;
    int order = 0;
    {
      auto& registry = tracks();
      std::lock_guard<std::mutex> lock{registry.mutex};
      name = registry.names.at(track);
      order = registry.order.at(track);
    }
    write_metadata("thread_name", track, "\"name\":" + json_string(name));
    write_metadata("thread_sort_index", track, "\"sort_index\":" + std::to_string(order));
  }

  void write_metadata(const char* name, std::uint32_t track, const std::string& args,
                      bool last = false) {
    std::fprintf(file_, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%lld,\"tid\":%u,\"args\":{%s}}%s\n",
                 name, static_cast<long long>(rank_), track, args.c_str(), last ? "" : ",");
  }

  const std::string path_;
  const timeline_window window_;
  const std::int64_t rank_; // the trace's pid: one process per worker
  const bool aligned_;
  const std::int64_t origin_;
  std::FILE* file_ = nullptr;

  std::mutex rings_mutex_;
  std::vector<std::shared_ptr<thread_ring>> rings_;
  std::uint64_t dropped_by_ended_ = 0; // the events the ended threads' rings dropped

  std::mutex mutex_; // guards stopping_
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread writer_;

  // The writer's own state.
  std::deque<std::pair<std::int64_t, std::vector<event>>> tail_;
  std::vector<bool> named_;
  std::int64_t steps_seen_ = 0;
  std::uint64_t written_ = 0;
};

// -- the process's recording ----------------------------------------------------------------

struct thread_state {
  std::uint64_t generation = 0;
  std::shared_ptr<thread_ring> ring;
  std::int64_t step = -1;
  std::int64_t first_step = -1; // of the call this replica thread runs
  std::int64_t waited = 0;      // ns, since the last timeline_take_wait()
};

thread_local thread_state this_thread;

/// This thread's ring in the current recording; null when none runs.
thread_ring* ring_of_this_thread() {
  auto& now = current();
  const auto generation = now.generation.load(std::memory_order_acquire);
  if (this_thread.generation != generation || !this_thread.ring) {
    std::shared_ptr<recorder> recording;
    {
      std::lock_guard<std::mutex> lock{now.mutex};
      recording = now.recording.lock();
    }
    if (!recording)
      return nullptr;
    this_thread.ring = recording->new_ring();
    this_thread.generation = generation;
  }
  return this_thread.ring.get();
}

void record(event&& e) {
  auto* ring = ring_of_this_thread();
  if (ring == nullptr)
    return;
  e.step = timeline_step();
  ring->push(e);
}

[[noreturn]] void bad_steps(std::string_view text) {
  throw value_error("timeline steps: '" + std::string{text}
                    + "' is not \"first:F,last:L\", \"A-B\" or \"every:K\" with whole numbers");
}

std::int64_t parse_count(std::string_view text, std::string_view whole) {
  std::int64_t value = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value < 0)
    bad_steps(whole);
  return value;
}

} // namespace

// -- timeline_window --------------------------------------------------------------------

timeline_window timeline_window::parse(std::string_view text) {
  timeline_window w;
  if (text.empty())
    return w;
  if (text.starts_with("every:")) {
    w.every = parse_count(text.substr(6), text);
    if (w.every == 0)
      throw value_error("timeline steps: 'every:0' records nothing; K must be at least 1");
    return w;
  }
  if (text.starts_with("first:")) {
    const auto comma = text.find(",last:");
    if (comma == std::string_view::npos)
      bad_steps(text);
    w.first = parse_count(text.substr(6, comma - 6), text);
    w.last = parse_count(text.substr(comma + 6), text);
    return w;
  }
  const auto dash = text.find('-');
  if (dash == std::string_view::npos)
    bad_steps(text);
  w.from = parse_count(text.substr(0, dash), text);
  w.to = parse_count(text.substr(dash + 1), text);
  if (w.to < w.from)
    throw value_error("timeline steps: '" + std::string{text} + "' ends before it starts");
  return w;
}

bool timeline_window::at_head(std::int64_t step) const noexcept {
  if (to >= 0)
    return from <= step && step <= to;
  if (every > 0)
    return step % every == 0;
  return step < first;
}

// -- recording --------------------------------------------------------------------------

std::uint32_t timeline_track(track_kind kind, std::uint32_t index, std::string_view name) {
  auto& registry = tracks();
  std::lock_guard<std::mutex> lock{registry.mutex};
  const auto [at, added] = registry.ids.emplace(std::tuple{kind, index, std::string{name}},
                                                static_cast<std::uint32_t>(registry.names.size()));
  if (added) {
    registry.names.push_back(name.empty() ? default_name(kind, index) : std::string{name});
    registry.order.push_back(static_cast<int>(kind) * 1000 + static_cast<int>(index % 1000));
  }
  return at->second;
}

void timeline_args::copy(char (&to)[32], std::string_view text) noexcept {
  const auto n = std::min(text.size(), sizeof to - 1);
  std::memcpy(to, text.data(), n);
  to[n] = '\0';
}

std::int64_t timeline_take_wait() noexcept {
  return std::exchange(this_thread.waited, 0);
}

void timeline_add_wait(std::int64_t ns) noexcept {
  this_thread.waited += ns;
}

std::int64_t timeline_now() noexcept {
  static const std::int64_t skew = [] {
    const char* text = std::getenv("LOCKSTEP_TIMELINE_TEST_SKEW_NS");
    std::int64_t value = 0;
    if (text != nullptr)
      std::from_chars(text, text + std::strlen(text), value); // a test's own number
    return value;
  }();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::steady_clock::now().time_since_epoch())
           .count()
         + skew;
}

void timeline_set_clock(std::int64_t offset_ns, std::int64_t error_ns) noexcept {
  current().clock_offset.store(offset_ns, std::memory_order_relaxed);
  current().clock_error.store(error_ns, std::memory_order_relaxed);
}

void timeline_span(std::uint32_t track, const char* name, const char* category,
                   std::int64_t start, std::int64_t end, const timeline_args& args) {
  event e;
  e.start = start;
  e.end = end;
  e.name = name;
  e.category = category;
  e.track = track;
  e.args = args;
  record(std::move(e));
}

void timeline_flow(std::uint32_t track, std::uint64_t id, bool start, std::int64_t at) {
  event e;
  e.start = at;
  e.end = at;
  e.name = "merge";
  e.category = "flow";
  e.track = track;
  e.phase = start ? 's' : 'f';
  e.flow_id = id;
  record(std::move(e));
}

std::int64_t timeline_origin() noexcept {
  return current().origin.load(std::memory_order_relaxed);
}

std::int64_t timeline_begin_steps(std::int64_t count) noexcept {
  return current().steps.fetch_add(count, std::memory_order_relaxed);
}

void timeline_set_thread_step(std::int64_t step) noexcept {
  this_thread.step = step;
  this_thread.first_step = step;
  if (step >= 0)
    current().latest.store(step, std::memory_order_relaxed);
}

void timeline_loop_step(std::size_t index) noexcept {
  if (this_thread.first_step < 0)
    return;
  this_thread.step = this_thread.first_step + static_cast<std::int64_t>(index);
  current().latest.store(this_thread.step, std::memory_order_relaxed);
}

std::int64_t timeline_step() noexcept {
  return this_thread.step >= 0 ? this_thread.step
                               : current().latest.load(std::memory_order_relaxed);
}

timeline_step_scope::timeline_step_scope(std::int64_t step) noexcept
  : outer_step_(this_thread.step), outer_first_(this_thread.first_step) {
  this_thread.step = step;
  this_thread.first_step = -1; // not a replica's call
}

timeline_step_scope::~timeline_step_scope() {
  this_thread.step = outer_step_;
  this_thread.first_step = outer_first_;
}

std::uint64_t timeline_merge_flow(const void* strategy, std::uint64_t seq,
                                  std::size_t replica) noexcept {
  // Unique within a trace: the strategy, its call, the replica. Chrome
  // reads ids as doubles, so they stay below 2^53.
  const auto h = (reinterpret_cast<std::uintptr_t>(strategy) >> 4) * 0x9E3779B1u;
  return ((h ^ (seq << 12) ^ replica) & ((std::uint64_t{1} << 53) - 1));
}

/// The recorder under its name in the header (recorder's own name stays
/// private to this file).
class timeline_recording final : public recorder {
public:
  using recorder::recorder;
};

std::shared_ptr<timeline_recording> timeline_hold(std::int64_t rank) {
  const auto& options = get_runtime_options();
  if (options.timeline.empty())
    return nullptr;
  auto path = options.timeline;
  if (rank >= 0)
    path += ".rank-" + std::to_string(rank);
  auto& now = current();
  std::lock_guard<std::mutex> lock{now.mutex};
  if (auto running = now.recording.lock())
    return std::static_pointer_cast<timeline_recording>(running); // each one is
  auto recording = std::shared_ptr<timeline_recording>(
    new timeline_recording(std::move(path), timeline_window::parse(options.timeline_steps),
                           rank),
    [](timeline_recording* r) {
      // Under the lock, so that a recording started next opens the file
      // only once this one has written its tail.
      std::lock_guard<std::mutex> lock{current().mutex};
      timeline_enabled.store(false, std::memory_order_relaxed);
      delete r; // drains what the threads recorded before, then writes the tail
    });
  now.recording = recording;
  now.origin.store(recording->origin(), std::memory_order_relaxed);
  now.clock_offset.store(0, std::memory_order_relaxed);
  now.clock_error.store(rank >= 0 ? 0 : -1, std::memory_order_relaxed);
  now.steps.store(0, std::memory_order_relaxed);
  now.latest.store(-1, std::memory_order_relaxed);
  now.generation.fetch_add(1, std::memory_order_acq_rel);
  timeline_enabled.store(true, std::memory_order_relaxed);
  return recording;
}

} // namespace lockstep::detail
