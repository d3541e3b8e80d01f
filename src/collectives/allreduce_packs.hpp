#pragma once

// Fusion: an all-reduce of a batch of tensors in packs. Consecutive tensors
// of one dtype form a pack (lockstep::pack_options: TF's bytes_per_pack, or
// num_packs equal parts of the concatenation); each pack is one
// allreduce_slices collective over the tensors in place, so a pack of a
// thousand small tensors costs one rendezvous and one barrier, and no byte
// is copied into or out of a pack buffer. The plan depends only on the
// tensors' dtypes and shapes, so every rank plans the same packs, and the
// results are bit-identical to reducing the tensors one by one.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "collectives/allreduce_slices.hpp"
#include "lockstep/pack_options.hpp"

namespace lockstep::detail {

/// Tensors [first, last) of a batch, reduced together as the elements
/// [begin, end) of their concatenation.
struct pack {
  std::size_t first = 0;
  std::size_t last = 0;
  std::size_t begin = 0;
  std::size_t end = 0;

  friend bool operator==(const pack&, const pack&) = default;
};

/// The packs of `tensors` under `options`, in order. Every element is in
/// exactly one pack (tensors without elements may be in none).
std::vector<pack> plan_packs(std::span<const tensor> tensors, const pack_options& options);

/// Reduces `inputs` into `outputs` (one output per input, as
/// allreduce_slices requires) as `rank` of `group`, one collective per pack.
/// The first pack's sequence number is at least `first_seq`. Throws as
/// allreduce_slices.
void allreduce_packs(collective_group& group, std::size_t rank, reduce_op op,
                     std::span<const tensor> inputs, std::span<tensor> outputs,
                     const pack_options& packing, const collective_options& options,
                     std::uint64_t first_seq = 0);

} // namespace lockstep::detail
