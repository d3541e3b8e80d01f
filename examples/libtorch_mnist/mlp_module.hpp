#pragma once

// The main job's model (examples/train_fashion_mnist: 784-256-128-100-10,
// ReLU hidden layers, softmax cross-entropy) as a libtorch module, so that
// libtorch's autograd computes its gradients.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace libtorch_mnist {

/// A multilayer perceptron: one torch::nn::Linear per pair of adjacent
/// widths in `layers` (input first), ReLU between them, logits out.
class mlp_module_impl : public torch::nn::Module {
public:
  explicit mlp_module_impl(const std::vector<std::int64_t>& layers);

  /// Logits [b, classes] of images [b, inputs].
  torch::Tensor forward(torch::Tensor images);

private:
  std::vector<torch::nn::Linear> dense_;
};
/// The module holder (a shared pointer to mlp_module_impl), as TORCH_MODULE makes.
TORCH_MODULE_IMPL(mlp_module, mlp_module_impl);

/// A model with the main job's starting point: kernels drawn uniformly from
/// Glorot's range by libtorch's generator seeded with `seed`, biases zero.
/// Call it on one thread (libtorch's default generator is global); give
/// the other replicas copies of the result (copy_parameters).
mlp_module initial_model(const std::vector<std::int64_t>& layers, std::uint64_t seed);

/// Sets every parameter of `to` to the value of `from`'s (models of the
/// same layers).
void copy_parameters(const mlp_module& from, mlp_module& to);

} // namespace libtorch_mnist
