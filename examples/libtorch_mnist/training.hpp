#pragma once

// The main job (examples/train_fashion_mnist) with a libtorch model: each
// replica of a lockstep strategy holds its own libtorch copy of the MLP
// and its own torch::optim::Adam; every step, each replica computes the
// gradients of its share of the global batch with libtorch's autograd,
// the replicas sum them through lockstep's all_reduce, handing libtorch's
// gradient buffers to lockstep by DLPack (at::toDLPack ->
// lockstep::tensor::from_dlpack) so that they are reduced in place, and
// every replica applies the same sum. The strategy is whatever the caller
// made: a mirrored_strategy (replicas in one process) or a
// multi_worker_mirrored_strategy (replicas across workers).

#include "mlp_module.hpp"

#include "lockstep/idx.hpp"
#include "lockstep/replica_context.hpp"
#include "lockstep/strategy.hpp"
#include "lockstep/tensor.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace libtorch_mnist {

/// The run's settings; the defaults are the main job's (docs/training.md).
struct training_config {
  /// Layer widths, input first.
  std::vector<std::int64_t> layers{784, 256, 128, 100, 10};
  /// Replicas of this process: the strategy's local devices.
  int replicas = 1;
  int epochs = 15;
  /// Examples per step across every replica of every worker; each replica
  /// takes global_batch / replicas in sync of them (it must divide).
  std::int64_t global_batch = 128;
  /// Adam's learning rate at epoch 0; epoch e's is learning_rate * lr_decay^e.
  double learning_rate = 1e-3;
  double lr_decay = 0.85;
  double epsilon = 1e-7;
  /// Seed of the initial weights and of each epoch's shuffle.
  std::uint64_t seed = 42;
  /// Stops after this many steps in all (a test's short run); 0: no limit.
  std::int64_t max_steps = 0;
};

/// The data as libtorch tensors: views of lockstep's tensors (from
/// lockstep::load_mnist) through DLPack, without a copy. They must not be
/// written (lockstep::tensor::to_dlpack's rule), and training only reads
/// them.
struct training_data {
  torch::Tensor train_images; // float32 [n, inputs]
  torch::Tensor train_labels; // int64 [n]
  torch::Tensor test_images;
  torch::Tensor test_labels;
};

/// Views of `dataset`'s four tensors (lockstep::tensor::to_dlpack ->
/// at::fromDLPack); each keeps its lockstep buffer alive.
training_data to_torch(const lockstep::mnist_dataset& dataset);

/// One epoch's figures, over every replica of every worker.
struct epoch_figures {
  int epoch = 0; // from 1
  double train_loss = 0;
  double train_accuracy = 0;
  double test_accuracy = 0;
  double seconds = 0;
  std::int64_t steps = 0;
};

struct training_result {
  std::vector<epoch_figures> epochs;
  /// The trained parameters of this process's first replica, in the
  /// module's order (every replica holds the same values).
  std::vector<torch::Tensor> weights;
  std::int64_t global_step = 0;
  /// True when every all_reduce wrote its sums into libtorch's own
  /// gradient buffers; false when some result came back in a buffer of
  /// lockstep's and was copied into the gradient.
  bool gradients_in_place = true;
};

/// Sums every replica's gradients of `model`'s parameters, and `stats`,
/// with one lockstep all_reduce: each gradient goes to lockstep by DLPack
/// without a copy, and lockstep writes the sum into it (the in-place
/// all_reduce: lockstep holds the only handle to the buffer). A gradient
/// that lockstep could not wrap (strided, or misaligned: from_dlpack copies
/// those) gets its sum copied back, and the call returns false; true when
/// every sum landed in place. `stats` becomes its sum. Call on a replica's
/// thread, after backward().
bool all_reduce_gradients(lockstep::replica_context& ctx, torch::nn::Module& model,
                          lockstep::tensor& stats);

/// Trains under `strategy`, whose local replicas are `config.replicas`
/// CPU devices, and calls `on_epoch` after each epoch. An epoch is the
/// training set's full global batches in an order shuffled by (seed,
/// epoch); its last partial batch is left out. One strategy run per epoch:
/// each replica loops over the epoch's steps on its own thread.
///
/// lockstep::value_error, before any training, for data the model cannot
/// take (images whose width is not the model's input, labels outside its
/// classes, images and labels of different counts), a global batch that
/// the replicas in sync do not divide or larger than the training set, a
/// replica count other than the strategy's local one, or non-positive
/// epochs. Sets libtorch's intra-op threads to 1 (process-wide): the
/// replicas are the parallelism.
training_result train(const lockstep::strategy& strategy, const training_config& config,
                      const training_data& data,
                      const std::function<void(const epoch_figures&)>& on_epoch = {});

} // namespace libtorch_mnist
