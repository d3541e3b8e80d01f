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

hierarchical_communicator::hierarchical_communicator(std::shared_ptr<communicator> local,
                                                     std::shared_ptr<communicator> leaders,
                                                     std::size_t group_index)
  : local_(std::move(local)), leaders_(std::move(leaders)), group_index_(group_index) {
  if (!local_ || !leaders_)
    throw value_error("hierarchical_communicator: needs a local and a leaders' communicator");
  if (group_index_ >= leaders_->size())
    throw value_error("hierarchical_communicator: group " + std::to_string(group_index_)
                      + " out of range for " + std::to_string(leaders_->size()) + " leaders");
}

std::string hierarchical_communicator::name() const {
  return local_->name() + " / " + leaders_->name();
}

std::size_t hierarchical_communicator::size() const noexcept {
  return local_->size() * leaders_->size();
}

collective_session& hierarchical_communicator::session() noexcept {
  return local_->session();
}

std::chrono::milliseconds hierarchical_communicator::report_delay() const noexcept {
  return leaders_->report_delay();
}

std::size_t hierarchical_communicator::local_rank(std::size_t rank, const char* op) const {
  const auto first = group_index_ * local_->size();
  if (rank < first || rank >= first + local_->size())
    throw value_error(std::string{op} + " in '" + name() + "': rank " + std::to_string(rank)
                      + " is not in group " + std::to_string(group_index_) + " (ranks "
                      + std::to_string(first) + " to " + std::to_string(first + local_->size() - 1)
                      + ")");
  return rank - first;
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
    fan_out.timeout = options.timeout + leaders_->report_delay()
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
  if (local_->size() == 1) { // one replica a worker: the local stages would only copy
    leaders_->all_reduce(group_index_, op, inputs, outputs, options);
    return;
  }
  const auto stage_op = op == reduce_op::mean ? reduce_op::sum : op;
  staged(
    local, outputs, options,
    [&](const collective_options& o) {
      local_->all_reduce(local, stage_op, inputs, outputs, o, first_seq);
    },
    [&](const collective_options& o) {
      leaders_->all_reduce(group_index_, stage_op, outputs, outputs, o);
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
  // This group's blocks go to their place in `output`, then the leaders
  // gather every group's run of blocks.
  const auto run = static_cast<std::int64_t>(local_->size()) * input.num_elements();
  tensor group_blocks = tensor::uninitialized(input.dtype(), {run}, input.device());
  staged(
    local, {&output, 1}, options,
    [&](const collective_options& o) { local_->all_gather(local, input, group_blocks, o); },
    [&](const collective_options& o) {
      leaders_->all_gather(group_index_, group_blocks, output, o);
    });
}

void hierarchical_communicator::broadcast(std::size_t rank, std::size_t root,
                                          std::span<tensor> buffers,
                                          const collective_options& options) {
  const auto local = local_rank(rank, "broadcast");
  if (root >= size())
    throw value_error("broadcast in '" + name() + "': root " + std::to_string(root)
                      + " out of range for " + std::to_string(size()) + " ranks");
  const auto root_group = root / local_->size();
  staged(
    local, buffers, options,
    [&](const collective_options& o) {
      // The root's group brings the value to its leader; the other groups
      // meet with nothing, so that a failure on any rank reaches the leader.
      if (root_group == group_index_)
        local_->broadcast(local, root % local_->size(), buffers, o);
      else
        local_->broadcast(local, 0, {}, o);
    },
    [&](const collective_options& o) { leaders_->broadcast(group_index_, root_group, buffers, o); });
}

} // namespace lockstep::detail
