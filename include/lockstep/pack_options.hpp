#pragma once

// pack_options: how cross-device ops and the collectives below them group
// a batch of tensors. Vocabulary (docs/design.md): every layer may use it.

#include <cstddef>

namespace lockstep {

/// How a batch of tensors is packed into collectives (TF's
/// CommunicationOptions.bytes_per_pack and AllReduceCrossDeviceOps'
/// num_packs). Consecutive tensors of one dtype form a pack that is reduced
/// by one collective, reading the tensors in place (no copy into a pack
/// buffer) and writing each result to its own tensor; results are
/// bit-identical to reducing the tensors one by one.
struct pack_options {
  /// A pack is closed once it holds at least this many bytes (TF's
  /// group_by_size); 0: one pack per run of tensors of one dtype.
  std::size_t bytes_per_pack = 0;
  /// When not 0, each run of tensors of one dtype is instead split into this
  /// many packs of nearly equal element counts (TF's concat-and-split
  /// packer; a pack may begin or end inside a tensor).
  std::size_t num_packs = 0;
};

} // namespace lockstep
