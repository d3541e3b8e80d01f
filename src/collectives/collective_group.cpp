#include "collectives/collective_group.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "lockstep/error.hpp"
#include "lockstep/runtime_options.hpp"
#include "runtime/error_text.hpp"
#include "runtime/spin_wait.hpp"
#include "runtime/timeline.hpp"

namespace lockstep::detail {

namespace {

constexpr unsigned count_bits = 12;
constexpr std::uint64_t count_mask = (std::uint64_t{1} << count_bits) - 1;

constexpr std::uint64_t pack(std::uint64_t seq, std::uint64_t count) noexcept {
  return (seq << count_bits) | count;
}
constexpr std::uint64_t seq_of(std::uint64_t word) noexcept {
  return word >> count_bits;
}
constexpr std::uint64_t count_of(std::uint64_t word) noexcept {
  return word & count_mask;
}

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::string milliseconds(std::chrono::steady_clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms",
                std::chrono::duration<double, std::milli>(d).count());
  return text;
}

/// A hash of everything in `f` but its sequence number: ranks compare
/// digests on the hot path, and whole fingerprints only to word an error.
std::uint64_t digest_of(const collective_fingerprint& f) noexcept {
  fingerprint_hash mix;
  mix(f.op);
  mix(f.reduction);
  mix(f.tag);
  mix(static_cast<std::uint64_t>(f.dtype));
  mix(f.shape.size());
  for (auto dim : f.shape)
    mix(static_cast<std::uint64_t>(dim));
  mix(f.tensors);
  mix(f.layout);
  mix(f.batch_tensors);
  mix(f.batch_dtypes);
  mix(f.batch_shapes);
  mix(f.epoch);
  mix(f.inline_data ? 1 : 0);
  mix(f.slice);
  return mix.hash;
}

std::string_view outcome_name(int state) {
  constexpr std::string_view names[] = {"running", "completed", "mismatch", "timed out",
                                        "cancelled", "failed"};
  return names[state];
}

} // namespace

/// One rank's state, on a cache line of its own. `arrived` and `finished`
/// are written by the rank's thread only; the fingerprint and payload are
/// written before `arrived` is released and read by the other ranks while
/// the collective runs (the barrier keeps them from changing), or under
/// `mutex` by error paths.
struct alignas(64) collective_group::rank_slot {
  /// What the rank publishes with each arrival for the others to read once
  /// the collective started: its fingerprint's digest and, from
  /// arrive_inline(), its data. Written before `arrived` is released; `seq`
  /// tells which of the two areas holds a collective.
  struct alignas(64) area {
    std::atomic<std::uint64_t> seq{0};
    std::uint64_t digest = 0;
    std::byte data[inline_capacity];
    /// Why the rank could not do its share of collective `seq` (fail()),
    /// or null.
    std::exception_ptr failure;
  };
  static_assert(sizeof(area) == 320);

  std::atomic<std::uint64_t> arrived{0};
  std::atomic<std::uint64_t> finished{0};
  /// True from arrive() until the rank leaves the collective (returns from
  /// wait_all_done, or throws).
  std::atomic<bool> inside{false};
  /// The last epoch the rank departed (depart()).
  std::atomic<std::uint64_t> departed{0};
  /// The last collective this rank saw start (its own thread only).
  std::uint64_t started = 0;
  /// failures_ when this rank last looked (its own thread only).
  std::uint64_t failures_seen = 0;
  /// The area of the rank's last arrival (its own thread only).
  unsigned current_area = 1;
  area areas[2];
  mutable std::mutex mutex;
  collective_fingerprint fingerprint;
  const void* payload = nullptr;
};

// -- collective_group ---------------------------------------------------------

