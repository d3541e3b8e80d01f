#pragma once

// host_shm_communicator: the worker processes of one host, one rank each,
// meeting in a shared-memory segment (transport/shm/shared_segment.hpp)
// instead of the TCP ring. Open MPI's and NCCL's processes move their bytes
// through shared memory on one host for the same reason: loopback TCP
// costs kernel copies (docs/multi_worker.md, "Workers on one host").
//
// The segment holds, for every rank, a control line (the barriers it
// passed, the collective it is in), two record areas (what it issued for
// the collective, alternating between consecutive collectives) and a slot
// of slot_bytes for its data. A collective:
//
// * agreement: each rank writes its record (ring_records' frame: its
//   fingerprint, the failure it passes on instead of data, and for a small
//   all-reduce its data) and passes a barrier; every rank reads every
//   record and throws, alike on every rank, when one differs or failed;
// * small all-reduce (at most small_bytes a rank): every rank reduces the
//   records' data in rank order into its own outputs. One barrier: the
//   records alternate, so a rank that runs ahead to its next collective
//   writes the other area;
// * else chunk by chunk of at most slot_bytes: each rank copies its chunk
//   into its slot; barrier; rank r reduces slice r of the chunk across
//   every slot in rank order, in place in every slot (the in-process slice
//   algorithm, collectives/chunk_reduction.hpp, one pass); barrier; each
//   rank copies its slot out. A reduce-scatter is that pass, each rank
//   reading back only its own block; all-gather and broadcast copy
//   through the slots the same way.
//
// Every rank combines in rank order, so all ranks get the same bits on
// every run. Waits (transport/shm/shared_wait.hpp) poll only while every
// rank of the host has a CPU, then sleep on a shared futex, and look at
// their deadline and at the group's state at least every 10 ms: a dead
// process never wakes anyone, so a lost worker is the node's word
// (break_group, from its heartbeats and connections), which every rank
// sees within that time. A broken group stays broken: the reason (a lost
// worker's peer_lost_error, a collective's timeout_error) is written once
// into the segment, and this and every later collective of every rank
// throws it. A timeout names the workers that did not reach the
// collective: their progress is in the segment.

#include "collectives/communicator.hpp"
#include "collectives/ring_records.hpp"
#include "collectives/worker_session.hpp"
#include "runtime/error_value.hpp"
#include "transport/shm/shared_segment.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace lockstep::detail {

struct host_segment_layout;

class host_shm_communicator final : public communicator {
public:
  /// Bytes of each rank's data slot: the largest chunk.
  static constexpr std::size_t default_slot_bytes = 256 * 1024;
  /// The largest all-reduce, in bytes a rank, that goes through the records.
  static constexpr std::size_t small_bytes = 1024;
  /// Bytes of a record area: a fingerprint and a failure's message, and
  /// small_bytes of data.
  static constexpr std::size_t record_bytes = 8 * 1024;
  /// The most ranks of a segment.
  static constexpr std::size_t max_ranks = 256;

  /// The segment's size for `ranks` ranks and slots of `slot_bytes`.
  static std::size_t segment_bytes(std::size_t ranks, std::size_t slot_bytes);

  /// Rank `rank` of `ranks` (names it "worker <worker>" in errors) over
  /// `segment` (segment_bytes(ranks, slot_bytes) long; rank 0 created and
  /// initialized it with initialize()). `processes_on_host`: the
  /// processes that may wait at once on this host's CPUs (spin only while
  /// they fit). Throws value_error for a segment of another size or layout.
  host_shm_communicator(shared_segment segment, std::size_t rank, std::size_t ranks,
                        std::size_t slot_bytes, std::vector<std::size_t> workers,
                        std::size_t processes_on_host);

  /// Writes a fresh layout into a segment created for `ranks` ranks.
  static void initialize(shared_segment& segment, std::size_t ranks, std::size_t slot_bytes);

  /// Breaks the group (a lost worker, from the node): every rank's
  /// collective in progress and every later one throws `why`. The first
  /// reason written wins. Any thread.
  void break_group(const error_value& why) noexcept;

  /// The last collective this rank started (0 for none).
  std::uint64_t reached() const noexcept;

