#pragma once

// A group of N participants (threads of one process) that meet for every
// collective. It knows nothing of the data: a collective algorithm calls
// `arrive()` before it touches any buffer and `wait_all_done()` after its own
// share of the work, and the group provides what every collective needs
// around that work:
//
// * a rendezvous: every rank publishes the fingerprint of the collective it
//   issued (sequence number, op, dtype, shape, tag) and a pointer to its
//   buffers (`payload`); when all have arrived, all compare the
//   fingerprints, and on a mismatch EVERY rank throws, naming what each rank
//   issued, instead of reducing mismatched buffers;
// * a barrier after the data work, so no rank reads results early and no
//   rank's buffers go away while another rank still reads them;
// * timeouts: a rank that waits past its deadline throws timeout_error
//   naming the ranks that did not arrive (or did not finish), where each of
//   them is instead, and the last flight-recorder entries;
// * sleeping waits: a waiting rank polls for at most
//   runtime_options::spin_wait (spinning while every rank has a CPU, else
//   yielding its CPU between polls), then sleeps;
// * a flight recorder of the last `flight_recorder_size` collectives.
//
// How it meets. The hot path takes no lock and allocates nothing: each rank
// owns a cache line with its fingerprint and the last sequence numbers it
// arrived at and finished; one shared word counts the arrivals at the
// current collective (sequence number and count, changed by compare and
// swap) and one counts the finishes. The arrival that makes the count N
// starts the collective, and a started collective always runs to its
// barrier: every rank of it has arrived and none can withdraw. A rank that
// gives up waiting (deadline, cancel) withdraws its arrival with a
// compare and swap that fails if the collective started meanwhile, so
// either all ranks run it or none does. The group's mutex is taken only to
// record a collective, on error paths, and to sleep.
//
// Small collectives meet once. `arrive_inline()` copies a rank's few bytes
// of data (at most `inline_capacity`) into its slot with the fingerprint's
// digest, and once the collective started every rank reads the others'
// copies (`inline_data()`) and leaves: no barrier, since no rank reads
// another's buffers. Each rank has two inline areas and writes the other one
// when its last collective started, so a copy stays readable until every
// rank has arrived at a later collective (which it does only after it has
// read it); after an arrival that did not start (withdrawn), nobody read the
// area, and the rank writes it again.
//
// A rank's sequence numbers must increase (`next_seq(rank)` gives the next
// one), so a rank arriving late at a collective the others gave up on cannot
// be mistaken for an arrival at the collective after it.
//
// What a timeout leaves behind: the rank whose deadline passes marks the
// collective `timed out`. Every rank waiting in it then throws timeout_error
// with the same message, and a rank that reaches it later throws
// timeout_error at once, without waiting. Buffers the collective writes are
// unspecified. Nothing else is broken: the next collective that all ranks
// issue runs normally. A mismatch leaves no state behind either: every rank
// has arrived, passed the barrier and thrown.
//
// `cancel_below(seq)` withdraws every collective below `seq` that has not
// started: ranks waiting in one, or arriving at one later, throw the given
// reason (a strategy cancels the collectives of a failed call this way).
//
// A rank that cannot do its share of a collective it arrived at (its work
// threw, or an earlier stage of a composed collective failed) still meets
// the others and reports why (`wait_all_done` or `arrive_inline` with a
// failure): the collective then fails on every rank, each rethrowing the
// reason of the lowest failed rank after the barrier, with its buffers
// unspecified. The group stays usable: the next collective runs normally.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/collective_fingerprint.hpp"
#include "collectives/collective_session.hpp"

namespace lockstep::detail {

/// N participants that meet for each collective; see the file comment.
/// Thread-safe: each rank calls from its own thread, any thread may call
/// `dump()`, `stall_report()` or `cancel_below()`.
class collective_group final : public collective_session {
public:
  using clock = std::chrono::steady_clock;

  /// How many collectives the flight recorder keeps.
  static constexpr std::size_t flight_recorder_size = 64;

  /// How many flight-recorder entries a timeout_error's message includes.
  static constexpr std::size_t entries_in_errors = 8;

  /// The most participants a group can have.
  static constexpr std::size_t max_participants = 4095;

  /// A group of `participants` ranks (0 .. participants-1), named `tag` in
  /// messages, which call a participant `rank_noun` ("rank 2", or "replica
  /// 2" for a strategy's replicas). Its ranks spin while they wait when
  /// `threads_on_host` fit on the CPUs: the threads of this host that wait
  /// like them, this group's included (0: the participants alone; several
  /// worker processes on one host each have a group). Throws value_error
  /// for 0 participants or more than max_participants.
  collective_group(std::size_t participants, std::string tag, std::string rank_noun = "rank",
                   std::size_t threads_on_host = 0);
  ~collective_group();

  collective_group(const collective_group&) = delete;
  collective_group& operator=(const collective_group&) = delete;

  /// The number of participants.
  std::size_t size() const noexcept override { return participants_; }