collective_group::collective_group(std::size_t participants, std::string tag,
                                   std::string rank_noun, std::size_t threads_on_host)
    : participants_(participants),
      tag_(std::move(tag)),
      rank_noun_(std::move(rank_noun)),
      spin_budget_(spin_budget(std::max(participants, threads_on_host))),
      poll_budget_(get_runtime_options().spin_wait),
      created_(clock::now()) {
  if (participants == 0 || participants > max_participants)
    throw value_error("collective_group '" + tag_ + "': needs 1 to "
                      + std::to_string(max_participants) + " participants, got "
                      + std::to_string(participants));
  slots_ = std::make_unique<rank_slot[]>(participants);
  records_.resize(flight_recorder_size);
}

collective_group::~collective_group() = default;

std::string collective_group::rank_name(std::size_t rank) const {
  return rank_noun_ + " " + std::to_string(rank);
}

void collective_group::check_rank(std::size_t rank, const char* call) const {
  if (rank >= participants_)
    throw value_error("collective_group '" + tag_ + "': " + call + " by " + rank_name(rank)
                      + ", but the group has " + std::to_string(participants_) + " ranks");
}

std::uint64_t collective_group::next_seq(std::size_t rank) const {
  check_rank(rank, "next_seq");
  return slots_[rank].arrived.load(std::memory_order_relaxed) + 1;
}

const void* collective_group::payload(std::size_t rank) const noexcept {
  return slots_[rank].payload;
}

const void* collective_group::inline_data(std::size_t rank, std::uint64_t seq) const noexcept {
  const auto& areas = slots_[rank].areas;
  return areas[areas[0].seq.load(std::memory_order_relaxed) == seq ? 0 : 1].data;
}

void collective_group::publish() {
  // Orders the change before the look at sleepers_ (a sleeper counts
  // itself before it looks at the state), without a write to a shared line.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers_.load() > 0) {
    std::lock_guard lock{mutex_};
    changed_.notify_all();
  }
}

template <class Ready>
bool collective_group::wait_until(Ready ready, clock::time_point deadline) {
  if (ready())
    return true;
  const timeline_wait waiting; // the collective's span tells it from reducing
  // With a CPU per participant, poll with pause instructions; with more
  // participants than CPUs, poll by yielding the CPU to the ranks that
  // still have work, for the same bounded time.
  const bool spin = spin_budget_.count() > 0;
  const auto spin_end = std::min(deadline, clock::now() + poll_budget_);
  for (unsigned polls = 1; poll_budget_.count() > 0; ++polls) {
    if (spin)
      cpu_relax();
    else
      std::this_thread::yield();
    if (ready())
      return true;
    if ((!spin || polls % 64 == 0) && clock::now() >= spin_end)
      break;
  }
  // Sleep. A state change is published (publish()) after it is made, and
  // publish() notifies under the mutex when it sees a sleeper, so a change
  // made after the check below wakes this wait.
  std::unique_lock lock{mutex_};
  sleepers_.fetch_add(1);
  bool done = ready();
  while (!done && changed_.wait_until(lock, deadline) != std::cv_status::timeout)
    done = ready();
  sleepers_.fetch_sub(1);
  return done || ready();
}

bool collective_group::may_be_refused(std::uint64_t seq) const noexcept {
  return seq < cancelled_below_.load() || has_timeouts_.load();
}

bool collective_group::newly_refused(std::uint64_t seq, std::uint64_t timeouts_seen) const noexcept {
  return seq < cancelled_below_.load() || timeouts_added_.load() != timeouts_seen;
}

const collective_group::timed_out_collective*
collective_group::find_timed_out(std::uint64_t seq) const {
  for (const auto& t : timed_out_)
    if (t.seq == seq)
      return &t;
  return nullptr;
}

bool collective_group::refused(std::uint64_t seq) const {
  return seq < cancelled_below_.load() || find_timed_out(seq) != nullptr;
}