  /// Which collective each worker of the cluster reached (by worker
  /// number, no_progress_answer where one did not answer), asked when
  /// collective `seq` passed its deadline; empty when nobody could be asked.
  using progress_question = std::function<std::vector<std::uint64_t>(std::uint64_t seq)>;
  /// Tells every worker of the cluster that this worker's collective
  /// failed with `why`.
  using failure_notice = std::function<void(const error_value& why)>;
  /// For a group of one host among several (the hierarchical form): a
  /// timeout names every worker of the cluster that did not reach the
  /// collective, asked with `ask` (within `delay`), not only this host's,
  /// and `tell` passes it on to the other hosts. Without it, the workers'
  /// progress in the segment explains it. Any thread; empty hooks undo it.
  void explain_timeouts(std::chrono::milliseconds delay, progress_question ask,
                        failure_notice tell);
  /// How long after a deadline a timeout_error may come (asking the others).
  std::chrono::milliseconds report_delay() const noexcept override;

  std::string name() const override;
  std::size_t size() const noexcept override;
  collective_session& session() noexcept override;

  void all_reduce(std::size_t rank, reduce_op op, std::span<const tensor> inputs,
                  std::span<tensor> outputs, const collective_options& options,
                  std::uint64_t first_seq = 0) override;
  void reduce_scatter(std::size_t rank, reduce_op op, const tensor& input, tensor& output,
                      const collective_options& options) override;
  void all_gather(std::size_t rank, const tensor& input, tensor& output,
                  const collective_options& options) override;
  void broadcast(std::size_t rank, std::size_t root, std::span<tensor> buffers,
                 const collective_options& options) override;

private:
  using time_point = std::chrono::steady_clock::time_point;

  /// Runs collective `f`: agrees on it with every rank (with `payload`, the
  /// small all-reduce's data, and the caller's failure), then `work(deadline)`
  /// moves the data; records the outcome; turns a deadline into the
  /// group's timeout_error and a broken group into its reason.
  template <class Work>
  void run(std::size_t rank, collective_fingerprint f, const collective_options& options,
           std::span<const std::uint8_t> payload, Work work);

  /// Waits until every rank passed barrier number `phase`; throws the
  /// group's reason when it breaks, its timeout_error past `deadline`.
  void barrier(std::uint64_t phase, time_point deadline, const collective_fingerprint& f,
               std::chrono::milliseconds timeout);
  /// The next barrier of this rank: arrives and waits.
  void pass_barrier(time_point deadline, const collective_fingerprint& f,
                    std::chrono::milliseconds timeout);

  /// Throws the group's reason if it broke.
  void throw_if_broken() const;
  /// The group's reason, once written.
  error_value broken_reason() const;
  /// The timeout_error of `f` on this rank, naming who did not reach it.
  error_value timeout_reason(const collective_fingerprint& f,
                             std::chrono::milliseconds timeout) const;

  /// Copies `bytes` through the slots chunk by chunk: `fill(chunk, offset,
  /// length)` writes this rank's part of each chunk into its slot, then
  /// (after a barrier) `combine(offset, length)` does this rank's share
  /// across the slots, then (after another) `drain(offset, length)` reads.
  template <class Fill, class Combine, class Drain>
  void through_slots(std::size_t bytes, std::size_t chunk, time_point deadline,
                     const collective_fingerprint& f, std::chrono::milliseconds timeout,
                     Fill fill, Combine combine, Drain drain);

  /// Reduces `bytes` of the concatenation of `in` (elements of `type`)
  /// across the ranks as collective `f`, chunk by chunk through the slots
  /// (see the file comment); `drain(offset, reduced, length)` reads each
  /// reduced chunk, bytes [offset, offset + length), from this rank's slot.
  template <class Drain>
  void reduce_through_slots(std::size_t rank, const collective_fingerprint& f,
                            const collective_options& options, reduce_op op, dtype type,
                            std::span<const tensor> in, std::size_t bytes, Drain drain);

  std::byte* slot(std::size_t r) const noexcept;

  shared_segment segment_;
  host_segment_layout* layout_;
  std::size_t rank_;
  std::size_t ranks_;
  std::size_t slot_bytes_;
  std::vector<std::size_t> workers_; // by rank: the worker's number in the cluster
  std::chrono::microseconds spin_;
  std::uint64_t phase_ = 0;      // barriers this rank passed
  std::uint64_t collectives_ = 0; // collectives this rank ran (which record area)
  ring_records records_;          // the frames, decoded from the segment
  worker_session session_;
  mutable std::mutex explain_mutex_; // guards explain_timeouts' hooks below
  std::chrono::milliseconds delay_{0};
  progress_question ask_;
  failure_notice tell_;
};

} // namespace lockstep::detail
