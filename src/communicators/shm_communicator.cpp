#include "communicators/shm_communicator.hpp"

#include "collectives/allreduce_packs.hpp"
#include "collectives/block_collectives.hpp"

namespace lockstep::detail {

shm_communicator::shm_communicator(std::size_t ranks, std::string tag, std::string rank_noun,
                                   std::size_t threads_on_host)
  : group_(ranks, std::move(tag), std::move(rank_noun), threads_on_host) {}

std::string shm_communicator::name() const {
  return group_.tag();
}

std::size_t shm_communicator::size() const noexcept {
  return group_.size();
}

collective_session& shm_communicator::session() noexcept {
  return group_;
}

void shm_communicator::all_reduce(std::size_t rank, reduce_op op,
                                  std::span<const tensor> inputs, std::span<tensor> outputs,
                                  const collective_options& options, std::uint64_t first_seq) {
  allreduce_packs(group_, rank, op, inputs, outputs, options.packing, options, first_seq);
}

void shm_communicator::reduce_scatter(std::size_t rank, reduce_op op, const tensor& input,
                                      tensor& output, const collective_options& options) {
  reduce_scatter_blocks(group_, rank, op, input, output, options);
}

void shm_communicator::all_gather(std::size_t rank, const tensor& input, tensor& output,
                                  const collective_options& options) {
  all_gather_blocks(group_, rank, input, output, options);
}

void shm_communicator::broadcast(std::size_t rank, std::size_t root, std::span<tensor> buffers,
                                 const collective_options& options) {
  broadcast_buffers(group_, rank, root, buffers, options);
}

} // namespace lockstep::detail
