#pragma once

// What a strategy's input methods take and tell: TF's InputContext,
// ValueContext, InputOptions and InputReplicationMode, and the names of the
// distributed input types. The types themselves, with the dataset pipeline
// they need, are in distributed_dataset.hpp: strategy.hpp includes only
// this header, so a program that distributes input includes
// "lockstep/distributed_dataset.hpp" (or "lockstep/lockstep.hpp").

#include "lockstep/detail/worker_sum.hpp"
#include "lockstep/nest.hpp"
#include "lockstep/tensor.hpp"

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <string>

namespace lockstep {

// -- contexts and options ------------------------------------------------------

/// TF's InputReplicationMode. Only `per_worker` is supported (as in TF's
/// strategies): one input pipeline per worker, feeding all its replicas.
enum class input_replication_mode { per_worker, per_replica };

/// "input_replication_mode::per_worker".
std::string to_string(input_replication_mode mode);

/// TF's InputContext: what an input function is told about the pipeline it
/// builds. One worker here: one pipeline, with id 0.
class input_context {
public:
  input_context(std::size_t num_input_pipelines = 1, std::size_t input_pipeline_id = 0,
                std::size_t num_replicas_in_sync = 1) noexcept
    : num_input_pipelines_(num_input_pipelines),
      input_pipeline_id_(input_pipeline_id),
      num_replicas_in_sync_(num_replicas_in_sync) {}

  /// How many input pipelines feed the replicas.
  std::size_t num_input_pipelines() const noexcept { return num_input_pipelines_; }

  /// This pipeline's index in [0, num_input_pipelines()).
  std::size_t input_pipeline_id() const noexcept { return input_pipeline_id_; }

  /// The number of replicas the steps feed.
  std::size_t num_replicas_in_sync() const noexcept { return num_replicas_in_sync_; }

  /// `global_batch_size / num_replicas_in_sync()`. Throws value_error with
  /// TF's message unless it divides evenly.
  std::int64_t get_per_replica_batch_size(std::int64_t global_batch_size) const;

private:
  std::size_t num_input_pipelines_;
  std::size_t input_pipeline_id_;
  std::size_t num_replicas_in_sync_;
};

/// TF's ValueContext: which replica an
/// `experimental_distribute_values_from_function` call makes a value for.
class value_context {
public:
  value_context(std::size_t replica_id_in_sync_group = 0,
                std::size_t num_replicas_in_sync = 1) noexcept
    : replica_id_in_sync_group_(replica_id_in_sync_group),
      num_replicas_in_sync_(num_replicas_in_sync) {}

  std::size_t replica_id_in_sync_group() const noexcept { return replica_id_in_sync_group_; }

  std::size_t num_replicas_in_sync() const noexcept { return num_replicas_in_sync_; }

private:
  std::size_t replica_id_in_sync_group_;
  std::size_t num_replicas_in_sync_;
};

/// Settings of distributed input (TF's tf.distribute.InputOptions).
struct input_options {
  /// How many steps the input actor places on the replicas' devices ahead
  /// of the consumer (TF's per-device prefetch); at least 1.
  std::size_t prefetch_depth = 2;
  /// The longest wait of `next` for a step; unset: the runtime options'
  /// timeout.
  std::optional<std::chrono::milliseconds> timeout;
};

/// The element types that can be distributed: tensors and nests of tensors,
/// with the batch in dimension 0 of every leaf.
template <class T>
concept distributable = std::same_as<T, tensor> || std::same_as<T, nest<tensor>>;

// -- the input types, defined in dataset.hpp and distributed_dataset.hpp -------

template <class T>
class dataset;

template <distributable T>
class distributed_dataset;

template <distributable T>
class distributed_iterator;

namespace detail {

/// value_error "Input replication mode not supported: <mode>" unless per_worker.
void check_input_replication_mode(input_replication_mode mode);

/// value_error "Batch size <b> cannot be sharded evenly across replicas <n>"
/// when `batch_size` is known and not divisible by `replicas`.
void check_shardable(std::optional<std::int64_t> batch_size, std::size_t replicas);

/// True where `T` is a complete type: for the distributed input types, where
/// distributed_dataset.hpp is included.
template <class T>
concept complete_type = requires { sizeof(T); };

} // namespace detail

} // namespace lockstep