void collective_group::throw_if_finished_late(std::size_t rank, std::uint64_t seq) const {
  if (const auto* t = find_timed_out(seq))
    throw timeout_error("collective timed out in group '" + tag_ + "': " + rank_name(rank)
                        + " finished #" + std::to_string(seq) + " after it had timed out. "
                        + t->message);
}

void collective_group::throw_if_refused(std::size_t rank, std::uint64_t seq,
                                        const collective_fingerprint& mine, bool late_arrival) {
  if (seq < cancelled_below_.load())
    std::rethrow_exception(cancel_reason_);
  if (const auto* t = find_timed_out(seq))
    throw timeout_error(late_arrival ? "collective timed out in group '" + tag_ + "': "
                                         + rank_name(rank) + " arrived at " + mine.to_string()
                                         + " after it had timed out. " + t->message
                                     : t->message);
}

std::size_t collective_group::departed_rank(const collective_fingerprint& mine) const noexcept {
  if (mine.epoch == 0)
    return participants_;
  for (std::size_t r = 0; r < participants_; ++r)
    if (slots_[r].arrived.load() != mine.seq && slots_[r].departed.load() == mine.epoch)
      return r;
  return participants_;
}

void collective_group::depart(std::size_t rank, std::uint64_t epoch) {
  check_rank(rank, "depart");
  slots_[rank].departed.store(epoch);
  departures_.fetch_add(1);
  publish();
}

bool collective_group::waiting(std::size_t rank, std::uint64_t from_seq) const noexcept {
  const auto& slot = slots_[rank];
  return slot.inside.load() && slot.arrived.load() >= from_seq;
}

bool collective_group::withdraw(std::uint64_t seq) {
  auto word = arrivals_.load();
  for (;;) {
    // A later collective opens only after this one started (this rank's
    // arrival keeps its count above 0).
    if ((count_of(word) == participants_ && seq_of(word) == seq) || seq_of(word) > seq)
      return false; // started: it runs to its end
    if (arrivals_.compare_exchange_weak(word, word - 1))
      return true;
  }
}

void collective_group::arrive(std::size_t rank, const collective_fingerprint& mine,
                              clock::time_point deadline, const void* payload) {
  check_rank(rank, "arrive");
  auto& inside = slots_[rank].inside;
  inside.store(true);
  try {
    rendezvous(rank, mine, deadline, payload);
  } catch (...) {
    inside.store(false);
    throw;
  }
}

void collective_group::arrive_inline(std::size_t rank, const collective_fingerprint& mine,
                                     clock::time_point deadline, const void* data,
                                     std::size_t bytes, std::exception_ptr failure) {
  check_rank(rank, "arrive_inline");
  if (bytes > inline_capacity)
    throw value_error("collective_group '" + tag_ + "': arrive_inline of " + std::to_string(bytes)
                      + " bytes, more than the " + std::to_string(inline_capacity)
                      + " a rank can publish inline");
  auto& slot = slots_[rank];
  slot.inside.store(true);
  try {
    rendezvous(rank, mine, deadline, nullptr, data, bytes, std::move(failure));
  } catch (...) {
    slot.inside.store(false);
    throw;
  }
  slot.finished.store(mine.seq, std::memory_order_relaxed);
  slot.inside.store(false, std::memory_order_release);
  if (auto reason = failure_of(rank, mine.seq)) {
    if (rank == 0)
      record_end(mine.seq, outcome::failed);
    std::rethrow_exception(reason);
  }
}

std::exception_ptr collective_group::failure_of(std::size_t rank, std::uint64_t seq) {
  auto& seen = slots_[rank].failures_seen;
  const auto failures = failures_.load();
  if (failures == seen)
    return nullptr;
  seen = failures;
  // Each rank's area for `seq` stays as it is until that rank arrives at a
  // later collective, which it cannot do before `rank` has too.
  for (std::size_t r = 0; r < participants_; ++r) {
    const auto& areas = slots_[r].areas;
    const auto& area = areas[areas[0].seq.load(std::memory_order_relaxed) == seq ? 0 : 1];
    if (area.seq.load(std::memory_order_relaxed) == seq && area.failure)
      return area.failure;
  }
  return nullptr;
}

