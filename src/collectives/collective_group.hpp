#pragma once

// A group of N participants (threads of one process) that meet for every
// collective. It knows nothing of the data: a collective algorithm calls
// `arrive()` before it touches any buffer and `wait_all_done()` after its own
// share of the work, and the group provides what every collective needs
// around that work:
//
// * a rendezvous: every rank publishes the fingerprint of the collective it
//   issued (sequence number, op, dtype, shape, tag); when all have arrived,
//   all compare them, and on a mismatch EVERY rank throws value_error naming
//   what each rank issued, instead of reducing mismatched buffers;
// * a barrier after the data work (a generation barrier whose generation is
//   the collective's sequence number), so no rank reads results early;
// * timeouts: a rank that waits past its deadline throws timeout_error naming
//   the ranks that did not arrive (or did not finish) and the collective;
// * sleeping waits: a waiting rank polls for at most
//   detail::spin_budget(participants), then sleeps on a condition variable;
// * a flight recorder of the last `flight_recorder_size` collectives.
//
// Each collective lives in a slot keyed by its sequence number. A rank's
// sequence numbers must increase (`next_seq(rank)` gives the next one), so a
// rank arriving late at a collective the others gave up on finds that slot
// and cannot be mistaken for an arrival at the collective after it.
//
// What a timeout leaves behind: the first rank whose deadline passes marks
// the collective `timed out`. Every rank waiting in it (rendezvous or
// barrier) then throws timeout_error with the same message, and a rank that
// reaches it later (arrive() or wait_all_done() for that sequence number)
// throws timeout_error at once, without waiting. Buffers the collective
// writes are unspecified. Nothing else is broken: the next collective (the
// next sequence number) that all ranks issue runs normally. The slot of a
// timed-out collective is kept until every rank has passed it, so a rank
// that never issues it again keeps one small slot alive. A mismatch leaves
// no state behind either: every rank has arrived and thrown.
//
// `abort()` is different: it breaks the group for good. Every waiting rank,
// and every later call, rethrows the abort reason.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/dtype.hpp"
#include "lockstep/tensor.hpp"

namespace lockstep::detail {

/// What a rank issued: two ranks may only run a collective together when
/// their fingerprints are equal.
struct collective_fingerprint {
  /// The rank's sequence number for this collective (from 1 up).
  std::uint64_t seq = 0;
  /// The collective, e.g. "all_reduce".
  std::string op;
  /// How elements combine, e.g. "sum"; empty for collectives that do not.
  std::string reduction;
  lockstep::dtype dtype = lockstep::dtype::f32;
  shape_t shape;
  /// The caller's tag (collective_options::tag); may be empty.
  std::string tag;

  /// The bytes of one rank's tensor: elements of `shape` times the dtype size.
  std::size_t bytes() const;

  /// "all_reduce #3 sum float32 [4]", then " tag 'x'" when tagged.
  std::string to_string() const;

  friend bool operator==(const collective_fingerprint&, const collective_fingerprint&) = default;
};

/// N participants that meet for each collective; see the file comment.
/// Thread-safe: each rank calls from its own thread, any thread may call
/// `dump()` or `abort()`.
class collective_group {
public:
  using clock = std::chrono::steady_clock;

  /// How many collectives the flight recorder keeps.
  static constexpr std::size_t flight_recorder_size = 64;

  /// How many flight-recorder entries a timeout_error's message includes.
  static constexpr std::size_t entries_in_errors = 8;

  /// A group of `participants` ranks (0 .. participants-1), named `tag` in
  /// messages. Throws value_error for 0 participants.
  collective_group(std::size_t participants, std::string tag);

  collective_group(const collective_group&) = delete;
  collective_group& operator=(const collective_group&) = delete;

  /// The number of participants.
  std::size_t size() const noexcept { return participants_; }

  /// The group's name in messages.
  const std::string& tag() const noexcept { return tag_; }

  /// The sequence number `rank` should put in its next fingerprint: one more
  /// than the last it arrived with (1 for its first collective).
  std::uint64_t next_seq(std::size_t rank) const;

  // -- one collective -----------------------------------------------------------

  /// Publishes `mine` as `rank`'s fingerprint for collective `mine.seq` and
  /// waits until every rank has arrived at it. Throws value_error, naming
  /// every rank's fingerprint, when they differ (every rank throws);
  /// timeout_error past `deadline` or when the collective already timed out
  /// (see the file comment); value_error for a rank out of range or a
  /// sequence number not above the rank's last one; the abort reason after
  /// abort().
  void arrive(std::size_t rank, const collective_fingerprint& mine, clock::time_point deadline);

  /// Marks `rank` done with its share of collective `seq` (after a
  /// successful arrive()) and waits until every rank is. Throws as arrive().
  void wait_all_done(std::size_t rank, std::uint64_t seq, clock::time_point deadline);

  /// Breaks the group for good: waiting ranks wake and rethrow `reason`, as
  /// does every later arrive() and wait_all_done(). The first reason stays.
  void abort(std::exception_ptr reason);

  // -- flight recorder ----------------------------------------------------------

  /// The last `flight_recorder_size` collectives, oldest first, one per
  /// line: "#3 all_reduce sum float32 [4] 16 B: completed, started at
  /// +1.250 ms, took 0.031 ms".
  std::string dump() const;

  /// As dump(), but only the last `entries` collectives.
  std::string dump(std::size_t entries) const;

private:
  enum class slot_state { gathering, running, completed, mismatch, timed_out };

  static std::string_view state_name(slot_state state);

  struct slot {
    std::vector<std::optional<collective_fingerprint>> fingerprints;
    std::vector<bool> finished;
    std::size_t arrived = 0;
    std::size_t finished_count = 0;
    std::size_t left = 0;
    slot_state state = slot_state::gathering;
    std::string error;
  };

  struct record {
    collective_fingerprint fingerprint;
    clock::time_point start;
    std::optional<clock::time_point> end;
    slot_state state = slot_state::gathering;
  };

  // Waits (lock held on entry and exit) until `ready()` or `deadline`:
  // polls without the lock for the spin budget, then sleeps. Returns ready().
  template <class Ready>
  bool wait_until(std::unique_lock<std::mutex>& lock, Ready ready, clock::time_point deadline);

  // Wakes every waiter after a state change (lock held).
  void publish();

  void check_rank(std::size_t rank, const char* call) const;
  void rethrow_if_aborted() const;
  void leave(std::uint64_t seq, slot& s);
  void finish(std::uint64_t seq, slot& s, slot_state state);
  std::string timeout_message(std::uint64_t seq, const slot& s, bool barrier) const;
  std::string mismatch_message(const slot& s) const;
  std::string dump_locked(std::size_t entries) const;
  record* find_record(std::uint64_t seq);

  const std::size_t participants_;
  const std::string tag_;
  const std::chrono::microseconds spin_budget_;
  const clock::time_point created_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::atomic<std::uint64_t> changes_{0};
  std::size_t sleepers_ = 0;
  std::exception_ptr aborted_;
  std::vector<std::uint64_t> last_seq_;
  std::map<std::uint64_t, slot> slots_;
  std::deque<record> records_;
};

} // namespace lockstep::detail
