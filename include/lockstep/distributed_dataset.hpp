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
#include "lockstep/detail/distributed_input.hpp"

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

  /// The static batch size of the dataset it reads (TF's static batch
  /// dimension of its output shapes, `dataset::static_batch_size()`):
  /// known when every batch is full; nullopt when a batch may be partial.
  std::optional<std::int64_t> static_batch_size() const noexcept { return static_batch_size_; }

private:
  friend class distributed_dataset<T>;

  /// A pass whose steps `channel` delivers, ended by all workers together
  /// through `agree` (empty in one process); made by distributed_dataset
  /// over a dataset of static batch size `static_batch_size`.
  distributed_iterator(std::shared_ptr<detail::prefetch_channel> channel, detail::worker_sum agree,
                       input_context worker, std::optional<std::int64_t> static_batch_size)
    : channel_(channel), steps_(steps_of(std::move(channel), std::move(agree), worker)),
      static_batch_size_(static_batch_size) {}

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
  std::optional<std::int64_t> static_batch_size_;
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
                                   agree_, worker_, data_.static_batch_size()};
  }

  dataset<T> data_;
  mode mode_;
  std::vector<device_spec> devices_;
  input_options options_;
  input_context worker_;
  detail::worker_sum agree_; // the workers' joint end of input; empty in one process
};

} // namespace lockstep
