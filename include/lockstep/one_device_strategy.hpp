#pragma once

#include "lockstep/device_spec.hpp"
#include "lockstep/strategy.hpp"

namespace lockstep {

/// TF's OneDeviceStrategy: one replica on `device`, run on the calling
/// thread; `reduce_to` and `broadcast_to` place values on that device.
class one_device_strategy : public strategy {
public:
  explicit one_device_strategy(const device_spec& device);
};

} // namespace lockstep
