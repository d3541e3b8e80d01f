#pragma once

// How the pod's errors print a mesh shape, coordinates, a computation's
// shape or stride: as lockstep prints a tensor's shape, "[2, 2, 1, 2]"
// (TF's messages print numpy's "[2 2 1 2]" and a tuple's "(3,)" there).

#include "lockstep/pod_topology.hpp"
#include "runtime/error_text.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::detail {

/// "[v0, v1, ...]", cut after 16 entries as shape_to_string cuts.
inline std::string mesh_text(const std::vector<std::int64_t>& values) {
  constexpr std::size_t shown = 2 * items_in_errors;
  std::vector<std::string> items;
  for (std::size_t i = 0; i < values.size() && i <= shown; ++i)
    items.push_back(std::to_string(values[i]));
  return "[" + joined_list(items, shown, values.size()) + "]";
}

inline std::string mesh_text(const mesh_coordinates& values) {
  return mesh_text(std::vector<std::int64_t>(values.begin(), values.end()));
}

} // namespace lockstep::detail
