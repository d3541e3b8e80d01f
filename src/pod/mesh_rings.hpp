#pragma once

// TF's ring orders of the chips of an x by y by z block, which
// device_assignment::build follows when replicas that span a chip's cores
// fill the mesh (TF's 3D tiling), unless its device_order_mode is `mesh`:
// consecutive entries are neighbours in the mesh, so the replicas, and the
// chips inside each, form rings.

#include <array>
#include <vector>

namespace lockstep::detail {

/// A chip's (x, y, z).
using chip_point = std::array<int, 3>;

/// TF's _open_ring_2d: the chips of an x_size by y_size layer at height
/// `z`, all but (0, 0), in ring order: along x and back on each pair of
/// rows (x from 1), then down the x = 0 column. For 4 by 4:
///    0 -- 1 -- 2 -- 3        (0 is left out)
///   15 -- 6 -- 5 -- 4
///   14 -- 7 -- 8 -- 9
///   13 -- 12 - 11 - 10
/// ring_3d calls it with even sizes above 1, which make it a ring.
std::vector<chip_point> open_ring_2d(int x_size, int y_size, int z);

/// TF's _ring_3d: every chip of an x_size by y_size by z_size block in
/// ring order, starting at (0, 0, 0). A block with two sizes of 1 is a
/// line; a block with an odd size above 1 is not a ring, and comes in
/// row-major order with x fastest (TF's "Odd dimension" fallback); a block
/// with one size of 1 is the flat ring of the other two; otherwise the
/// layers' open rings in turn, every other one reversed, then back down
/// the z axis at (0, 0).
std::vector<chip_point> ring_3d(int x_size, int y_size, int z_size);

} // namespace lockstep::detail
