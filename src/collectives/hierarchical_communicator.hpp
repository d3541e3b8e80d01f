#pragma once

// hierarchical_communicator: a communicator of G groups of L ranks each
// (one group per process, say), built from two communicators: `local`, the
// L ranks of this group, and `leaders`, one rank per group, which the
// group's local rank 0 (its leader) joins as rank `group_index`. Rank
// numbers are global: local rank l of group g is rank g·L + l, and a rank
// calls this communicator with its global rank.
//
// Each collective runs in three stages: in the local group (all-reduce,
// all-gather, or the root's broadcast), between the leaders over the
// results, and back out to the local group (a broadcast from the leader).
// MEAN is a SUM in every stage and a division by G·L at the end, so
// integers truncate as a flat all-reduce does; floating sums associate as
// ((group 0) + (group 1) + ...), which may differ in the last bits from a
// flat all-reduce's rank order, but is the same on every rank and run.
// float16 and bfloat16 round once per stage (the flat all-reduce rounds
// once in all).
//
// Failures reach every rank of every group: a local stage that fails fails
// on all local ranks, and the leader still joins the leaders' stage,
// passing the failure on; a leaders' stage that fails reaches the local
// ranks through the fan-out, for which they wait past the collective's
// timeout (the leaders' stage's report_delay and a margin), so that the
// leaders' timeout_error, naming the workers that did not come, is what
// every local rank throws. The session is the local one: sequence
// numbers, cancellation and the flight recorder of this group's ranks (the
// leaders' collectives are in `leaders`' session).

#include "collectives/communicator.hpp"

#include <memory>

namespace lockstep::detail {

class hierarchical_communicator final : public communicator {
public:
  /// Throws value_error for a null communicator or `group_index` not below
  /// leaders->size().
  hierarchical_communicator(std::shared_ptr<communicator> local,
                            std::shared_ptr<communicator> leaders, std::size_t group_index);

  std::string name() const override;
  std::size_t size() const noexcept override;
  collective_session& session() noexcept override;
  /// The leaders' stage's: its error reaches every local rank.
  std::chrono::milliseconds report_delay() const noexcept override;

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
  /// The local rank of global `rank`; value_error unless it is in this group.
  std::size_t local_rank(std::size_t rank, const char* op) const;

  /// Runs the three stages on local rank `local`: `inward` on every local
  /// rank, `across` on the leader, then the leader's broadcast of
  /// `results` to the local ranks, passing failures on (file comment).
  template <class Inward, class Across>
  void staged(std::size_t local, std::span<tensor> results, const collective_options& options,
              Inward inward, Across across);

  std::shared_ptr<communicator> local_;
  std::shared_ptr<communicator> leaders_;
  std::size_t group_index_;
};

} // namespace lockstep::detail
