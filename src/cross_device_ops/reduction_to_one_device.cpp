// reduction_to_one_device: gather on one device, reduce, copy out.
// Components are combined in replica order with the op's kernel
// (reduce_kernels.hpp).
// Bytes moved for N components of S bytes and D destinations: N·S read,
// S written on the reduce device, then (D-1)·S copied out.

#include "lockstep/cross_device_ops.hpp"

#include "collectives/reduce_kernels.hpp"

namespace lockstep {

reduction_to_one_device::reduction_to_one_device(std::optional<device_spec> reduce_to_device)
  : reduce_to_device_(std::move(reduce_to_device)) {
  if (reduce_to_device_)
    reduce_to_device_ = reduce_to_device_->canonical();
}

std::string reduction_to_one_device::name() const {
  return "reduction_to_one_device";
}

mirrored<tensor>
reduction_to_one_device::reduce_implementation(reduce_op op,
                                               const per_replica<tensor>& value,
                                               const destinations& destination) {
  const auto& device = reduce_to_device_ ? *reduce_to_device_ : destination.devices()[0];
  auto total = detail::start_reduction(value.primary(), device);
  for (std::size_t r = 1; r < value.size(); ++r)
    detail::combine_into(op, total, value[r]);
  detail::finish_reduction(op, total, value.size(), value.primary().dtype());
  // The reduced buffer goes to the first destination on its device; every
  // other destination (even one naming that device again) gets its own copy.
  std::vector<tensor> copies;
  copies.reserve(destination.devices().size());
  bool placed = false;
  for (const auto& d : destination.devices()) {
    const bool take = !placed && d == device;
    placed = placed || take;
    copies.push_back(take ? total : total.to(d));
  }
  return mirrored<tensor>{std::move(copies)};
}

} // namespace lockstep
