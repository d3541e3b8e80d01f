#pragma once

// hierarchical_communicator: a communicator of groups of ranks (one group
// per process, or per host), built from two communicators: `local`, the
// ranks of this group, and `leaders`, one rank per group, which the
// group's local rank 0 (its leader) joins as rank `group_index`. Rank
// numbers are global, and a rank calls this communicator with its global
// rank. Groups of L ranks each make rank g·L + l local rank l of group g;
// a rank_groups layout lists each group's ranks instead, for groups of
// different sizes or ranks that are not consecutive (the workers of each
// host, node/host_group.hpp).
//
// Each collective runs in three stages: in the local group (all-reduce,
// all-gather, or the root's broadcast), between the leaders over the
// results, and back out to the local group (a broadcast from the leader).
// MEAN is a SUM in every stage and a division by the ranks at the end, so
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

#include <atomic>
#include <memory>
#include <vector>

namespace lockstep::detail {

/// Which global ranks form each group: groups[g] lists group g's ranks in
/// local order (its first is the group's leader, leaders' rank g). Every
/// rank from 0 to the total, less one, appears once.
struct rank_groups {
  std::vector<std::vector<std::size_t>> groups;

  /// `count` groups of `per_group` ranks: group g holds g·per_group + l.
  static rank_groups uniform(std::size_t count, std::size_t per_group);
};

class hierarchical_communicator final : public communicator {
public:
  /// Groups of local->size() ranks each, one a leader. Throws value_error
  /// for a null communicator or `group_index` not below leaders->size().
  hierarchical_communicator(std::shared_ptr<communicator> local,
                            std::shared_ptr<communicator> leaders, std::size_t group_index);

  /// The groups of `layout`, this one group `group_index` (local->size()
  /// ranks). `leaders` may be null where this communicator serves no
  /// leader (a process whose one rank is not its group's first): then
  /// `leaders_report_delay` stands for the leaders' report_delay().
  /// `owns_stages`: `local` and `leaders` serve this communicator alone,
  /// so it numbers their collectives (collective_options::seq) as its own:
  /// every stage of its collective #k is #k, in errors and in the progress
  /// that a timeout between processes asks about (reached()). Throws
  /// value_error for a layout that is not a partition of the ranks, or
  /// that does not fit `local` and `leaders`.
  hierarchical_communicator(std::shared_ptr<communicator> local,
                            std::shared_ptr<communicator> leaders, rank_groups layout,
                            std::size_t group_index,
                            std::chrono::milliseconds leaders_report_delay = {},
                            bool owns_stages = false);

  /// The collectives that global rank `rank` of this group started (0 for
  /// none): what a worker reached, which a timeout between processes asks.
  std::uint64_t reached(std::size_t rank) const;

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
  /// The leaders' communicator; logic_error where this one has none.
  communicator& leaders() const;
  /// Starts a collective of local rank `local` (reached()): the options
  /// of its stages (numbered, where this communicator owns them).
  collective_options begin(std::size_t local, const collective_options& options);

  /// Runs the three stages on local rank `local`: `inward` on every local
  /// rank, `across` on the leader, then the leader's broadcast of
  /// `results` to the local ranks, passing failures on (file comment).
  template <class Inward, class Across>
  void staged(std::size_t local, std::span<tensor> results, const collective_options& options,
              Inward inward, Across across);

  std::shared_ptr<communicator> local_;
  std::shared_ptr<communicator> leaders_; // null: no rank here leads
  rank_groups layout_;
  std::size_t group_index_;
  std::size_t ranks_ = 0;                     // in all groups
  std::vector<std::pair<std::size_t, std::size_t>> place_; // by rank: (group, local rank)
  bool uniform_ = true;                       // rank g·L + l is local rank l of group g
  bool owns_stages_ = false;
  std::chrono::milliseconds leaders_report_delay_{0};
  std::unique_ptr<std::atomic<std::uint64_t>[]> started_; // by local rank
};

} // namespace lockstep::detail
