#pragma once

// The main job's MLP split over the two logical cores of a pod replica:
// layer 1 (dense_1) on logical core 0, the replica's own core; layers 2 to
// 4 and the loss as a part on logical core 1. Used by pod_fashion_mnist and
// its test (tests/pod_fashion_mnist_test.cpp).

#include "trainer.hpp"

#include "lockstep/multi_worker_mirrored_strategy.hpp"
#include "lockstep/strategy.hpp"

#include <cstddef>
#include <vector>

namespace fashion_mnist {

/// Logical cores per replica.
inline constexpr std::size_t pod_cores_per_replica = 2;

/// The virtual pod: each host (this process, or each worker process of a
/// cluster a launcher configured) has `devices_per_host` virtual CPU
/// devices, cpu_devices(devices_per_host), and runs devices_per_host / 2
/// replicas of 2 logical cores.
struct pod_shape {
  /// Even, at least 2 (pod_fashion_mnist's --pod-devices).
  int devices_per_host = 4;
  /// For a pod of several hosts: the settings every host must share
  /// (multi_worker_options::agreed_settings), compared when the hosts join.
  std::vector<lockstep::agreed_setting> agreed_settings;
};

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

/// The pod of the example, `steps_per_run` steps per host loop, its
/// replicas of 2 logical cores placed by device_assignment::build(topology,
/// {1, 1, 1, 2}, {}, hosts · devices_per_host / 2). When a launcher
/// configured a cluster (world size above 1, not an evaluator), every
/// worker process is a host: the topology is initialize_pod_system(resolver,
/// cpu_devices(devices_per_host)).topology and the strategy
/// pod_strategy(resolver, assignment, options) with those local devices and
/// `shape.agreed_settings`, which joins the cluster. Alone, the pod is
/// pod_topology::from_devices(cpu_devices(devices_per_host)) of this
/// process. value_error for devices_per_host odd or below 2.
lockstep::strategy make_pod_strategy(std::size_t steps_per_run, const pod_shape& shape = {});

/// `config` with the split placement: the pod strategy of `shape`
/// (steps_per_run = config.steps_per_call), replicas = devices_per_host /
/// 2 (this host's, as the main job's replicas are each worker's), the
/// parameters on their cores, the split gradients, static batches (the host
/// loops require them). value_error as make_pod_strategy.
training_config with_pod_placement(training_config config, pod_shape shape = {});

} // namespace fashion_mnist
