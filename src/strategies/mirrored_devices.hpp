#pragma once

// What mirrored_strategy and multi_worker_mirrored_strategy share: the
// checks of a local device list and the start of one replica per device.

#include "strategies/public_state.hpp"

#include <string>
#include <vector>

namespace lockstep::detail {

/// `devices` canonicalised and checked with TF's rules (duplicates, local
/// or remote, at most max_mirrored_replicas); empty: all GPUs when built
/// with CUDA and one is present, else /cpu:0. value_error with TF's texts.
std::vector<device_spec> mirrored_devices(std::vector<device_spec> devices);

/// "/job:localhost/replica:0/task:0/device:CPU:0, ...".
std::string joined_device_names(const std::vector<device_spec>& devices);

/// Chooses the replicas' collectives from `state.ops` and starts one
/// replica actor per device. resource_error when a replica cannot start.
void start_replicas(strategy_state& state);

} // namespace lockstep::detail
