#pragma once

// The model of the training example: a multilayer perceptron with ReLU
// hidden layers and a softmax cross-entropy loss, forward and backward in
// Eigen. Parameters are plain tensors, so the same code runs on a replica's
// copies of mirrored variables and, in bench/training, on plain buffers with
// no strategy at all.

#include "lockstep/tensor.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace fashion_mnist {

/// Layer widths, input first: {784, 256, 128, 100, 10} is 784 inputs, three
/// hidden layers and 10 classes.
struct mlp_spec {
  std::vector<std::int64_t> layers{784, 256, 128, 100, 10};

  std::size_t num_layers() const noexcept { return layers.size() - 1; }
  std::int64_t inputs() const noexcept { return layers.front(); }
  std::int64_t classes() const noexcept { return layers.back(); }
};

/// "dense_<l>/kernel" and "dense_<l>/bias" for each layer l (from 1), in the
/// order of initial_parameters.
std::vector<std::string> parameter_names(const mlp_spec& spec);

/// Kernels [in, out] drawn uniformly from Glorot's range
/// +-sqrt(6 / (in + out)) by a generator seeded with `seed`, biases zero;
/// kernel then bias for each layer. The same seed gives the same bits.
std::vector<lockstep::tensor> initial_parameters(const mlp_spec& spec, std::uint64_t seed);

/// The loss and gradients of one replica's batch.
struct batch_gradients {
  /// The summed cross-entropy of the batch divided by `global_batch`.
  double loss = 0;
  /// Examples whose largest logit is their label.
  std::int64_t correct = 0;
  /// d loss / d parameter, in the order of the parameters, on the current
  /// device.
  std::vector<lockstep::tensor> gradients;
  /// d loss / d images, float32 [b, inputs]: only when asked for (a later
  /// stage of a model split over several devices hands it back to the
  /// earlier one); empty otherwise.
  lockstep::tensor input_gradient;
};

/// Forward and backward pass over `images` (float32 [b, inputs]) with
/// `labels` (int64 [b], each in [0, classes)). The loss is summed over the
/// batch and divided by `global_batch` (TF's rule for a replica's share of a
/// global batch), so summing the replicas' gradients gives the gradient of
/// the global batch's mean loss. A batch of 0 examples gives zero gradients.
/// value_error for shapes, dtypes or labels that do not fit the model.
batch_gradients loss_and_gradients(const mlp_spec& spec,
                                   const std::vector<lockstep::tensor>& parameters,
                                   const lockstep::tensor& images, const lockstep::tensor& labels,
                                   std::int64_t global_batch, bool input_gradient = false);

/// The first stage of a split MLP: relu(images kernel + bias), float32
/// [b, out], for a kernel [inputs, out] and a bias [out]. value_error for
/// shapes or dtypes that do not fit.
lockstep::tensor hidden_layer(const lockstep::tensor& kernel, const lockstep::tensor& bias,
                              const lockstep::tensor& images);

/// That stage's backward pass: the gradients of its kernel and bias, given
/// its input `images`, its output `hidden` and d loss / d hidden
/// (`hidden_gradient`, as loss_and_gradients' input_gradient gives it).
/// The same numbers as loss_and_gradients computes for the unsplit model.
std::vector<lockstep::tensor> hidden_layer_gradients(const lockstep::tensor& images,
                                                     const lockstep::tensor& hidden,
                                                     const lockstep::tensor& hidden_gradient);

/// How many of `images` the model classifies as their `labels`, in batches
/// of `batch` examples.
std::int64_t count_correct(const mlp_spec& spec, const std::vector<lockstep::tensor>& parameters,
                           const lockstep::tensor& images, const lockstep::tensor& labels,
                           std::int64_t batch = 1000);

} // namespace fashion_mnist
