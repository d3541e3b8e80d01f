#pragma once

// device_communicator: the ranks are replica threads of one process whose
// buffers one kernel of their device kind can reach (the logical GPUs of
// one physical GPU, or host memory). Every collective meets in one
// collective_group (its session: fingerprints, deadlines, stall reports,
// the flight recorder), and then the rank that claims the collective's one
// piece of work launches it over every rank's buffers:
//
//   all_reduce   one reduce_buffers kernel per tensor (device_registry.hpp):
//                reads the N ranks' inputs, writes each rank's output, in
//                rank order (2N·S bytes for N ranks of S bytes)
//   broadcast    each rank copies the root's buffers into its own
//   all_gather   each rank copies every rank's input into its output
//
// On CUDA memory the launches are asynchronous and ordered by events
// (cuda/cuda_places.hpp): the barrier after the launch keeps the buffers'
// handles alive until the work is enqueued, not until it ran, and no rank
// waits for the GPU. reduce_scatter has no kernel and throws device_error.

#include "collectives/collective_group.hpp"
#include "collectives/communicator.hpp"

#include <string>

namespace lockstep::detail {

class device_communicator final : public communicator {
public:
  /// `ranks` replica threads; `tag` names the group in errors and
  /// fingerprints.
  device_communicator(std::size_t ranks, std::string tag);

  std::string name() const override;
  std::size_t size() const noexcept override;
  collective_session& session() noexcept override;

  /// One collective per tensor (packing does not apply: each tensor is one
  /// launch); the first takes a sequence number of at least `first_seq`.
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
  collective_group group_;
};

} // namespace lockstep::detail
