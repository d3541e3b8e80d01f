#include "collectives/allreduce_packs.hpp"

#include <algorithm>
#include <string>

#include "lockstep/error.hpp"

namespace lockstep::detail {

namespace {

/// Splits tensors [first, last), all of one dtype, into packs.
void plan_run(std::span<const tensor> tensors, std::size_t first, std::size_t last,
              const pack_options& options, std::vector<pack>& packs) {
  if (options.num_packs == 0) {
    // TF's group_by_size: close a pack once it holds bytes_per_pack bytes.
    std::size_t start = first;
    std::size_t elements = 0;
    std::size_t bytes = 0;
    for (auto i = first; i < last; ++i) {
      const auto size = static_cast<std::size_t>(tensors[i].num_elements());
      elements += size;
      bytes += size * size_of(tensors[i].dtype());
      if ((options.bytes_per_pack > 0 && bytes >= options.bytes_per_pack) || i + 1 == last) {
        packs.push_back({start, i + 1, 0, elements});
        start = i + 1;
        elements = bytes = 0;
      }
    }
    return;
  }
  // TF's concat-and-split: num_packs nearly equal parts of the
  // concatenation, which may begin or end inside a tensor.
  std::vector<std::size_t> starts{0}; // position of each tensor's first element
  for (auto i = first; i < last; ++i)
    starts.push_back(starts.back() + static_cast<std::size_t>(tensors[i].num_elements()));
  const auto total = starts.back();
  if (total == 0) {
    packs.push_back({first, last, 0, 0});
    return;
  }
  const auto parts = std::min(options.num_packs, total);
  for (std::size_t k = 0; k < parts; ++k) {
    const auto lo = k * total / parts;
    const auto hi = (k + 1) * total / parts;
    // The first tensor holding position lo, and the tensors up to the one
    // holding position hi - 1.
    const auto a = static_cast<std::size_t>(
        std::upper_bound(starts.begin(), starts.end() - 1, lo) - starts.begin() - 1);
    const auto b = static_cast<std::size_t>(
        std::upper_bound(starts.begin(), starts.end() - 1, hi - 1) - starts.begin());
    packs.push_back({first + a, first + b, lo - starts[a], hi - starts[a]});
  }
}

} // namespace

std::vector<pack> plan_packs(std::span<const tensor> tensors, const pack_options& options) {
  std::vector<pack> packs;
  std::size_t first = 0;
  for (std::size_t i = 1; i <= tensors.size(); ++i)
    if (i == tensors.size() || tensors[i].dtype() != tensors[first].dtype()) {
      plan_run(tensors, first, i, options, packs);
      first = i;
    }
  return packs;
}

void allreduce_packs(collective_group& group, std::size_t rank, reduce_op op,
                     std::span<const tensor> inputs, std::span<tensor> outputs,
                     const pack_options& packing, const collective_options& options,
                     std::uint64_t first_seq) {
  if (inputs.size() != outputs.size())
    throw value_error("allreduce_packs in group '" + group.tag() + "': "
                      + std::to_string(inputs.size()) + " inputs but "
                      + std::to_string(outputs.size()) + " outputs");
  auto seq = std::max(first_seq, group.next_seq(rank));
  // An empty batch still meets the others, so a rank that passes tensors
  // the others do not is a mismatch, not a hang.
  if (inputs.empty()) {
    allreduce_slices(group, rank, op, allreduce_buffers{inputs, outputs}, options, seq);
    return;
  }
  // Every pack carries the whole batch's signature, so ranks whose batches
  // differ in dtype or shape learn it as such even where their packs differ.
  const auto batch = sign_batch(inputs);
  for (const auto& p : plan_packs(inputs, packing)) {
    const allreduce_buffers buffers{inputs.subspan(p.first, p.last - p.first),
                                    outputs.subspan(p.first, p.last - p.first), p.begin, p.end,
                                    &batch, p.first};
    allreduce_slices(group, rank, op, buffers, options, seq);
    seq = group.next_seq(rank);
  }
}

} // namespace lockstep::detail
