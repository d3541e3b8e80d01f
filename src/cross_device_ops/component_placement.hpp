#pragma once

// Where a per-replica value's components lie relative to its destinations,
// for the algorithms that run one rank (or one group member) per device.

#include "lockstep/device_spec.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/values.hpp"

#include <cstddef>
#include <set>
#include <vector>

namespace lockstep::detail {

/// True when component r lies on destination r, each on its own device, and
/// there are at least two.
inline bool one_component_per_destination(const per_replica<tensor>& value,
                                          const std::vector<device_spec>& devices) {
  if (value.size() != devices.size() || devices.size() < 2)
    return false;
  for (std::size_t r = 0; r < devices.size(); ++r)
    if (value[r].device() != devices[r])
      return false;
  return std::set<device_spec>(devices.begin(), devices.end()).size() == devices.size();
}

} // namespace lockstep::detail
