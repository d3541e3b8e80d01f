#include "split_model.hpp"

#include "lockstep/lockstep.hpp"

namespace fashion_mnist {

using namespace lockstep;

std::size_t pod_logical_core(std::size_t parameter) { return parameter < 2 ? 0 : 1; }

batch_gradients pod_split_gradients(const mlp_spec& spec, std::int64_t global_batch,
                                    replica_context& ctx, const std::vector<tensor>& parameters,
                                    const tensor& images, const tensor& labels) {
  if (spec.num_layers() < 2 || parameters.size() != 2 * spec.num_layers())
    throw value_error("pod_split_gradients: a model of at least 2 layers and its "
                      + std::to_string(2 * spec.num_layers()) + " parameters, got "
                      + std::to_string(spec.num_layers()) + " layers and "
                      + std::to_string(parameters.size()) + " parameters");
  // Layer 1 on core 0.
  const auto hidden = hidden_layer(parameters[0], parameters[1], images);
  const mlp_spec rest{{spec.layers.begin() + 1, spec.layers.end()}};
  const std::vector<tensor> rest_parameters(parameters.begin() + 2, parameters.end());
  // The later layers and the loss on core 1; the hidden activations go
  // there, their gradient comes back.
  auto later = ctx.experimental_logical_device(1, [&] {
    return loss_and_gradients(rest, rest_parameters, hidden.to(current_device()),
                              labels.to(current_device()), global_batch, true);
  });
  auto first = hidden_layer_gradients(images, hidden, later.input_gradient.to(current_device()));
  batch_gradients out;
  out.loss = later.loss;
  out.correct = later.correct;
  out.gradients = std::move(first);
  for (const auto& g : later.gradients)
    out.gradients.push_back(g.to(current_device()));
  return out;
}

lockstep::strategy make_pod_strategy(std::size_t steps_per_run) {
  auto topology = pod_topology::from_devices(cpu_devices(4));
  auto assignment = device_assignment::build(topology, {1, 1, 1, 2}, {}, pod_replicas);
  return pod_strategy{std::move(topology), std::move(assignment),
                      {.steps_per_run = steps_per_run}};
}

training_config with_pod_placement(training_config config) {
  config.replicas = pod_replicas;
  const auto spec = config.model;
  const auto global_batch = config.global_batch;
  config.placement.make_strategy = [](const training_config& c) {
    return make_pod_strategy(static_cast<std::size_t>(c.steps_per_call));
  };
  config.placement.logical_core = pod_logical_core;
  config.placement.gradients = [spec, global_batch](replica_context& ctx,
                                                    const std::vector<tensor>& parameters,
                                                    const tensor& images, const tensor& labels) {
    return pod_split_gradients(spec, global_batch, ctx, parameters, images, labels);
  };
  config.placement.static_batches = true;
  return config;
}

} // namespace fashion_mnist
