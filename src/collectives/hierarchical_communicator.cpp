#include "collectives/hierarchical_communicator.hpp"

#include "runtime/fault_injection.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>

namespace lockstep::detail {

namespace {

collective_options with_failure(const collective_options& options, std::exception_ptr failure) {
  auto copy = options;
  copy.failure = std::move(failure);
  return copy;
}

} // namespace

rank_groups rank_groups::uniform(std::size_t count, std::size_t per_group) {
  rank_groups layout;
  layout.groups.resize(count);
  for (std::size_t g = 0; g < count; ++g)
    for (std::size_t l = 0; l < per_group; ++l)
      layout.groups[g].push_back(g * per_group + l);
  return layout;
}

hierarchical_communicator::hierarchical_communicator(std::shared_ptr<communicator> local,
                                                     std::shared_ptr<communicator> leaders,
                                                     std::size_t group_index)
  : hierarchical_communicator(local, leaders,
                              rank_groups::uniform(leaders ? leaders->size() : 0,
                                                   local ? local->size() : 0),
                              group_index) {
  if (!leaders_)
    throw value_error("hierarchical_communicator: needs a local and a leaders' communicator");
}

hierarchical_communicator::hierarchical_communicator(std::shared_ptr<communicator> local,
                                                     std::shared_ptr<communicator> leaders,
                                                     rank_groups layout, std::size_t group_index,
                                                     std::chrono::milliseconds leaders_report_delay,
                                                     bool owns_stages)
  : local_(std::move(local)),
    leaders_(std::move(leaders)),
    layout_(std::move(layout)),
    group_index_(group_index),
    owns_stages_(owns_stages),
    leaders_report_delay_(leaders_report_delay) {
  const auto& groups = layout_.groups;
  if (!local_)
    throw value_error("hierarchical_communicator: needs a local and a leaders' communicator");
  if (group_index_ >= groups.size())
    throw value_error("hierarchical_communicator: group " + std::to_string(group_index_)
                      + " out of range for " + std::to_string(groups.size()) + " leaders");
  if (leaders_ && leaders_->size() != groups.size())
    throw value_error("hierarchical_communicator: " + std::to_string(groups.size())
                      + " groups but " + std::to_string(leaders_->size()) + " leaders");
  if (groups[group_index_].size() != local_->size())
    throw value_error("hierarchical_communicator: group " + std::to_string(group_index_) + " has "
                      + std::to_string(groups[group_index_].size()) + " ranks but its local "
                      + "communicator " + std::to_string(local_->size()));
  for (const auto& group : groups)
    ranks_ += group.size();
  constexpr auto none = ~std::size_t{0};
  place_.assign(ranks_, {none, none});
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].empty())
      throw value_error("hierarchical_communicator: group " + std::to_string(g) + " is empty");
    for (std::size_t l = 0; l < groups[g].size(); ++l) {
      const auto rank = groups[g][l];
      if (rank >= ranks_ || place_[rank].first != none)
        throw value_error("hierarchical_communicator: the groups must hold each rank from 0 to "
                          + std::to_string(ranks_ - 1) + " once; rank " + std::to_string(rank)
                          + (rank >= ranks_ ? " is out of range" : " is in two groups"));
      place_[rank] = {g, l};
      uniform_ = uniform_ && groups[g].size() == groups[0].size()
                 && rank == g * groups[0].size() + l;
    }
  }
  started_ = std::make_unique<std::atomic<std::uint64_t>[]>(local_->size());
}

std::string hierarchical_communicator::name() const {
  return local_->name() + " / " + (leaders_ ? leaders_->name() : std::string("leaders"));
}

std::size_t hierarchical_communicator::size() const noexcept {
  return ranks_;
}

collective_session& hierarchical_communicator::session() noexcept {
  return local_->session();
}

std::chrono::milliseconds hierarchical_communicator::report_delay() const noexcept {
  return leaders_ ? leaders_->report_delay() : leaders_report_delay_;
}

