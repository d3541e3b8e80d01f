#pragma once

// Distributed input (TF's input_lib): a dataset of global batches, or of
// per-replica batches from an input function, iterated as steps whose leaves
// are per_replica<tensor>, one component on each replica's device.
// A step is `regroup_t<T>` for an element type T: `per_replica<tensor>` for
// tensor elements and `nest<per_replica<tensor>>` for nest elements, the
// type `regroup` gives for values returned by `run`, so `strategy::run`
// passes replica r its own `tensor` or `nest<tensor>` through
// `select_replica`. Strategies make these (strategy.hpp declares
// experimental_distribute_dataset and friends); a program that calls them
// includes this header, which brings the dataset pipeline (dataset.hpp).

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

// -- iteration -------------------------------------------------------------------

/// One pass over a distributed dataset (TF's DistributedIterator). Each step
/// is `regroup_t<T>`: per_replica<tensor> for tensor elements,
/// nest<per_replica<tensor>> for nests, with replica r's batch on replica
/// r's device; pass it to `strategy::run` and replica r receives its batch.
/// Every replica sees the same number of steps: a replica that has no data
/// left in the last step gets an empty batch (dimension 0 of size 0).
///
/// An input actor makes the steps ahead of the consumer, at most
/// `input_options::prefetch_depth` of them, already copied to the devices.
/// Move-only; `next()` and range-for consume the same steps. Not for use
/// from several threads at once.
template <distributable T>
class distributed_iterator {
public:
  /// The type of one step.
  using element_type = regroup_t<T>;

  /// The next step, or an empty optional at the end of the data (and on
  /// every call after it). Exceptions from the pipeline propagate, as does
  /// timeout_error when no step arrives within the timeout. With several
  /// workers, every step read (here or by range-for) is a decision of all
  /// of them (each worker must read as many as the others): the data ends
  /// when it has ended on every worker, and until then a worker whose own
  /// input ended gets steps of empty batches shaped like its last one.
  std::optional<element_type> next() { return steps_.next(); }

  /// Reads the next step and points at it, for range-for.
  auto begin() { return steps_.begin(); }

  /// The end of the data, for range-for.
  std::default_sentinel_t end() const noexcept { return {}; }

  /// How many steps are already on the devices, made ahead and not yet
  /// returned (at most the prefetch depth).
  std::size_t prefetched() const { return channel_->ready(); }

  /// How many steps the input actor has made in all.
  std::uint64_t produced() const { return channel_->produced(); }

private:
  friend class distributed_dataset<T>;

  /// A pass whose steps `channel` delivers, ended by all workers together
  /// through `agree` (empty in one process); made by distributed_dataset.
  distributed_iterator(std::shared_ptr<detail::prefetch_channel> channel, detail::worker_sum agree,
                       input_context worker)
    : channel_(channel), steps_(steps_of(std::move(channel), std::move(agree), worker)) {}

  static std::unique_ptr<detail::source<element_type>>
  steps_of(std::shared_ptr<detail::prefetch_channel> channel, detail::worker_sum agree,
           input_context worker) {
    auto steps = std::make_unique<detail::channel_source<element_type>>(std::move(channel));
    if (!agree)
      return steps;
    return std::make_unique<detail::steps_of_every_worker<element_type>>(std::move(steps),
                                                                        std::move(agree), worker);
  }

  std::shared_ptr<detail::prefetch_channel> channel_;
  dataset_iterator<element_type> steps_;
};

// -- distributed dataset -----------------------------------------------------------

/// TF's DistributedDataset: a dataset whose steps feed every replica of a
/// strategy. Made by `strategy::experimental_distribute_dataset` (elements
/// are global batches, each split into one per-replica batch per replica)
/// or `experimental_distribute_datasets_from_function` (elements are
/// per-replica batches, handed to the replicas in turn). A cheap handle:
/// each iteration opens a fresh pass of the underlying dataset.
template <distributable T>
class distributed_dataset {
public:
  /// The type of one step.
  using element_type = regroup_t<T>;

  /// How elements become steps.
  enum class mode {
    /// Each element is a global batch, split along dimension 0.
    split_global_batches,
    /// Consecutive elements go to replica 0, 1, ..., n-1: one step.
    per_replica_batches,
  };

  /// `devices`: this worker's replicas' devices, in replica order (at
  /// least one); `worker`: which of the workers' pipelines this is (with
  /// several, split_global_batches gives this worker its replicas' shares
  /// of every global batch in TF's order: detail::replica_rows).
  distributed_dataset(dataset<T> data, mode how, std::vector<device_spec> devices,
                      input_options options, input_context worker = {})
    : data_(std::move(data)), mode_(how), devices_(std::move(devices)), options_(options),
      worker_(worker) {
    if (devices_.empty())
      throw value_error("Should have at least one worker for input iterator.");
    detail::check_input_options(options_);
  }

  /// A fresh pass; reshuffling stages count it as their next iteration.
  distributed_iterator<T> make_iterator() const { return open(data_.make_iterator()); }

  /// A fresh pass with every reshuffle ordered by (seed, `epoch`), as
  /// `dataset::make_iterator(epoch)`.
  distributed_iterator<T> make_iterator(std::uint64_t epoch) const {
    return open(data_.make_iterator(epoch));
  }

  /// A fresh pass for range-for, as `make_iterator()`.
  auto begin() const { return make_iterator().begin(); }

  /// The end of the data, for range-for.
  std::default_sentinel_t end() const noexcept { return {}; }

  /// The replicas' devices, in replica order.
  const std::vector<device_spec>& devices() const noexcept { return devices_; }

  /// The number of replicas each step feeds, on every worker.
  std::size_t num_replicas_in_sync() const noexcept {
    return devices_.size() * worker_.num_input_pipelines();
  }

  /// The settings of its iterators.
  const input_options& options() const noexcept { return options_; }

private:
  friend class strategy; // sets agree_ for multi-worker strategies

  distributed_iterator<T> open(dataset_iterator<T> pass) const {
    auto input = std::make_shared<dataset_iterator<T>>(std::move(pass));
    auto produce = [input, how = mode_, devices = devices_,
                    worker = worker_]() -> std::shared_ptr<void> {
      if (how == mode::split_global_batches) {
        auto batch = input->next();
        if (!batch)
          return nullptr;
        return std::make_shared<element_type>(detail::split_step(*batch, devices, worker));
      }
      std::vector<T> elements;
      elements.reserve(devices.size());
      while (elements.size() < devices.size()) {
        auto x = input->next();
        if (!x)
          break;
        elements.push_back(std::move(*x));
      }
      if (elements.empty())
        return nullptr;
      return std::make_shared<element_type>(detail::gather_step(elements, devices));
    };
    return distributed_iterator<T>{std::make_shared<detail::prefetch_channel>(
                                     options_.prefetch_depth, options_.timeout, std::move(produce)),
                                   agree_, worker_};
  }

  dataset<T> data_;
  mode mode_;
  std::vector<device_spec> devices_;
  input_options options_;
  input_context worker_;
  detail::worker_sum agree_; // the workers' joint end of input; empty in one process
};

} // namespace lockstep