void collective_group::rendezvous(std::size_t rank, const collective_fingerprint& mine,
                                  clock::time_point deadline, const void* payload,
                                  const void* inline_data, std::size_t inline_bytes,
                                  std::exception_ptr failure) {
  auto& slot = slots_[rank];
  const auto seq = mine.seq;
  if (seq <= slot.arrived.load(std::memory_order_relaxed))
    throw value_error("collective_group '" + tag_ + "': " + rank_name(rank) + " issued "
                      + mine.to_string() + " after #" + std::to_string(slot.arrived.load())
                      + "; sequence numbers must increase");
  if (seq >= (std::uint64_t{1} << (64 - count_bits)))
    throw value_error("collective_group '" + tag_ + "': sequence number " + std::to_string(seq)
                      + " is too large");
  {
    std::lock_guard lock{slot.mutex};
    slot.fingerprint = mine; // reuses the strings' and shape's storage
    slot.payload = payload;
  }
  // The other area, unless the last arrival never started: then nobody has
  // read its area, and it is the one a collective that did start (and may
  // still be read) is not in.
  if (slot.started == slot.arrived.load(std::memory_order_relaxed))
    slot.current_area ^= 1;
  auto& area = slot.areas[slot.current_area];
  const auto digest = digest_of(mine);
  area.digest = digest;
  if (inline_bytes > 0)
    std::memcpy(area.data, inline_data, inline_bytes);
  area.failure = std::move(failure);
  if (area.failure)
    failures_.fetch_add(1); // before the arrival below, which publishes it
  area.seq.store(seq, std::memory_order_relaxed);
  // Every claim of the last collective that this rank made happened before
  // this; every claim of this one will happen after it started, which
  // takes this rank's arrival below.
  if (!mine.inline_data)
    claims_.store(0); // seq_cst: claim() relies on it, see there
  slot.arrived.store(seq);
  if (may_be_refused(seq)) {
    std::lock_guard lock{mutex_};
    throw_if_refused(rank, seq, mine, true);
    prune_timed_out();
  }

  bool counted = false;
  for (;;) {
    auto word = arrivals_.load();
    if (!counted) {
      const auto current = seq_of(word);
      const auto count = count_of(word);
      // Join the current collective, or open this one when the last one
      // started (count N) or was given up by every rank (count 0).
      if (current == seq || (current < seq && (count == 0 || count == participants_))) {
        const auto next = current == seq ? word + 1 : pack(seq, 1);
        if (!arrivals_.compare_exchange_strong(word, next))
          continue;
        counted = true;
        word = next;
        if (count_of(word) == participants_)
          publish();
      }
    }
    // Started: the count reached N, or a later collective opened, which
    // one-phase (inline) collectives let the fastest ranks do before a
    // slow one looks.
    if (counted && (word == pack(seq, participants_) || seq_of(word) > seq))
      break;
    const auto timeouts_seen = timeouts_added_.load();
    const auto departures_seen = departures_.load();
    if (const auto gone = departed_rank(mine); gone != participants_) {
      std::lock_guard lock{mutex_};
      if (counted && !withdraw(seq))
        continue; // started after all: it had arrived
      if (find_record(seq) == nullptr)
        record_unstarted(mine, outcome::mismatch);
      throw context_error("Some " + rank_noun_ + "s made a different number of collective "
                          "calls: " + rank_name(gone) + " returned from its function without "
                          "reaching " + mine.to_string() + ", which " + rank_name(rank)
                          + " waits in");
    }
    const bool ready = wait_until(
        [&] {
          return arrivals_.load() != word || newly_refused(seq, timeouts_seen)
                 || departures_.load() != departures_seen;
        },
        deadline);
    if (newly_refused(seq, timeouts_seen)) {
      std::lock_guard lock{mutex_};
      if (refused(seq) && (!counted || withdraw(seq))) {
        if (seq < cancelled_below_.load() && find_record(seq) == nullptr)
          record_unstarted(mine, outcome::cancelled);
        throw_if_refused(rank, seq, mine, false);
      }
      prune_timed_out();
      continue; // started meanwhile, or not refused after all: look again
    }
    if (!ready && clock::now() >= deadline) {
      if (counted && !withdraw(seq))
        continue; // started just now
      time_out(seq, mine, false);
    }
  }
  slot.started = seq;
  // Rank 0 keeps the flight recorder, so its lines stay in one core's cache.
  if (rank == 0)
    record_start(mine);
  check_fingerprints(rank, mine, digest, deadline);
}

