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

namespace {

void check_shape(const pod_shape& shape) {
  if (shape.devices_per_host < 2 || shape.devices_per_host % 2 != 0)
    throw value_error("pod: the devices per host must be even and at least 2 (replicas of "
                      + std::to_string(pod_cores_per_replica) + " logical cores), got "
                      + std::to_string(shape.devices_per_host));
}

} // namespace

lockstep::strategy make_pod_strategy(std::size_t steps_per_run, const pod_shape& shape) {
  check_shape(shape);
  const auto devices = cpu_devices(shape.devices_per_host);
  const auto replicas_per_host = devices.size() / pod_cores_per_replica;
  const mesh_coordinates computation_shape{1, 1, 1, static_cast<int>(pod_cores_per_replica)};
  const cluster_resolver resolver;
  if (resolver.spec().world_size > 1 && !resolver.spec().is_evaluator()) {
    const auto system = initialize_pod_system(resolver, devices);
    auto assignment = device_assignment::build(system.topology, computation_shape, {},
                                               system.num_hosts * replicas_per_host);
    pod_options options{.steps_per_run = steps_per_run};
    options.cluster.local_devices = devices;
    options.cluster.agreed_settings = shape.agreed_settings;
    return pod_strategy{resolver, std::move(assignment), std::move(options)};
  }
  auto topology = pod_topology::from_devices(devices);
  auto assignment = device_assignment::build(topology, computation_shape, {}, replicas_per_host);
  return pod_strategy{std::move(topology), std::move(assignment),
                      {.steps_per_run = steps_per_run}};
}

training_config with_pod_placement(training_config config, pod_shape shape) {
  check_shape(shape);
  config.replicas = shape.devices_per_host / static_cast<int>(pod_cores_per_replica);
  const auto spec = config.model;
  const auto global_batch = config.global_batch;
  config.placement.make_strategy = [shape = std::move(shape)](const training_config& c) {
    return make_pod_strategy(static_cast<std::size_t>(c.steps_per_call), shape);
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
