#pragma once

// Helpers shared by the pod strategy's tests.

#include "lockstep/lockstep.hpp"

#include <vector>

/// 4 virtual CPU devices (mesh [2, 1, 1, 2]) as 2 replicas of 2 logical
/// cores: TF's ring puts replica 0 on chip (0, 0), devices 0 and 1, and
/// replica 1 on chip (1, 0), devices 2 and 3.
inline lockstep::pod_strategy two_by_two(lockstep::pod_options options = {}) {
  const auto topology = lockstep::pod_topology::from_devices(lockstep::cpu_devices(4));
  return lockstep::pod_strategy{
    topology, lockstep::device_assignment::build(topology, {1, 1, 1, 2}, {1, 1, 1, 1}, 2), options};
}

/// The canonical names of CPU devices `indices`.
inline std::vector<lockstep::device_spec> canonical_cpus(const std::vector<int>& indices) {
  std::vector<lockstep::device_spec> out;
  for (int i : indices)
    out.push_back(lockstep::cpu_device(i).canonical());
  return out;
}

/// A float32 tensor's elements.
inline std::vector<float> floats(const lockstep::tensor& t) {
  const auto d = t.data<float>();
  return {d.begin(), d.end()};
}
