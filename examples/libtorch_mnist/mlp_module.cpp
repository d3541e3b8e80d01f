#include "mlp_module.hpp"

#include <string>

namespace libtorch_mnist {

mlp_module_impl::mlp_module_impl(const std::vector<std::int64_t>& layers) {
  for (std::size_t l = 0; l + 1 < layers.size(); ++l)
    dense_.push_back(register_module("dense_" + std::to_string(l + 1),
                                     torch::nn::Linear(layers[l], layers[l + 1])));
}

torch::Tensor mlp_module_impl::forward(torch::Tensor images) {
  for (std::size_t l = 0; l < dense_.size(); ++l) {
    images = dense_[l]->forward(images);
    if (l + 1 < dense_.size())
      images = torch::relu(images);
  }
  return images;
}

mlp_module initial_model(const std::vector<std::int64_t>& layers, std::uint64_t seed) {
  torch::manual_seed(seed);
  mlp_module model{layers};
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    if (item.key().ends_with("weight"))
      torch::nn::init::xavier_uniform_(item.value());
    else
      item.value().zero_();
  }
  return model;
}

void copy_parameters(const mlp_module& from, mlp_module& to) {
  torch::NoGradGuard no_grad;
  const auto source = from->parameters();
  auto target = to->parameters();
  for (std::size_t i = 0; i < target.size(); ++i)
    target[i].copy_(source[i]);
}

} // namespace libtorch_mnist
