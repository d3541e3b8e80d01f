#pragma once

// The machinery behind lockstep/distributed_dataset.hpp (which rows each
// replica takes, splitting a global batch, gathering a step): implementation,
// not API. distributed_dataset.hpp includes it.

#include "lockstep/dataset.hpp"
#include "lockstep/device_spec.hpp"
#include "lockstep/error.hpp"
#include "lockstep/input_context.hpp"
#include "lockstep/nest.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/values.hpp"

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lockstep {

namespace detail {

/// Rows [begin, begin + count) of `x` as a new tensor on `device`; count 0
/// gives dimension 0 of size 0 with `x`'s other dimensions and dtype.
tensor copy_rows_to(const tensor& x, std::int64_t begin, std::int64_t count,
                    const device_spec& device);

/// Rows [begin, begin + count) of a global batch: one replica's share.
struct row_range {
  std::int64_t begin = 0;
  std::int64_t count = 0;
  friend bool operator==(const row_range&, const row_range&) = default;
};

/// The rows of a global batch of `rows` rows that local replica `local` of
/// `worker` takes, where `workers` workers run `local_replicas` replicas
/// each, in TF's order. One worker: the batch is cut into `local_replicas`
/// consecutive parts, as evenly as possible (the first parts one row
/// longer; TF's rebatch by batch_sizes_for_worker). Several workers: TF
/// rebatches the global batch into N = workers x local_replicas slices of
/// ceil(rows / N) rows (the last ones shorter or empty: legacy rebatch),
/// shards that stream of slices among the workers round-robin (auto-shard
/// by data) and each worker's replicas take its shard's slices in turn:
/// replica `local` of `worker` takes slice local x workers + worker. So
/// 4 rows over 2 workers x 2 replicas give worker 0 rows 0 and 2, worker 1
/// rows 1 and 3. value_error for a negative `rows`, no workers or replicas,
/// or `worker`/`local` out of range.
row_range replica_rows(std::int64_t rows, std::size_t workers, std::size_t local_replicas,
                       std::size_t worker, std::size_t local);

/// Splits `batch` along dimension 0 by `replica_rows`: element d is the
/// share of local replica d of `worker` (its pipeline of
/// worker.num_input_pipelines()), copied to devices[d]. value_error for a
/// scalar.
std::vector<tensor> split_batch(const tensor& batch, const std::vector<device_spec>& devices,
                                const input_context& worker);

/// value_error unless prefetch_depth >= 1 and a given timeout is positive.
void check_input_options(const input_options& options);

/// One step from one global batch: each leaf split by `split_batch`, this
/// worker (`worker`'s pipeline) taking its replicas' shares.
inline per_replica<tensor> split_step(const tensor& batch, const std::vector<device_spec>& devices,
                                      const input_context& worker) {
  return per_replica<tensor>{split_batch(batch, devices, worker)};
}

inline nest<per_replica<tensor>> split_step(const nest<tensor>& batch,
                                            const std::vector<device_spec>& devices,
                                            const input_context& worker) {
  std::vector<per_replica<tensor>> leaves;
  batch.visit_leaves(
    [&](const tensor& leaf) { leaves.push_back(split_step(leaf, devices, worker)); });
  return batch.pack(leaves);
}

/// One step from up to one element per device (element r for replica r,
/// copied to device r); replicas past the last element get an empty batch
/// shaped like element 0. Elements must share element 0's structure.
per_replica<tensor> gather_step(const std::vector<tensor>& elements,
                                const std::vector<device_spec>& devices);

nest<per_replica<tensor>> gather_step(const std::vector<nest<tensor>>& elements,
                                      const std::vector<device_spec>& devices);

/// The workers' joint decision on the next step of their input, so that
/// every worker takes the same number of steps: true while any worker has a
/// step. A worker whose input ended gives its replicas empty batches
/// (`can_stand_in`: it has a step to shape them like) until all have ended;
/// one that cannot is a value_error on every worker, naming it. A
/// `failure` (this worker's pipeline threw) is thrown on every worker.
bool any_worker_has_step(const worker_sum& sum, const input_context& worker, bool has_step,
                         bool can_stand_in, std::exception_ptr failure);

/// `step` with every batch emptied (dimension 0 of size 0, on the same
/// device), or nothing when a batch is a scalar.
std::optional<per_replica<tensor>> empty_step_like(const per_replica<tensor>& step);
std::optional<nest<per_replica<tensor>>> empty_step_like(const nest<per_replica<tensor>>& step);

/// The steps of `steps`, read by every worker together (any_worker_has_step):
/// they end when every worker's have, and until then this worker stands in
/// with empty batches like its last step.
template <class E>
class steps_of_every_worker final : public source<E> {
public:
  steps_of_every_worker(std::unique_ptr<source<E>> steps, worker_sum agree, input_context worker)
    : steps_(std::move(steps)), agree_(std::move(agree)), worker_(worker) {}

  std::optional<E> next() override {
    if (ended_)
      return std::nullopt;
    std::optional<E> step;
    std::exception_ptr failure;
    try {
      step = steps_->next();
    } catch (...) {
      failure = std::current_exception();
    }
    if (step)
      stand_in_ = empty_step_like(*step);
    if (!any_worker_has_step(agree_, worker_, step.has_value(), stand_in_.has_value(), failure)) {
      ended_ = true;
      return std::nullopt;
    }
    return step ? std::move(step) : stand_in_;
  }

private:
  std::unique_ptr<source<E>> steps_;
  worker_sum agree_;
  input_context worker_;
  std::optional<E> stand_in_; // empty batches like the last step
  bool ended_ = false;
};

/// A source whose elements come out of a prefetch channel.
template <class E>
class channel_source final : public source<E> {
public:
  explicit channel_source(std::shared_ptr<prefetch_channel> channel)
    : channel_(std::move(channel)) {}

  std::optional<E> next() override {
    auto x = channel_->next();
    if (!x)
      return std::nullopt;
    return std::move(*static_cast<E*>(x.get()));
  }

private:
  std::shared_ptr<prefetch_channel> channel_;
};

} // namespace detail

} // namespace lockstep
