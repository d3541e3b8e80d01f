#pragma once

// communicator: moves and reduces buffers between the ranks of a group. Its
// implementations (src/communicators/) each pair an algorithm with what
// carries its bytes: threads of one process over shared memory, replicas
// on one device, the ring's algorithm over the TCP link between processes
// (NCCL between GPUs would be another). Communicators compose: a
// hierarchical_communicator runs a collective in a local group, between
// one leader per group, and back out to the local group.
//
// Each rank calls from its own thread (or stream), with its own buffers;
// every rank of the group must issue the same collectives in the same
// order, and the session checks that they do (collective_session). A
// collective that fails on one rank fails on every rank, and the
// communicator stays usable. A failed collective leaves its outputs
// unspecified.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "collectives/collective_options.hpp"
#include "collectives/collective_session.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"

namespace lockstep::detail {

class communicator {
public:
  virtual ~communicator() = default;

  /// Names the communicator in errors, e.g. "slice_all_reduce".
  virtual std::string name() const = 0;

  /// The number of ranks.
  virtual std::size_t size() const noexcept = 0;

  /// Sequence numbers, cancellation, departures, stall reports and the
  /// flight recorder of the collectives this communicator runs.
  virtual collective_session& session() noexcept = 0;

  /// How long after a collective's deadline this communicator may still
  /// take to raise its error (a transport between processes asks the other
  /// workers which of them reached it): a rank that waits for its result
  /// waits that much longer. 0 unless a transport says otherwise.
  virtual std::chrono::milliseconds report_delay() const noexcept { return {}; }

  /// Reduces `inputs[i]` across the ranks into `outputs[i]` (the same
  /// shapes on every rank; outputs may alias inputs), combining the ranks
  /// in rank order so results are the same on every rank and every run.
  /// Tensors are packed per options.packing. Sequence numbers start at
  /// `first_seq` or the session's next one, whichever is larger.
  virtual void all_reduce(std::size_t rank, reduce_op op, std::span<const tensor> inputs,
                          std::span<tensor> outputs, const collective_options& options,
                          std::uint64_t first_seq = 0) = 0;

  /// `output` (E elements) receives block `rank` of the reduction of every
  /// rank's `input` (size() * E elements, in blocks of E in rank order).
  virtual void reduce_scatter(std::size_t rank, reduce_op op, const tensor& input,
                              tensor& output, const collective_options& options) = 0;

  /// `output` (size() * E elements) receives every rank's `input` (E
  /// elements), in rank order.
  virtual void all_gather(std::size_t rank, const tensor& input, tensor& output,
                          const collective_options& options) = 0;

  /// Every rank's `buffers` receive a copy of rank `root`'s.
  virtual void broadcast(std::size_t rank, std::size_t root, std::span<tensor> buffers,
                         const collective_options& options) = 0;
};

} // namespace lockstep::detail