  /// The group's name in messages.
  const std::string& tag() const noexcept { return tag_; }

  /// The sequence number `rank` should put in its next fingerprint: one more
  /// than the last it arrived with (1 for its first collective). Called by
  /// the rank's own thread.
  std::uint64_t next_seq(std::size_t rank) const override;

  // -- one collective -----------------------------------------------------------

  /// Publishes `mine` as `rank`'s fingerprint for collective `mine.seq`, and
  /// `payload` for the other ranks (see payload()), and waits until every
  /// rank has arrived at it. Throws, on every rank, when the fingerprints
  /// differ (after the barrier, so no rank leaves while another reads its
  /// buffers): dtype_error when the dtypes differ, shape_error when shapes
  /// or pack layouts do, else value_error, each naming every rank's
  /// fingerprint. Throws timeout_error past `deadline` or when the
  /// collective already timed out (see the file comment); value_error for a
  /// rank out of range or a sequence number not above the rank's last one;
  /// the cancel reason for a cancelled collective.
  void arrive(std::size_t rank, const collective_fingerprint& mine, clock::time_point deadline,
              const void* payload = nullptr);

  /// The most bytes a rank can publish with arrive_inline().
  static constexpr std::size_t inline_capacity = 240;

  /// As arrive(), for a collective of at most inline_capacity bytes a rank:
  /// publishes a copy of `bytes` bytes at `data`, meets the others, checks
  /// the fingerprints and returns with the collective over for `rank` (no
  /// wait_all_done()). The other ranks' copies are then readable with
  /// inline_data() until `rank` arrives at its next collective. Throws as
  /// arrive(), and value_error for more than inline_capacity bytes.
  /// `failure`: `rank` has no valid data; once every rank arrived, the
  /// collective fails on every rank with it (see the file comment).
  void arrive_inline(std::size_t rank, const collective_fingerprint& mine,
                     clock::time_point deadline, const void* data, std::size_t bytes,
                     std::exception_ptr failure = nullptr);

  /// The copy `rank` published for collective `seq` with arrive_inline();
  /// valid as that function says.
  const void* inline_data(std::size_t rank, std::uint64_t seq) const noexcept;

  /// Returned by claim() when there is nothing to claim.
  static constexpr std::size_t no_claim = SIZE_MAX;

  /// The next unclaimed piece of work of collective `seq`, which the caller
  /// runs (0, 1, ...): each number goes to exactly one caller, so ranks can
  /// share out a collective's slices as they come. Call it between a
  /// successful arrive() and wait_all_done(); every non-inline arrival
  /// resets the count before it counts itself in, so it starts at 0 in every
  /// collective. no_claim once `seq` timed out: a rank
  /// that left a timed-out collective may already have reset the count for
  /// its next one, and the buffers of `seq` may be gone.
  std::size_t claim(std::uint64_t seq);

  /// What `rank` published with its arrival at the running collective;
  /// valid between a successful arrive() and wait_all_done() of the caller.
  const void* payload(std::size_t rank) const noexcept;

  /// Marks `rank` done with its share of collective `seq` (after a
  /// successful arrive()) and waits until every rank is. `failure`: `rank`
  /// could not do its share; the collective then fails on every rank (see
  /// the file comment), which rethrow the lowest failed rank's reason.
  /// Throws timeout_error past `deadline` or when the collective already
  /// timed out, value_error without a successful arrive().
  void wait_all_done(std::size_t rank, std::uint64_t seq, clock::time_point deadline,
                     std::exception_ptr failure = nullptr);

  /// Withdraws every collective with a sequence number below `seq` that has
  /// not started: its waiting ranks, and ranks arriving at it later, throw
  /// `reason`. Started collectives run to their end.
  void cancel_below(std::uint64_t seq, std::exception_ptr reason) override;

  /// `rank` will issue no more collectives in `epoch` (its replica function
  /// returned): a rank waiting for it in a collective of that epoch stops
  /// waiting and throws context_error naming it.
  void depart(std::size_t rank, std::uint64_t epoch) override;

  /// True while `rank` waits in (or works on) a collective numbered
  /// `from_seq` or above.
  bool waiting(std::size_t rank, std::uint64_t from_seq) const noexcept override;

  /// The `seq` of the last cancel_below() (0 if none).
  std::uint64_t cancelled_below() const noexcept override { return cancelled_below_.load(); }

  /// When some rank waits for others at a collective with a sequence number
  /// of at least `from_seq`: which ranks did not reach it, where each of
  /// them is instead, and the last flight-recorder entries (the text of a
  /// timeout_error). Empty otherwise.
  std::string stall_report(std::uint64_t from_seq) const override;

  // -- flight recorder ----------------------------------------------------------

  /// The last `flight_recorder_size` collectives, oldest first, one per
  /// line: "#3 all_reduce sum float32 [4] 16 B: completed, started at
  /// +1.250 ms, took 0.031 ms".
  std::string dump() const override;