void collective_group::check_fingerprints(std::size_t rank, const collective_fingerprint& mine,
                                          std::uint64_t digest, clock::time_point deadline) {
  bool same = true;
  for (std::size_t r = 0; r < participants_ && same; ++r) {
    const auto& areas = slots_[r].areas;
    const auto& area = areas[areas[0].seq.load(std::memory_order_relaxed) == mine.seq ? 0 : 1];
    same = r == rank || area.digest == digest;
  }
  if (same)
    return;
  // Every rank sees the same digests, so none has left the collective and
  // the slots' fingerprints are still the ones they issued. Every rank
  // builds the same error, after the barrier: no rank may leave while
  // another still reads its slot.
  std::vector<const collective_fingerprint*> by_rank;
  for (std::size_t r = 0; r < participants_; ++r)
    by_rank.push_back(&slots_[r].fingerprint);
  auto error = mismatch_error(by_rank, rank_noun_, tag_);
  finish(rank, mine.seq, deadline, outcome::mismatch);
  std::rethrow_exception(error);
}

std::size_t collective_group::claim(std::uint64_t seq) {
  const auto piece = claims_.fetch_add(1);
  // The count is reset only by an arrival at a later collective, which a
  // rank of `seq` makes after it left `seq`: only after `seq` timed out (a
  // started collective otherwise holds every rank to its barrier). That is
  // marked (seq_cst) before that rank moves on, so a claim that
  // read a reset count sees the mark below.
  if (has_timeouts_.load()) {
    std::lock_guard lock{mutex_};
    if (find_timed_out(seq) != nullptr)
      return no_claim;
  }
  return piece;
}

void collective_group::wait_all_done(std::size_t rank, std::uint64_t seq,
                                     clock::time_point deadline, std::exception_ptr failure) {
  check_rank(rank, "wait_all_done");
  auto& slot = slots_[rank];
  if (slot.started != seq || slot.finished.load(std::memory_order_relaxed) >= seq) {
    if (may_be_refused(seq)) {
      std::lock_guard lock{mutex_};
      throw_if_finished_late(rank, seq);
    }
    throw value_error("collective_group '" + tag_ + "': " + rank_name(rank)
                      + " called wait_all_done for #" + std::to_string(seq)
                      + " without a successful arrive()");
  }
  if (failure) {
    slot.areas[slot.current_area].failure = std::move(failure);
    failures_.fetch_add(1); // before this rank's finish, which publishes it
  }
  std::exception_ptr reason;
  try {
    reason = finish(rank, seq, deadline, outcome::completed);
  } catch (...) {
    slot.inside.store(false);
    throw;
  }
  slot.inside.store(false);
  if (reason)
    std::rethrow_exception(reason);
}

