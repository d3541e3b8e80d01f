#pragma once

// Which devices hierarchical_copy uses for a tensor: internal, so that tests
// can check the rotation, which results do not show.

#include <cstddef>

namespace lockstep::detail {

/// The roles of N >= 2 devices for tensor `index` of a batch: the devices
/// form the halves [0, half) and [half, N), half = floor(N/2); `main` is
/// device index mod N (TF's group_0_main_device) and `partner` the device in
/// the same position of the other half, modulo that half's size (TF's
/// (main + half) mod N when N is even).
struct hierarchical_copy_roles {
  std::size_t half;
  std::size_t main;
  std::size_t partner;
};

constexpr hierarchical_copy_roles hierarchical_roles(std::size_t index, std::size_t n) noexcept {
  const auto half = n / 2;
  const auto main = index % n;
  const auto partner = main < half ? half + main % (n - half) : (main - half) % half;
  return {half, main, partner};
}

} // namespace lockstep::detail
