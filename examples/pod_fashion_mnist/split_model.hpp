#pragma once

// The main job's MLP split over the two logical cores of a pod replica:
// layer 1 (dense_1) on logical core 0, the replica's own core; layers 2 to
// 4 and the loss as a part on logical core 1. Used by pod_fashion_mnist and
// its test (tests/pod_fashion_mnist_test.cpp).

#include "trainer.hpp"

#include "lockstep/strategy.hpp"

#include <cstddef>

namespace fashion_mnist {

/// Logical cores per replica, and the replicas of the virtual pod.
inline constexpr std::size_t pod_cores_per_replica = 2;
inline constexpr int pod_replicas = 2;

/// The logical core of parameter i (parameter_names' order): 0 for layer
/// 1's kernel and bias, 1 for the rest.
std::size_t pod_logical_core(std::size_t parameter);

/// One replica's loss and gradients with the model split as above: layer 1
/// forward on core 0, the later layers forward and backward with the loss
/// on core 1 (the hidden activations handed over, their gradient handed
/// back), layer 1 backward on core 0. The same numbers as
/// loss_and_gradients on one device; every gradient on the replica's
/// current device. value_error for a model of fewer than 2 layers.
batch_gradients pod_split_gradients(const mlp_spec& spec, std::int64_t global_batch,
                                    lockstep::replica_context& ctx,
                                    const std::vector<lockstep::tensor>& parameters,
                                    const lockstep::tensor& images,
                                    const lockstep::tensor& labels);

/// The pod of the example: cpu_devices(4) as a pod topology, 2 replicas of
/// 2 logical cores (device_assignment::build(topology, {1, 1, 1, 2}, {},
/// 2)), `steps_per_run` steps per host loop.
lockstep::strategy make_pod_strategy(std::size_t steps_per_run);

/// `config` with the split placement: the pod strategy (steps_per_run =
/// config.steps_per_call), the parameters on their cores, the split
/// gradients, static batches (the host loops require them).
training_config with_pod_placement(training_config config);

} // namespace fashion_mnist