std::exception_ptr collective_group::finish(std::size_t rank, std::uint64_t seq,
                                            clock::time_point deadline, outcome result) {
  auto& slot = slots_[rank];
  if (may_be_refused(seq)) {
    std::lock_guard lock{mutex_};
    throw_if_finished_late(rank, seq);
  }
  slot.finished.store(seq);
  auto word = finishes_.load();
  for (;;) {
    const auto next = seq_of(word) == seq ? word + 1 : pack(seq, 1);
    if (finishes_.compare_exchange_weak(word, next)) {
      word = next;
      break;
    }
  }
  const auto done = pack(seq, participants_);
  if (count_of(word) == participants_)
    publish();
  for (;;) {
    const auto timeouts_seen = timeouts_added_.load();
    const bool ready = wait_until(
        [&] {
          return finishes_.load() == done || timeouts_added_.load() != timeouts_seen;
        },
        deadline);
    if (finishes_.load() == done) {
      auto reason = failure_of(rank, seq);
      if (rank == 0)
        record_end(seq, reason && result == outcome::completed ? outcome::failed : result);
      return reason;
    }
    if (timeouts_added_.load() != timeouts_seen) {
      std::lock_guard lock{mutex_};
      if (const auto* t = find_timed_out(seq))
        throw timeout_error(t->message);
    }
    if (!ready && clock::now() >= deadline && finishes_.load() != done)
      time_out(seq, slot.fingerprint, true);
  }
}

void collective_group::time_out(std::uint64_t seq, const collective_fingerprint& mine,
                                bool barrier) {
  std::string message;
  {
    std::lock_guard lock{mutex_};
    // The last rank may have finished since the caller looked.
    if (barrier && finishes_.load() == pack(seq, participants_))
      return;
    if (const auto* t = find_timed_out(seq))
      throw timeout_error(t->message);
    prune_timed_out();
    if (auto* entry = find_record(seq)) {
      entry->state = outcome::timed_out;
      entry->end = clock::now();
      entry->ended = true;
    } else {
      record_unstarted(mine, outcome::timed_out);
    }
    message = "collective timed out in group '" + tag_ + "': "
              + describe_missing(seq, mine, barrier) + "\nrecent collectives in group '" + tag_
              + "':\n" + dump_locked(entries_in_errors);
    timed_out_.push_back({seq, message});
    has_timeouts_.store(true);
    timeouts_added_.fetch_add(1);
  }
  publish();
  throw timeout_error(message);
}

void collective_group::prune_timed_out() {
  // A timed-out collective is forgotten once every rank has passed it:
  // sequence numbers increase, so none can arrive at it any more.
  std::uint64_t lowest = ~std::uint64_t{0};
  for (std::size_t r = 0; r < participants_; ++r)
    lowest = std::min(lowest, slots_[r].arrived.load());
  std::erase_if(timed_out_, [&](const auto& t) { return t.seq < lowest; });
  has_timeouts_.store(!timed_out_.empty());
}

std::string collective_group::where_is(std::size_t rank) const {
  const auto& slot = slots_[rank];
  std::lock_guard lock{slot.mutex};
  const auto arrived = slot.arrived.load();
  if (arrived == 0)
    return " has issued no collective yet";
  if (slot.inside.load())
    return " is waiting in " + slot.fingerprint.to_string();
  return " last issued #" + std::to_string(arrived);
}

std::string collective_group::describe_missing(std::uint64_t seq,
                                               const collective_fingerprint& issued,
                                               bool barrier) const {
  std::vector<std::size_t> missing;
  for (std::size_t r = 0; r < participants_; ++r) {
    const auto& slot = slots_[r];
    if (barrier ? slot.finished.load() != seq : slot.arrived.load() != seq)
      missing.push_back(r);
  }
  std::vector<std::string> numbers;
  for (auto r : missing)
    numbers.push_back(std::to_string(r));
  std::string text = rank_noun_ + (missing.size() == 1 ? " " : "s ") + joined_list(numbers);
  text += (barrier ? " did not finish " : " did not reach ") + issued.to_string();
  // Where each missing rank is instead, so a skipped or reordered
  // collective shows up as such (the first few).
  for (std::size_t i = 0; i < missing.size() && i < items_in_errors; ++i)
    text += "; " + rank_name(missing[i])
            + (barrier ? " arrived but is still working on it" : where_is(missing[i]));
  return text;
}