std::uint64_t hierarchical_communicator::reached(std::size_t rank) const {
  return started_[local_rank(rank, "reached")].load(std::memory_order_relaxed);
}

std::size_t hierarchical_communicator::local_rank(std::size_t rank, const char* op) const {
  if (rank >= ranks_ || place_[rank].first != group_index_) {
    std::string members;
    for (const auto r : layout_.groups[group_index_])
      members += (members.empty() ? "" : ", ") + std::to_string(r);
    throw value_error(std::string{op} + " in '" + name() + "': rank " + std::to_string(rank)
                      + " is not in group " + std::to_string(group_index_) + " (ranks "
                      + members + ")");
  }
  return place_[rank].second;
}

communicator& hierarchical_communicator::leaders() const {
  if (!leaders_)
    throw value_error("hierarchical_communicator: group " + std::to_string(group_index_)
                      + "'s leader has no leaders' communicator here");
  return *leaders_;
}

collective_options hierarchical_communicator::begin(std::size_t local,
                                                    const collective_options& options) {
  const auto number = started_[local].fetch_add(1, std::memory_order_relaxed) + 1;
  if (!owns_stages_)
    return options;
  auto numbered = options;
  numbered.seq = number;
  return numbered;
}

template <class Inward, class Across>
void hierarchical_communicator::staged(std::size_t local, std::span<tensor> results,
                                       const collective_options& options, Inward inward,
                                       Across across) {
  std::exception_ptr local_failure;
  try {
    inward(options);
  } catch (...) {
    if (local != 0)
      throw; // the stage failed on every local rank, the leader included
    local_failure = std::current_exception();
  }
  if (local != 0) {
    // The leader's stage may take the whole timeout and then its report
    // (report_delay: a timeout between processes names who did not come),
    // and the leader brings its result or its error here: the other local
    // ranks wait for that, with as much again (at least 1 s) for the
    // leader's own scheduling, rather than time out in a fan-out the user
    // never issued.
    auto fan_out = options;
    fan_out.timeout = options.timeout + report_delay()
                      + std::max(options.timeout, std::chrono::milliseconds{1000});
    local_->broadcast(local, 0, results, fan_out);
    return;
  }
  // The leader meets the other leaders even when its group failed, so
  // that their groups fail too instead of waiting for it.
  auto failure = local_failure;
  try {
    across(with_failure(options, local_failure));
  } catch (...) {
    if (!failure)
      failure = std::current_exception();
  }
  if (local_failure)
    std::rethrow_exception(local_failure); // the local ranks already threw it
  fault_point("fan-out");
  local_->broadcast(0, 0, results, with_failure(options, failure));
}

void hierarchical_communicator::all_reduce(std::size_t rank, reduce_op op,
                                           std::span<const tensor> inputs,
                                           std::span<tensor> outputs,
                                           const collective_options& options,
                                           std::uint64_t first_seq) {
  const auto local = local_rank(rank, "all_reduce");
  const auto stages = begin(local, options);
  if (local_->size() == 1) { // one rank in the group: the local stages would only copy
    leaders().all_reduce(group_index_, op, inputs, outputs, stages);
    return;
  }
  const auto stage_op = op == reduce_op::mean ? reduce_op::sum : op;
  staged(
    local, outputs, stages,
    [&](const collective_options& o) {
      local_->all_reduce(local, stage_op, inputs, outputs, o, first_seq);
    },
    [&](const collective_options& o) {
      leaders().all_reduce(group_index_, stage_op, outputs, outputs, o);
    });
  if (op == reduce_op::mean)
    for (auto& t : outputs)
      divide_into(t, static_cast<std::int64_t>(size()));
}

