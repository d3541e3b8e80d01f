#pragma once

// shm_communicator: the ranks are threads of one process and share memory.
// Every collective meets in one collective_group (its session) and each
// rank reads the others' buffers directly: all-reduce is the slice
// algorithm (collectives/allreduce_slices.hpp, in packs:
// collectives/allreduce_packs.hpp), the others are
// collectives/block_collectives.hpp. Nothing is copied through a staging
// buffer and nothing is sent.

#include "collectives/communicator.hpp"
#include "collectives/collective_group.hpp"

#include <string>

namespace lockstep::detail {

class shm_communicator final : public communicator {
public:
  /// `ranks` threads; `tag` names the group in errors and fingerprints and
  /// `rank_noun` its ranks ("replica 2"); `threads_on_host`: see
  /// collective_group's constructor.
  shm_communicator(std::size_t ranks, std::string tag, std::string rank_noun = "rank",
                   std::size_t threads_on_host = 0);

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

  /// Where the ranks meet (for white-box tests).
  collective_group& group() noexcept { return group_; }

private:
  collective_group group_;
};

} // namespace lockstep::detail
