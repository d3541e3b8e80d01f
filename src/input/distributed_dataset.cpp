// Distributed input: splitting global batches into per-replica batches,
// gathering per-replica batches into steps, and TF's checks and messages.
// The iteration itself (an input actor making steps ahead) is the
// prefetch_channel of actors/prefetch_channel.cpp.

#include "lockstep/distributed_dataset.hpp"

#include "devices/device_registry.hpp"

#include "lockstep/runtime_options.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace lockstep {

std::string to_string(input_replication_mode mode) {
  switch (mode) {
    case input_replication_mode::per_worker:
      return "input_replication_mode::per_worker";
    case input_replication_mode::per_replica:
      return "input_replication_mode::per_replica";
  }
  return "input_replication_mode(" + std::to_string(static_cast<int>(mode)) + ")";
}

std::int64_t input_context::get_per_replica_batch_size(std::int64_t global_batch_size) const {
  const auto n = static_cast<std::int64_t>(num_replicas_in_sync_);
  if (n == 0 || global_batch_size % n != 0)
    throw value_error("The `global_batch_size` " + std::to_string(global_batch_size)
                      + " is not divisible by `num_replicas_in_sync` "
                      + std::to_string(num_replicas_in_sync_) + " ");
  return global_batch_size / n;
}

} // namespace lockstep

