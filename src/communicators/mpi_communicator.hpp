#pragma once

// mpi_communicator: the collectives between worker processes over MPI
// (Open MPI reaches InfiniBand through UCX, and shared memory on one
// host), behind the communicator interface, one rank per process, as the
// TCP ring's communicator is. It works on its own duplicate of the MPI
// communicator it is given (MPI_Comm_dup, with MPI_ERRORS_RETURN set on
// it), so its collectives never match the program's own MPI calls.
//
// A collective:
//
// * agreement: every rank contributes a record of record_bytes (its
//   fingerprint and the failure it passes on, ring_records' frame) to one
//   MPI_Iallgather, then checks them all: a mismatch or a failure throws,
//   alike on every rank, and the communicator stays usable. A frame that
//   does not fit its record (a long failure message or tag) is announced
//   by its length, and every rank then gathers the whole frames with an
//   MPI_Iallgatherv;
// * data: one MPI call: MPI_Allreduce (one per run of tensors of one
//   dtype, through a contiguous buffer when the run has several tensors;
//   blocking, see Waits),
//   MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast (one per
//   buffer). MEAN is SUM, then a division by the number of ranks
//   (divide_loop: integers truncate toward zero), as on the ring.
//   float32, float64, int32 and int64 are MPI's own datatypes and ops;
//   float16 and bfloat16 travel as a contiguous 2-byte type and combine
//   through MPI_Op_create'd ops that run lockstep's kernels (computed in
//   float, rounded once per combining step).
//
// Order: MPI chooses the order in which it combines the ranks (Open MPI's
// algorithms depend on the size, and are not rank order), so float
// results may differ in their last bits from the ring's; integers are
// exact in any order, so their results are the ring's bit for bit. Every
// rank gets the same bits: docs/multi_worker.md, "Collectives over MPI".
//
// Waits: MPI cannot cancel a collective. Each call but an all-reduce's
// data is non-blocking, and the rank polls it (MPI_Test, which also
// drives Open MPI's progress) until it completes, its deadline passes (timeout_error naming the
// collective) or the group is broken (break_group, from any thread: a
// lost worker, in the node's words). A timeout, a break or an MPI error
// leaves a collective in flight that MPI still owns, so the communicator
// is broken for good: this and every later collective throw that error
// without calling into MPI again (the buffers of an abandoned collective
// are kept alive until the process ends). An all-reduce's data, once
// every rank agreed to it within the deadline, moves in a blocking
// MPI_Allreduce: Open MPI's non-blocking MPI_Iallreduce runs slower
// algorithms (1.2 to 1.5 times over TCP here), and what lockstep adds on
// top of MPI must cost nothing measurable; so a rank that stalls or dies
// inside that call is not bounded by lockstep's deadline. A rank blocked
// inside MPI when a peer dies is ended by the launcher (Open MPI's mpirun
// kills the job).
//
// Threads: the communicator calls MPI from whichever thread issues a
// collective, one call at a time (a process-wide mutex), so MPI must run
// at MPI_THREAD_SERIALIZED or above; when MPI is not initialized, the
// first communicator initializes it at MPI_THREAD_MULTIPLE (so that the
// program's own MPI calls may run beside lockstep's) and finalizes it at
// exit. One rank's collectives are issued one at a time (by one thread,
// or serialized by the caller), as on every communicator between
// processes.

// MPI's C API only: Open MPI's (deprecated) C++ bindings are not used.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include "collectives/communicator.hpp"
#include "collectives/ring_records.hpp"
#include "collectives/worker_session.hpp"
#include "runtime/error_value.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lockstep::detail {

/// The buffers MPI reads and writes during a collective (mpi_communicator.cpp).
struct mpi_collective_buffers;

class mpi_communicator final : public communicator {
public:
  /// Bytes of a rank's agreement record: a fingerprint with a short tag
  /// and a shape of a few dimensions fits; a longer frame costs a second
  /// gather.
  static constexpr std::size_t record_bytes = 512;

  /// A duplicate of `parent` (every rank of `parent` constructs one
  /// together: MPI_Comm_dup is collective). Initializes MPI first when
  /// nobody did. Throws context_error when MPI runs below
  /// MPI_THREAD_SERIALIZED or was finalized, and mpi_error's error for a
  /// failing MPI call (an error on `parent` itself goes to its own error
  /// handler, MPI_COMM_WORLD's aborts).
  explicit mpi_communicator(MPI_Comm parent = MPI_COMM_WORLD);

  /// Frees the duplicate, unless the communicator is broken or MPI was
  /// finalized.
  ~mpi_communicator() override;

  mpi_communicator(const mpi_communicator&) = delete;
  mpi_communicator& operator=(const mpi_communicator&) = delete;

  /// Breaks the group (a lost worker, from the node): the collective in
  /// progress on this rank and every later one throw `why`, and the
  /// communicator does not call into MPI again. The first reason wins.
  /// Any thread.
  void break_group(const error_value& why) noexcept;

  /// This process's rank.
  std::size_t rank() const noexcept { return rank_; }

  /// The last collective this rank started (0 for none).
  std::uint64_t reached() const noexcept;

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

  /// The parent's duplicate, with this process's rank and the size.
  struct duplicate {
    MPI_Comm comm = MPI_COMM_NULL;
    int rank = 0;
    int size = 0;
  };
  static duplicate duplicate_of(MPI_Comm parent);
  explicit mpi_communicator(duplicate d);

  /// Runs collective `f`: agrees on it with every rank (with the caller's
  /// failure), then `work(deadline)` moves the data; records the outcome.
  template <class Work>
  void run(std::size_t rank, const collective_fingerprint& f, const collective_options& options,
           Work work);

  /// The agreement (see the file comment).
  void agree(const collective_fingerprint& f, const collective_options& options,
             time_point deadline);

  /// Polls `requests` until all complete. Past `deadline`, breaks the
  /// group with f's timeout_error; on a break, throws its reason; on an
  /// MPI error, breaks the group with it. `what` names the wait in errors
  /// ("MPI_Iallreduce"). `keep`: tensors whose buffers MPI writes, kept
  /// alive if the wait is abandoned.
  void wait(std::vector<MPI_Request>& requests, const char* what,
            const collective_fingerprint& f, std::chrono::milliseconds timeout,
            time_point deadline, std::span<const tensor> keep = {});

  /// Throws, breaking the group, unless `code` is MPI_SUCCESS.
  void check(int code, const char* call, const collective_fingerprint& f);

  /// Throws the group's reason if it broke.
  void throw_if_broken() const;

  /// Gives `requests` in flight, and the buffers they use (buffers_ and
  /// `keep`), to MPI until the process ends.
  void abandon(std::vector<MPI_Request>& requests, std::span<const tensor> keep);

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::size_t rank_ = 0;
  std::size_t ranks_ = 0;
  ring_records records_; // the agreement's frames, decoded
  std::unique_ptr<mpi_collective_buffers> buffers_; // reused by every collective
  std::vector<MPI_Request> requests_;               // reused
  worker_session session_;
  std::atomic<bool> broken_{false};
  mutable std::mutex reason_mutex_; // guards reason_
  error_value reason_;
};

/// The lockstep error for MPI's `code`, returned by `call`
/// ("MPI_Iallreduce"), in `context` (what lockstep was doing): value_error
/// for an argument MPI refused (a bad root, count, type or op; a message
/// truncated), resource_error when MPI ran out of memory, else error; the
/// message names the call, MPI's error class and MPI_Error_string's text.
error_value mpi_error(int code, const char* call, const std::string& context);

} // namespace lockstep::detail
