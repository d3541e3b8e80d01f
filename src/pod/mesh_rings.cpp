#include "pod/mesh_rings.hpp"

#include <algorithm>

namespace lockstep::detail {

std::vector<chip_point> open_ring_2d(int x_size, int y_size, int z) {
  std::vector<chip_point> ring;
  for (int pair = 0; pair < y_size / 2; ++pair) {
    for (int x = 1; x < x_size; ++x)
      ring.push_back({x, 2 * pair, z});
    for (int x = x_size - 1; x > 0; --x)
      ring.push_back({x, 2 * pair + 1, z});
  }
  for (int y = y_size - 1; y > 0; --y)
    ring.push_back({0, y, z});
  return ring;
}

std::vector<chip_point> ring_3d(int x_size, int y_size, int z_size) {
  std::vector<chip_point> ring;
  // Lines: two sizes of 1.
  if (x_size == 1 && y_size == 1) {
    for (int z = 0; z < z_size; ++z)
      ring.push_back({0, 0, z});
    return ring;
  }
  if (x_size == 1 && z_size == 1) {
    for (int y = 0; y < y_size; ++y)
      ring.push_back({0, y, 0});
    return ring;
  }
  if (y_size == 1 && z_size == 1) {
    for (int x = 0; x < x_size; ++x)
      ring.push_back({x, 0, 0});
    return ring;
  }
  // An odd size above 1 has no ring: row-major, x fastest.
  const auto odd = [](int size) { return size > 1 && size % 2 != 0; };
  if (odd(x_size) || odd(y_size) || odd(z_size)) {
    for (int z = 0; z < z_size; ++z)
      for (int y = 0; y < y_size; ++y)
        for (int x = 0; x < x_size; ++x)
          ring.push_back({x, y, z});
    return ring;
  }
  ring.push_back({0, 0, 0});
  // One size of 1: the flat ring of the other two.
  if (z_size == 1) {
    const auto layer = open_ring_2d(x_size, y_size, 0);
    ring.insert(ring.end(), layer.begin(), layer.end());
    return ring;
  }
  if (y_size == 1) {
    for (const auto& [x, z, unused] : open_ring_2d(x_size, z_size, 0))
      ring.push_back({x, 0, z});
    return ring;
  }
  if (x_size == 1) {
    for (const auto& [y, z, unused] : open_ring_2d(y_size, z_size, 0))
      ring.push_back({0, y, z});
    return ring;
  }
  // Every size even and above 1: the layers' open rings, every other one
  // reversed, then down the z axis at (0, 0).
  for (int z = 0; z < z_size; ++z) {
    auto layer = open_ring_2d(x_size, y_size, z);
    if (z % 2 != 0)
      std::reverse(layer.begin(), layer.end());
    ring.insert(ring.end(), layer.begin(), layer.end());
  }
  for (int z = z_size - 1; z > 0; --z)
    ring.push_back({0, 0, z});
  return ring;
}

} // namespace lockstep::detail