namespace lockstep::detail {

tensor copy_rows_to(const tensor& x, std::int64_t begin, std::int64_t count,
                    const device_spec& device) {
  if (x.rank() == 0)
    throw value_error("cannot split a scalar " + x.to_string()
                      + " into per-replica batches: its dimension 0 is the batch");
  const auto rows = x.shape()[0];
  if (begin < 0 || count < 0 || begin + count > rows)
    throw value_error("rows [" + std::to_string(begin) + ", " + std::to_string(begin + count)
                      + ") out of range for a batch of " + std::to_string(rows));
  auto shape = x.shape();
  shape[0] = count;
  // Rows are cut on the host; a device the host cannot write (a GPU) gets
  // them copied over.
  const bool host_memory = detail::kind_of(device).host_accessible;
  auto out = tensor::uninitialized(x.dtype(), std::move(shape), host_memory ? device : cpu_device(0));
  const auto bytes = out.byte_size();
  if (bytes != 0) {
    const auto row_bytes = x.byte_size() / static_cast<std::size_t>(rows);
    std::memcpy(out.raw_data(),
                static_cast<const std::byte*>(x.raw_data())
                  + static_cast<std::size_t>(begin) * row_bytes,
                bytes);
  }
  return host_memory ? out : out.to(device);
}

row_range replica_rows(std::int64_t rows, std::size_t workers, std::size_t local_replicas,
                       std::size_t worker, std::size_t local) {
  if (rows < 0 || workers == 0 || local_replicas == 0 || worker >= workers
      || local >= local_replicas)
    throw value_error("replica_rows: no share of a batch of " + std::to_string(rows)
                      + " rows for replica " + std::to_string(local) + " of worker "
                      + std::to_string(worker) + " with " + std::to_string(workers)
                      + " workers of " + std::to_string(local_replicas) + " replicas");
  const auto r = static_cast<std::int64_t>(local);
  if (workers == 1) {
    // Consecutive parts, the first rows % n of them one row longer.
    const auto n = static_cast<std::int64_t>(local_replicas);
    const auto base = rows / n;
    const auto extra = rows % n;
    const auto start = [&](std::int64_t p) { return p * base + std::min(p, extra); };
    return {start(r), start(r + 1) - start(r)};
  }
  // Slices of ceil(rows / n) rows; this replica's is the shard's local-th
  // element, slice local * workers + worker of the rebatched stream.
  const auto n = static_cast<std::int64_t>(workers * local_replicas);
  const auto slice_rows = (rows + n - 1) / n;
  const auto slice = r * static_cast<std::int64_t>(workers) + static_cast<std::int64_t>(worker);
  const auto begin = std::min(slice * slice_rows, rows);
  return {begin, std::min(begin + slice_rows, rows) - begin};
}

std::vector<tensor> split_batch(const tensor& batch, const std::vector<device_spec>& devices,
                                const input_context& worker) {
  if (batch.rank() == 0)
    throw value_error("cannot split a scalar " + batch.to_string()
                      + " into per-replica batches: its dimension 0 is the batch");
  std::vector<tensor> out;
  out.reserve(devices.size());
  for (std::size_t d = 0; d < devices.size(); ++d) {
    const auto share = replica_rows(batch.shape()[0], worker.num_input_pipelines(),
                                    devices.size(), worker.input_pipeline_id(), d);
    out.push_back(copy_rows_to(batch, share.begin, share.count, devices[d]));
  }
  return out;
}

void check_shardable(std::optional<std::int64_t> batch_size, std::size_t replicas) {
  if (batch_size && replicas != 0 && *batch_size % static_cast<std::int64_t>(replicas) != 0)
    throw value_error("Batch size " + std::to_string(*batch_size)
                      + " cannot be sharded evenly across replicas "
                      + std::to_string(replicas));
}

void check_input_options(const input_options& options) {
  if (options.prefetch_depth == 0)
    throw value_error("input_options: prefetch_depth must be at least 1 (currently 0)");
  if (options.timeout
      && (options.timeout->count() <= 0 || *options.timeout > runtime_options::max_timeout))
    throw value_error("input_options: the timeout must be positive and at most "
                      + std::to_string(runtime_options::max_timeout.count())
                      + " ms (currently " + std::to_string(options.timeout->count()) + " ms)");
}

void check_input_replication_mode(input_replication_mode mode) {
  if (mode != input_replication_mode::per_worker)
    throw value_error("Input replication mode not supported: " + to_string(mode));
}

namespace {

/// Replica r's part of a step: element r on device r, or an empty batch
/// shaped like `first` when the data ran out before replica r.
tensor part_for(const std::vector<const tensor*>& column, const tensor& first,
                std::size_t replica, const device_spec& device) {
  if (replica < column.size())
    return column[replica]->to(device);
  if (first.rank() == 0)
    throw value_error("cannot give replica " + std::to_string(replica)
                      + " an empty batch like the scalar " + first.to_string()
                      + ": per-replica batches need a dimension 0");
  return copy_rows_to(first, 0, 0, device);
}

} // namespace

per_replica<tensor> gather_step(const std::vector<tensor>& elements,
                                const std::vector<device_spec>& devices) {
  std::vector<const tensor*> column;
  for (const auto& x : elements)
    column.push_back(&x);
  std::vector<tensor> parts;
  parts.reserve(devices.size());
  for (std::size_t r = 0; r < devices.size(); ++r)
    parts.push_back(part_for(column, elements.at(0), r, devices[r]));
  return per_replica<tensor>{std::move(parts)};
}

nest<per_replica<tensor>> gather_step(const std::vector<nest<tensor>>& elements,
                                      const std::vector<device_spec>& devices) {
  const auto& first = elements.at(0);
  std::vector<std::vector<tensor>> leaves;
  for (std::size_t i = 0; i < elements.size(); ++i) {
    if (!elements[i].same_structure(first))
      throw value_error("distributed input: per-replica batch " + std::to_string(i)
                        + " of a step has the structure " + elements[i].structure_string()
                        + " but batch 0 has " + first.structure_string());
    leaves.push_back(elements[i].flatten());
  }
  std::vector<per_replica<tensor>> grouped;
  for (std::size_t leaf = 0; leaf < leaves[0].size(); ++leaf) {
    std::vector<const tensor*> column;
    for (const auto& l : leaves)
      column.push_back(&l[leaf]);
    std::vector<tensor> parts;
    for (std::size_t r = 0; r < devices.size(); ++r)
      parts.push_back(part_for(column, leaves[0][leaf], r, devices[r]));
    grouped.emplace_back(std::move(parts));
  }
  return first.pack(grouped);
}

namespace {

/// Where a worker's input stands at a step, as it tells the others.
enum input_state : std::int64_t {
  ended_without_a_step = 1, // cannot give its replicas empty batches
  ended = 2,
  has_step = 3,
};

std::string workers_in(const std::vector<std::int64_t>& states, std::int64_t state) {
  std::string out;
  for (std::size_t w = 0; w < states.size(); ++w)
    if (states[w] == state)
      out += (out.empty() ? "" : ", ") + std::to_string(w);
  return out;
}

} // namespace

bool any_worker_has_step(const worker_sum& sum, const input_context& worker, bool has_step,
                         bool can_stand_in, std::exception_ptr failure) {
  // Each worker writes its own slot; the sum gives every worker all states.
  std::vector<std::int64_t> states(worker.num_input_pipelines(), 0);
  states.at(worker.input_pipeline_id())
    = has_step ? input_state::has_step : can_stand_in ? input_state::ended
                                                      : input_state::ended_without_a_step;
  sum(states, failure, "end of input");
  if (failure)
    std::rethrow_exception(failure);
  const auto with_data = workers_in(states, input_state::has_step);
  if (with_data.empty())
    return false;
  const auto stuck = workers_in(states, input_state::ended_without_a_step);
  if (!stuck.empty())
    throw value_error("distributed input: the data of worker(s) " + stuck
                      + " ended before a step whose batches could be emptied (none, or "
                        "scalars), while worker(s) "
                      + with_data
                      + " still have data: each worker's replicas need an empty batch like "
                        "their last one until every worker's data has ended");
  return true;
}

std::optional<per_replica<tensor>> empty_step_like(const per_replica<tensor>& step) {
  std::vector<tensor> parts;
  for (const auto& part : step.values()) {
    if (part.rank() == 0)
      return std::nullopt;
    parts.push_back(copy_rows_to(part, 0, 0, part.device()));
  }
  return per_replica<tensor>{std::move(parts)};
}

std::optional<nest<per_replica<tensor>>> empty_step_like(const nest<per_replica<tensor>>& step) {
  std::vector<per_replica<tensor>> leaves;
  bool emptied = true;
  step.visit_leaves([&](const per_replica<tensor>& leaf) {
    auto empty = emptied ? empty_step_like(leaf) : std::nullopt;
    emptied = empty.has_value();
    if (emptied)
      leaves.push_back(std::move(*empty));
  });
  if (!emptied)
    return std::nullopt;
  return step.pack(leaves);
}

} // namespace lockstep::detail
