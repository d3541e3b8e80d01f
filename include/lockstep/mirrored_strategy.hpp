#pragma once

#include "lockstep/cross_device_ops.hpp"
#include "lockstep/device_spec.hpp"
#include "lockstep/strategy.hpp"

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

namespace lockstep {

/// Settings of a mirrored strategy.
struct mirrored_options {
  /// The reduction algorithm; unset: `choose_the_best(devices)`.
  std::shared_ptr<lockstep::cross_device_ops> cross_device_ops;
  /// Default deadline of `run`; unset: runtime_options' timeout.
  std::optional<std::chrono::milliseconds> timeout;
};

/// The most replicas (devices) one mirrored strategy can run: its
/// collectives count the replicas and the calling thread in 12 bits.
inline constexpr std::size_t max_mirrored_replicas = 4095;

/// TF's MirroredStrategy: one replica per local device, each a replica actor
/// on its own thread, created once and reused by every `run`. Devices are
/// TF device strings; on a machine without GPUs, `/cpu:0` ... `/cpu:N-1`
/// (`cpu_devices(N)`) are N virtual CPU devices, each with its own memory.
class mirrored_strategy : public strategy {
public:
  /// `devices` empty: all GPUs when built with CUDA and one is present, else
  /// `/cpu:0`. Duplicates (after canonicalisation), remote devices and
  /// malformed strings throw value_error with TF's text.
  explicit mirrored_strategy(std::vector<device_spec> devices = {},
                             mirrored_options options = {});
};

} // namespace lockstep
