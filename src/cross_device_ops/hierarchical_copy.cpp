// hierarchical_copy: TF's HierarchicalCopyAllReduce, on the calling thread.
//
// How it works, for N destination devices holding one component each: the
// devices form two groups, the first half [0, h) and the second half
// [h, N), h = floor(N/2) (TF takes two groups of h, which with odd N leaves
// the last device's component out of the sum). Tensor i of a batch (pack i when packing) has a
// main device m = i mod N and a partner p, the device in the same position
// of the other group (modulo that group's size), so that successive tensors
// load different devices.
//   1. Each group combines its components in device order into a group
//      result on its own main device (m or p): a copy of the group's first
//      component, then the op with each other member's component.
//   2. On m, the first half's result is combined with the second half's
//      (the one on p is copied over, or read from there), and divided by N
//      for MEAN: the total.
//   3. m copies the total to p; m and p each copy it to the rest of their
//      group.
// The order of the operations depends on neither i nor the packing, so a
// tensor's result is the same wherever it stands in a batch.
//
// Bytes moved between devices for components of S bytes: (N-2)·S into the
// two group mains, 2·S between the mains, (N-2)·S out to the groups; the
// busiest device (a main) receives and sends ceil(N/2)·S.

#include "lockstep/cross_device_ops.hpp"

#include "collectives/allreduce_packs.hpp"
#include "cross_device_ops/component_placement.hpp"

#include "cross_device_ops/hierarchical_copy_roles.hpp"
#include "collectives/reduce_kernels.hpp"

#include "lockstep/error.hpp"

#include <cstring>

