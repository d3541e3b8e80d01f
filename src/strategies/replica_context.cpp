#include "lockstep/replica_context.hpp"

#include "collectives/algorithm_choice.hpp"
#include "strategies/public_state.hpp"
#include "replication/thread_mode.hpp"
#include "runtime/timeline.hpp"

#include <algorithm>

#include <string>
#include <utility>

namespace lockstep {

namespace {

/// Reduces each column (one per-replica value per leaf) onto its own
/// replicas' devices, so replica r finds its result on its device.
std::vector<mirrored<tensor>> reduce_columns(strategy& s, reduce_op op,
                                             std::vector<per_replica<tensor>> columns) {
  std::vector<reduce_pair> pairs;
  pairs.reserve(columns.size());
  for (auto& column : columns) {
    destinations where{column};
    pairs.push_back({std::move(column), std::move(where)});
  }
  return s.extended().batch_reduce_to(op, pairs);
}

/// True when `ctx`'s all_reduce runs on the replica threads: a
/// slice_all_reduce strategy, called by the replica itself (elsewhere,
/// merge_call raises TF's context errors).
bool on_replica_threads(replica_context& ctx) {
  const auto* mode = detail::current_mode();
  return ctx.state().collectives.communicator && mode != nullptr && mode->replica == &ctx;
}

/// On the merge_call path the strategy's cross_device_ops reduce with their
/// own settings, so options that only the replicas' own collectives honour
/// are refused, not ignored.
void refuse_merge_path_options(const replica_context& ctx, const communication_options& options) {
  if (!options.bytes_per_pack && !options.timeout && options.tag.empty()
      && options.algorithm.empty())
    return;
  auto& state = ctx.state();
  throw value_error("all_reduce: communication_options (bytes_per_pack, timeout, tag, algorithm) apply "
                    "where the replicas reduce among themselves (slice_all_reduce); "
                    + state.name() + " reduces with " + state.ops->name()
                    + " through merge_call, which cannot honour them");
}

/// communication_options::algorithm's algorithm (unset when empty);
/// value_error for a name that is no all-reduce algorithm.
std::optional<detail::algorithm> requested_algorithm(const std::string& name) {
  if (name.empty())
    return std::nullopt;
  const auto a = detail::algorithm_named(name);
  if (!a || !detail::runs(detail::collective_kind::all_reduce, *a))
    throw value_error("all_reduce: communication_options::algorithm '" + name
                      + "' is no all-reduce algorithm (ring, recursive_doubling, "
                        "halving_doubling; empty for lockstep's choice)");
  return a;
}

} // namespace

namespace detail {

void throw_merge_argument_mismatch(std::size_t replica, const std::type_info& expected) {
  throw type_error("merge_call: replica " + std::to_string(replica)
                   + " passed arguments of a different type than replica 0 ("
                   + expected.name() + ")");
}

} // namespace detail

strategy replica_context::strategy() const {
  return detail::strategy_handle(*state_);
}

std::size_t replica_context::num_replicas_in_sync() const noexcept {
  return detail::public_state(*state_).extended.num_replicas_in_sync();
}

std::size_t replica_context::replica_id_in_sync_group() const {
  detail::require_replica_context(*this);
  return state_->topology.global_replica_id(replica_id_); // replica_id_ is this worker's
}

std::vector<device_spec> replica_context::devices() const {
  detail::require_replica_context(*this);
  if (replica_id_ < state_->devices.size())
    return {state_->devices[replica_id_]};
  return {current_device()}; // the default strategy runs where it is called
}

std::vector<tensor> replica_context::all_reduce_on_replicas(reduce_op op,
                                                            const std::vector<tensor>& values,
                                                            const communication_options& options,
                                                            const std::string& structure,
                                                            std::vector<tensor>* owned) {
  detail::require_replica_context(*this);
  const auto& device = state_->devices[replica_id_];
  bool all_in_place = owned != nullptr;
  for (const auto& v : values) {
    if (v.device() != device)
      throw value_error("all_reduce: " + detail::describe_replica(*state_, replica_id_)
                        + " passed a tensor on " + v.device().to_string()
                        + "; a replica reduces tensors on its own device");
    all_in_place = all_in_place && v.buffer_use_count() == 1;
  }
  // Every element is written by the collective, so a fresh result needs
  // no zeros, and a buffer nobody else sees can take its own result.
  std::vector<tensor> results;
  if (!all_in_place) {
    results.reserve(values.size());
    for (const auto& v : values)
      results.push_back(owned != nullptr && v.buffer_use_count() == 1
                            ? v
                            : tensor::uninitialized(v.dtype(), v.shape(), device));
  }
  auto& outputs = all_in_place ? *owned : results;
  const auto& collectives = state_->collectives;
  // The structure of a nest goes into the tag, so replicas that pass
  // different structures get a value_error, as regroup raises on the
  // merge_call path.
  const detail::collective_options collective{
    .timeout = options.timeout
                 ? detail::checked_timeout(*options.timeout, "communication_options")
                 : channel_->collective_timeout(),
    .tag = structure.empty() ? options.tag : options.tag + " " + structure,
    .chunk_bytes = collectives.defaults.chunk_bytes,
    .epoch = channel_->collective_epoch(),
    .packing = options.bytes_per_pack
                 ? pack_options{.bytes_per_pack = *options.bytes_per_pack, .num_packs = 0}
                 : collectives.defaults.packing,
    .algorithm = requested_algorithm(options.algorithm)};
  const auto rank = state_->topology.global_replica_id(replica_id_);
  detail::timeline_scope span{
    detail::timeline_on() ? detail::timeline_track(detail::track_kind::replica, rank) : 0,
    "all_reduce", "collective"};
  if (span.active()) {
    span.args.op = to_string(op).data();
    span.args.dtype = values.empty() ? nullptr : to_string(values.front().dtype()).data();
    span.args.bytes = 0;
    for (const auto& v : values)
      span.args.bytes += static_cast<std::int64_t>(v.byte_size());
    // The session numbers this process's replicas: the local index.
    span.args.seq = static_cast<std::int64_t>(std::max(
      collectives.communicator->session().next_seq(replica_id_), channel_->collective_floor()));
    detail::timeline_args::copy(span.args.algorithm, state_->ops->name());
    detail::timeline_take_wait();
  }
  const auto started = span.active() ? detail::timeline_now() : 0;
  collectives.communicator->all_reduce(rank, op, values, outputs, collective,
                                       channel_->collective_floor());
  if (span.active()) {
    span.args.wait_ns = detail::timeline_take_wait();
    span.args.reduce_ns = detail::timeline_now() - started - span.args.wait_ns;
  }
  return std::move(outputs);
}

std::vector<tensor> replica_context::all_reduce(reduce_op op, const std::vector<tensor>& values,
                                                const communication_options& options) {
  detail::check_pod_reduce_op(*state_, op); // inside run: SUM and MEAN only on the pod
  if (on_replica_threads(*this))
    return all_reduce_on_replicas(op, values, options, {});
  refuse_merge_path_options(*this, options);
  return merge_call(
    [op](lockstep::strategy& s, const per_replica<std::vector<tensor>>& parts) {
      return reduce_columns(s, op, regroup(parts));
    },
    values);
}

tensor replica_context::all_reduce(reduce_op op, const tensor& value,
                                   const communication_options& options) {
  return all_reduce(op, std::vector<tensor>{value}, options).at(0);
}

std::vector<tensor> replica_context::all_reduce(reduce_op op, std::vector<tensor>&& values,
                                                const communication_options& options) {
  detail::check_pod_reduce_op(*state_, op);
  if (on_replica_threads(*this))
    return all_reduce_on_replicas(op, values, options, {}, &values);
  return all_reduce(op, std::as_const(values), options);
}

tensor replica_context::all_reduce(reduce_op op, tensor&& value,
                                   const communication_options& options) {
  std::vector<tensor> values;
  values.push_back(std::move(value));
  return all_reduce(op, std::move(values), options).at(0);
}

std::string replica_context::collective_flight_record() const {
  return detail::public_state(*state_).extended.collective_flight_record();
}

nest<tensor> replica_context::all_reduce(reduce_op op, const nest<tensor>& value,
                                         const communication_options& options) {
  detail::check_pod_reduce_op(*state_, op);
  if (on_replica_threads(*this))
    return value.pack(all_reduce_on_replicas(op, value.flatten(), options,
                                             "structure " + value.structure_string()));
  refuse_merge_path_options(*this, options);
  return merge_call(
    [op](lockstep::strategy& s, const per_replica<nest<tensor>>& parts) {
      auto grouped = regroup(parts); // value_error if structures differ
      auto reduced = reduce_columns(s, op, grouped.flatten());
      std::vector<nest<tensor>> out;
      for (std::size_t r = 0; r < parts.size(); ++r)
        out.push_back(parts.primary().pack(select_replica(r, reduced)));
      return per_replica<nest<tensor>>{std::move(out)};
    },
    value);
}

} // namespace lockstep