  /// As dump(), but only the last `entries` collectives.
  std::string dump(std::size_t entries) const;

private:
  enum class outcome { running, completed, mismatch, timed_out, cancelled, failed };

  struct rank_slot;
  struct record {
    collective_fingerprint fingerprint;
    clock::time_point start;
    clock::time_point end;
    bool started = false; // false: it timed out before it started
    bool ended = false;
    outcome state = outcome::running;
  };
  struct timed_out_collective {
    std::uint64_t seq;
    std::string message;
  };

  // Polls for at most the spin budget, then sleeps, until `ready()` or
  // `deadline`; returns ready().
  template <class Ready>
  bool wait_until(Ready ready, clock::time_point deadline);
  // Wakes every waiter after a state change.
  void publish();
  bool may_be_refused(std::uint64_t seq) const noexcept;
  // Cancelled, or a collective timed out since `timeouts_seen`.
  bool newly_refused(std::uint64_t seq, std::uint64_t timeouts_seen) const noexcept;
  // Whether collective `seq` is cancelled or timed out (lock held).
  bool refused(std::uint64_t seq) const;
  // The timed-out collective `seq`, if it is one (lock held).
  const timed_out_collective* find_timed_out(std::uint64_t seq) const;
  // Throws when `rank` finishes `seq` after it timed out (lock held).
  void throw_if_finished_late(std::size_t rank, std::uint64_t seq) const;
  // Throws if collective `seq` was cancelled or timed out (lock held).
  void throw_if_refused(std::size_t rank, std::uint64_t seq, const collective_fingerprint& mine,
                        bool late_arrival);
  // arrive() while the rank's `inside` flag is set.
  // With `inline_bytes` of `inline_data` published in the rank's inline area.
  void rendezvous(std::size_t rank, const collective_fingerprint& mine,
                  clock::time_point deadline, const void* payload,
                  const void* inline_data = nullptr, std::size_t inline_bytes = 0,
                  std::exception_ptr failure = nullptr);
  // The failure a rank reported for `seq`, lowest rank first, or null;
  // called by `rank` once every rank has arrived (inline) or finished.
  std::exception_ptr failure_of(std::size_t rank, std::uint64_t seq);
  // A rank that misses `mine` and departed its epoch, or participants_.
  std::size_t departed_rank(const collective_fingerprint& mine) const noexcept;
  // Takes back `rank`'s arrival at `seq`; false when `seq` started.
  bool withdraw(std::uint64_t seq);
  // Marks `seq` timed out and throws timeout_error; returns only when, at
  // the barrier, the last rank finished meanwhile.
  void time_out(std::uint64_t seq, const collective_fingerprint& mine, bool barrier);
  void check_rank(std::size_t rank, const char* call) const;
  void check_fingerprints(std::size_t rank, const collective_fingerprint& mine,
                          std::uint64_t digest, clock::time_point deadline);
  // Counts `rank` in at the barrier and waits for the others; returns the
  // collective's failure (failure_of), if any.
  std::exception_ptr finish(std::size_t rank, std::uint64_t seq, clock::time_point deadline,
                            outcome result);
  void record_start(const collective_fingerprint& fingerprint);
  void record_end(std::uint64_t seq, outcome result);
  // A collective that ended before it started (lock held).
  void record_unstarted(const collective_fingerprint& fingerprint, outcome result);
  record* find_record(std::uint64_t seq);
  std::string describe_missing(std::uint64_t seq, const collective_fingerprint& issued,
                               bool barrier) const;
  std::string where_is(std::size_t rank) const;
  std::string dump_locked(std::size_t entries) const;
  std::string rank_name(std::size_t rank) const;
  void prune_timed_out();

  const std::size_t participants_;
  const std::string tag_;
  const std::string rank_noun_;
  const std::chrono::microseconds spin_budget_; // 0: more ranks than CPUs
  const std::chrono::microseconds poll_budget_;
  const clock::time_point created_;

  std::unique_ptr<rank_slot[]> slots_;
  // (sequence number << 12) | count, for the rendezvous and the barrier.
  alignas(64) std::atomic<std::uint64_t> arrivals_{0};
  alignas(64) std::atomic<std::uint64_t> finishes_{0};
  alignas(64) std::atomic<std::size_t> claims_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> has_timeouts_{false};
  std::atomic<std::uint64_t> timeouts_added_{0};
  // How many failures ranks have reported (failure_of looks when it moved).
  alignas(64) std::atomic<std::uint64_t> failures_{0};
  std::atomic<std::uint64_t> cancelled_below_{0};
  std::atomic<std::uint64_t> departures_{0};

  mutable std::mutex mutex_; // everything below
  std::condition_variable changed_;
  std::exception_ptr cancel_reason_;
  std::vector<timed_out_collective> timed_out_;
  std::vector<record> records_; // a ring of flight_recorder_size
  std::size_t records_written_ = 0;
};

} // namespace lockstep::detail
