// choose_the_best: the one place that routes a device list to an algorithm.

#include "lockstep/cross_device_ops.hpp"

#include "lockstep/config.hpp"

#include "devices/device_registry.hpp"

#include <algorithm>
#include <set>

namespace lockstep {

std::shared_ptr<cross_device_ops> choose_the_best(const std::vector<device_spec>& devices) {
  // An empty list counts as all CPU.
  const bool all_cpu = std::all_of(devices.begin(), devices.end(),
                                   [](const device_spec& d) { return d.is_cpu(); });
  if (all_cpu)
    return std::make_shared<slice_all_reduce>();
  const auto* cuda = detail::cuda_kind_if_present();
  const bool all_cuda = cuda != nullptr
                        && std::all_of(devices.begin(), devices.end(), [&](const device_spec& d) {
                             return d.is_gpu() && &detail::kind_of(d) == cuda;
                           });
  if (!all_cuda)
    return std::make_shared<reduction_to_one_device>();
  // TF picks NCCL for GPUs; NCCL 2.28 refuses two ranks on one GPU, so
  // logical GPUs sharing one get lockstep's own kernel.
  std::set<int> physical;
  for (const auto& d : devices)
    physical.insert(detail::memory_domain(d.canonical()));
  if (LOCKSTEP_HAVE_NCCL && devices.size() >= 2 && physical.size() == devices.size())
    return std::make_shared<nccl_all_reduce>();
  return std::make_shared<on_device_all_reduce>();
}

} // namespace lockstep