namespace lockstep {

namespace {

/// Group [begin, end)'s components combined in device order, in a new
/// buffer on `device`.
tensor combine_group(reduce_op op, const per_replica<tensor>& value, std::size_t begin,
                     std::size_t end, const device_spec& device) {
  auto result = detail::start_reduction(value[begin], device);
  for (auto r = begin + 1; r < end; ++r)
    detail::combine_into(op, result, value[r]);
  return result;
}

/// The reduction of one tensor whose component r lies on devices[r]
/// (N >= 2 distinct devices), rotated by `index`: one buffer per device.
std::vector<tensor> reduce_hierarchically(reduce_op op, const per_replica<tensor>& value,
                                          const std::vector<device_spec>& devices,
                                          std::size_t index) {
  const auto n = devices.size();
  const auto [half, main, partner] = detail::hierarchical_roles(index, n);
  const bool main_in_first = main < half;
  auto first = combine_group(op, value, 0, half, devices[main_in_first ? main : partner]);
  auto second = combine_group(op, value, half, n, devices[main_in_first ? partner : main]);
  // First half, then second half, whichever holds the main device: MIN and
  // MAX keep the first half's of two equal values either way.
  tensor total = main_in_first ? first : first.to(devices[main]);
  detail::combine_into(op, total, second);
  detail::finish_reduction(op, total, n, value[0].dtype());
  // The partner's group result is spent: its buffer receives the total
  // (unless it is a float32 accumulator of half components).
  tensor& at_partner = main_in_first ? second : first;
  if (at_partner.dtype() == total.dtype())
    copy_into(at_partner, total);
  else
    at_partner = total.to(at_partner.device());
  std::vector<tensor> out;
  out.reserve(n);
  for (std::size_t r = 0; r < n; ++r) {
    if (r == main)
      out.push_back(total);
    else if (r == partner)
      out.push_back(at_partner);
    else
      out.push_back(((r < half) == main_in_first ? total : at_partner).to(devices[r]));
  }
  return out;
}

/// Copies `count` elements of `size` bytes from `source` at element
/// `source_offset` to `destination` at element `destination_offset`.
void copy_elements(tensor& destination, std::int64_t destination_offset, const tensor& source,
                   std::int64_t source_offset, std::int64_t count, std::size_t size) {
  if (count == 0)
    return;
  std::memcpy(static_cast<std::byte*>(destination.raw_data())
                + static_cast<std::size_t>(destination_offset) * size,
              static_cast<const std::byte*>(source.raw_data())
                + static_cast<std::size_t>(source_offset) * size,
              static_cast<std::size_t>(count) * size);
}

/// Calls `fn(k, offset_in_tensor, offset_in_range, count)` for every tensor
/// k of `sizes` (element counts, laid end to end) that overlaps elements
/// [begin, end) of their concatenation.
template <class F>
void for_each_overlap(const std::vector<std::int64_t>& sizes, std::int64_t begin,
                      std::int64_t end, F fn) {
  std::int64_t start = 0; // of tensor k in the concatenation
  for (std::size_t k = 0; k < sizes.size() && start < end; start += sizes[k], ++k) {
    const auto from = std::max(begin, start);
    const auto to = std::min(end, start + sizes[k]);
    if (from < to)
      fn(k, from - start, from - begin, to - from);
  }
}

} // namespace

hierarchical_copy::hierarchical_copy(std::size_t num_packs) : num_packs_(num_packs) {}

std::string hierarchical_copy::name() const {
  return "hierarchical_copy";
}

mirrored<tensor> hierarchical_copy::reduce_implementation(reduce_op op,
                                                          const per_replica<tensor>& value,
                                                          const destinations& destination) {
  const auto& devices = destination.devices();
  if (!detail::one_component_per_destination(value, devices))
    return reduction_to_one_device{}.reduce(op, value, destination);
  return mirrored<tensor>{reduce_hierarchically(op, value, devices, 0)};
}

std::vector<mirrored<tensor>>
hierarchical_copy::batch_reduce_implementation(reduce_op op,
                                               const std::vector<reduce_pair>& pairs) {
  if (pairs.empty())
    return {};
  // As TF: the batch path needs every pair on the same devices, one
  // component on each; anything else is reduced pair by pair.
  const auto& devices = pairs.front().destination.devices();
  for (const auto& p : pairs)
    if (p.destination.devices() != devices || !detail::one_component_per_destination(p.value, devices))
      return cross_device_ops::batch_reduce_implementation(op, pairs);
  const auto n = devices.size();
  std::vector<mirrored<tensor>> out;
  out.reserve(pairs.size());
  if (num_packs_ == 0) {
    for (std::size_t i = 0; i < pairs.size(); ++i)
      out.emplace_back(reduce_hierarchically(op, pairs[i].value, devices, i));
    return out;
  }
  // TF's concat-and-split packer (plan_packs): each run of one dtype, cut
  // into num_packs nearly equal element ranges, reduced as flat packs.
  std::vector<tensor> primaries;
  std::vector<std::vector<tensor>> results(pairs.size());
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    const auto& primary = pairs[k].value.primary();
    primaries.push_back(primary);
    for (const auto& d : devices)
      results[k].push_back(tensor::uninitialized(primary.dtype(), primary.shape(), d));
  }
  std::size_t pack_index = 0; // rotates the main device across the batch
  for (const auto& pack : detail::plan_packs(primaries, {.bytes_per_pack = 0,
                                                         .num_packs = num_packs_})) {
    if (pack.begin == pack.end)
      continue;
    std::vector<std::int64_t> sizes;
    for (auto k = pack.first; k < pack.last; ++k)
      sizes.push_back(primaries[k].num_elements());
    const auto type = primaries[pack.first].dtype();
    const auto element_size = size_of(type);
    const auto begin = static_cast<std::int64_t>(pack.begin);
    const auto end = static_cast<std::int64_t>(pack.end);
    std::vector<tensor> flat;
    for (std::size_t r = 0; r < n; ++r) {
      flat.push_back(tensor::uninitialized(type, {end - begin}, devices[r]));
      for_each_overlap(sizes, begin, end,
                       [&](std::size_t k, std::int64_t in_tensor, std::int64_t in_pack,
                           std::int64_t count) {
                         copy_elements(flat.back(), in_pack, pairs[pack.first + k].value[r],
                                       in_tensor, count, element_size);
                       });
    }
    const auto reduced
      = reduce_hierarchically(op, per_replica<tensor>{std::move(flat)}, devices, pack_index++);
    for (std::size_t r = 0; r < n; ++r)
      for_each_overlap(sizes, begin, end,
                       [&](std::size_t k, std::int64_t in_tensor, std::int64_t in_pack,
                           std::int64_t count) {
                         copy_elements(results[pack.first + k][r], in_tensor, reduced[r],
                                       in_pack, count, element_size);
                       });
  }
  for (auto& copies : results)
    out.emplace_back(std::move(copies));
  return out;
}

} // namespace lockstep