void hierarchical_communicator::reduce_scatter(std::size_t rank, reduce_op op,
                                               const tensor& input, tensor& output,
                                               const collective_options& options) {
  // The whole reduction on every rank, then each keeps its block of it:
  // simple, at N times the bytes of a reduce-scatter proper, which a
  // transport between processes implements on its own.
  if (input.num_elements() != static_cast<std::int64_t>(size()) * output.num_elements()
      || input.dtype() != output.dtype())
    throw value_error("reduce_scatter in '" + name() + "': the input must hold "
                      + std::to_string(size()) + " blocks of the output's "
                      + std::to_string(output.num_elements()) + " elements, in its dtype");
  tensor whole = tensor::uninitialized(input.dtype(), {input.num_elements()}, input.device());
  const tensor flat = input.reshaped({input.num_elements()});
  all_reduce(rank, op, {&flat, 1}, {&whole, 1}, options); // checks `rank`
  const auto bytes = output.byte_size();
  std::memcpy(output.raw_data(), static_cast<const std::byte*>(whole.raw_data()) + rank * bytes,
              bytes);
}

void hierarchical_communicator::all_gather(std::size_t rank, const tensor& input,
                                           tensor& output, const collective_options& options) {
  const auto local = local_rank(rank, "all_gather");
  const auto stages = begin(local, options);
  const auto elements = input.num_elements();
  const auto blocks = [&](std::size_t n) {
    return tensor::uninitialized(input.dtype(), {static_cast<std::int64_t>(n) * elements},
                                 input.device());
  };
  // This group's blocks, in local order; the leaders gather every group's
  // run of blocks. With uniform groups those runs are `output` as it is;
  // else each run is padded to the largest group's, and the leader puts
  // every block at its rank's place.
  tensor group_blocks = blocks(local_->size());
  staged(
    local, {&output, 1}, stages,
    [&](const collective_options& o) { local_->all_gather(local, input, group_blocks, o); },
    [&](const collective_options& o) {
      if (uniform_) {
        leaders().all_gather(group_index_, group_blocks, output, o);
        return;
      }
      std::size_t widest = 0;
      for (const auto& group : layout_.groups)
        widest = std::max(widest, group.size());
      const auto block_bytes = static_cast<std::size_t>(input.byte_size());
      tensor padded = tensor::zeros(input.dtype(), {static_cast<std::int64_t>(widest) * elements},
                                    input.device());
      tensor runs = blocks(widest * layout_.groups.size());
      if (block_bytes != 0) // (zero elements: no buffers to copy)
        std::memcpy(padded.raw_data(), group_blocks.raw_data(), group_blocks.byte_size());
      leaders().all_gather(group_index_, padded, runs, o);
      if (block_bytes == 0)
        return;
      const auto* from = static_cast<const std::byte*>(runs.raw_data());
      auto* to = static_cast<std::byte*>(output.raw_data());
      for (std::size_t g = 0; g < layout_.groups.size(); ++g)
        for (std::size_t l = 0; l < layout_.groups[g].size(); ++l)
          std::memcpy(to + layout_.groups[g][l] * block_bytes,
                      from + (g * widest + l) * block_bytes, block_bytes);
    });
}

void hierarchical_communicator::broadcast(std::size_t rank, std::size_t root,
                                          std::span<tensor> buffers,
                                          const collective_options& options) {
  const auto local = local_rank(rank, "broadcast");
  if (root >= size())
    throw value_error("broadcast in '" + name() + "': root " + std::to_string(root)
                      + " out of range for " + std::to_string(size()) + " ranks");
  const auto stages = begin(local, options);
  const auto [root_group, root_local] = place_[root];
  staged(
    local, buffers, stages,
    [&](const collective_options& o) {
      // The root's group brings the value to its leader; the other groups
      // meet with nothing, so that a failure on any rank reaches the leader.
      if (root_group == group_index_)
        local_->broadcast(local, root_local, buffers, o);
      else
        local_->broadcast(local, 0, {}, o);
    },
    [&](const collective_options& o) { leaders().broadcast(group_index_, root_group, buffers, o); });
}

} // namespace lockstep::detail