std::string collective_group::stall_report(std::uint64_t from_seq) const {
  const auto word = arrivals_.load();
  const auto seq = seq_of(word);
  if (seq < from_seq || count_of(word) == 0 || count_of(word) == participants_)
    return {};
  std::size_t waiting = participants_;
  for (std::size_t r = 0; r < participants_ && waiting == participants_; ++r)
    if (slots_[r].arrived.load() == seq)
      waiting = r;
  if (waiting == participants_)
    return {};
  collective_fingerprint issued;
  {
    std::lock_guard lock{slots_[waiting].mutex};
    issued = slots_[waiting].fingerprint;
  }
  std::lock_guard lock{mutex_};
  return describe_missing(seq, issued, false) + "\nrecent collectives in group '" + tag_
         + "':\n" + dump_locked(entries_in_errors);
}

void collective_group::cancel_below(std::uint64_t seq, std::exception_ptr reason) {
  {
    std::lock_guard lock{mutex_};
    if (seq <= cancelled_below_.load())
      return;
    cancel_reason_ = reason ? reason
                            : std::make_exception_ptr(
                                error("collective_group '" + tag_ + "': collective cancelled"));
    cancelled_below_.store(seq);
  }
  publish();
}

// -- flight recorder ----------------------------------------------------------

void collective_group::record_start(const collective_fingerprint& fingerprint) {
  std::lock_guard lock{mutex_};
  auto& entry = records_[records_written_++ % flight_recorder_size];
  entry.fingerprint = fingerprint;
  entry.start = clock::now();
  entry.started = true;
  // An inline collective is over once it starts: one lock records it whole.
  entry.ended = fingerprint.inline_data;
  entry.end = entry.start;
  entry.state = fingerprint.inline_data ? outcome::completed : outcome::running;
}

void collective_group::record_unstarted(const collective_fingerprint& fingerprint,
                                        outcome result) {
  records_[records_written_++ % flight_recorder_size]
      = record{fingerprint, clock::now(), clock::now(), false, true, result};
}

void collective_group::record_end(std::uint64_t seq, outcome result) {
  std::lock_guard lock{mutex_};
  if (auto* entry = find_record(seq)) {
    entry->end = clock::now();
    entry->ended = true;
    entry->state = result;
  }
}

collective_group::record* collective_group::find_record(std::uint64_t seq) {
  const auto kept = std::min(records_written_, flight_recorder_size);
  for (std::size_t i = 1; i <= kept; ++i) {
    auto& entry = records_[(records_written_ - i) % flight_recorder_size];
    if (entry.fingerprint.seq == seq)
      return &entry;
  }
  return nullptr;
}

std::string collective_group::dump() const {
  return dump(flight_recorder_size);
}

std::string collective_group::dump(std::size_t entries) const {
  std::lock_guard lock{mutex_};
  return dump_locked(entries);
}

std::string collective_group::dump_locked(std::size_t entries) const {
  std::string text;
  const auto kept = std::min({records_written_, flight_recorder_size, entries});
  for (auto i = records_written_ - kept; i < records_written_; ++i) {
    const auto& entry = records_[i % flight_recorder_size];
    const auto& f = entry.fingerprint;
    text += "#" + std::to_string(f.seq) + " " + f.op + f.details(true) + ": "
            + std::string(outcome_name(static_cast<int>(entry.state)));
    if (entry.started) {
      text += ", started at +" + milliseconds(entry.start - created_);
      if (entry.ended)
        text += ", took " + milliseconds(entry.end - entry.start);
    } else {
      text += " at +" + milliseconds(entry.end - created_); // never started
    }
    text += "\n";
  }
  if (text.empty())
    text = "(no collectives yet)\n";
  return text;
}

} // namespace lockstep::detail
