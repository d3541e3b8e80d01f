// choose_the_best: the one place that routes a device list to an algorithm.

#include "lockstep/cross_device_ops.hpp"

#include <algorithm>

namespace lockstep {

std::shared_ptr<cross_device_ops> choose_the_best(const std::vector<device_spec>& devices) {
  // TF picks NCCL when every device is a GPU and NCCL is available; there is
  // no NCCL backend yet, so any list with a GPU (or another accelerator)
  // reduces to one device. An empty list counts as all CPU.
  const bool all_cpu = std::all_of(devices.begin(), devices.end(),
                                   [](const device_spec& d) { return d.is_cpu(); });
  if (all_cpu)
    return std::make_shared<slice_all_reduce>();
  return std::make_shared<reduction_to_one_device>();
}

} // namespace lockstep
