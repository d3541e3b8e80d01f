// The validation every cross_device_ops shares, and the default broadcast.

#include "lockstep/cross_device_ops.hpp"

#include "cross_device_ops/replica_collectives.hpp"

#include "lockstep/error.hpp"

namespace lockstep {

namespace {

void validate(const destinations& destination) {
  if (destination.devices().empty())
    throw value_error("destinations can not be empty");
}

/// Components must agree in dtype and shape; the error names the replicas.
void validate(const per_replica<tensor>& value) {
  if (value.size() == 0)
    throw value_error("cannot reduce a per_replica value without components");
  const auto& first = value.primary();
  for (std::size_t r = 1; r < value.size(); ++r) {
    const auto& x = value[r];
    if (x.dtype() != first.dtype())
      throw dtype_error("cannot reduce across replicas: replica 0 has dtype "
                        + std::string{to_string(first.dtype())} + " but replica "
                        + std::to_string(r) + " has dtype "
                        + std::string{to_string(x.dtype())});
    if (x.shape() != first.shape())
      throw shape_error("cannot reduce across replicas: replica 0 has shape "
                        + shape_to_string(first.shape()) + " but replica "
                        + std::to_string(r) + " has shape "
                        + shape_to_string(x.shape()));
  }
}

} // namespace

destinations::destinations(const device_spec& device) : devices_{device.canonical()} {}

destinations::destinations(const char* device) : destinations(std::string{device}) {}

destinations::destinations(const std::string& device) {
  if (!device.empty())
    devices_.push_back(device_spec::parse(device).canonical());
}

destinations::destinations(const tensor& value) : devices_{value.device()} {}

destinations::destinations(const distributed_values<tensor>& value) {
  devices_.reserve(value.size());
  for (const auto& x : value.values())
    devices_.push_back(x.device());
}

mirrored<tensor> cross_device_ops::reduce(reduce_op op, const per_replica<tensor>& value,
                                          const destinations& destination) {
  validate(destination);
  validate(value);
  // TF's shortcut: one component already where it should be.
  if (num_between_graph_workers() == 1 && value.size() == 1 && destination.devices().size() == 1
      && destination.devices()[0] == value.primary().device())
    return mirrored<tensor>{value.values()};
  return reduce_implementation(op, value, destination);
}

std::vector<mirrored<tensor>>
cross_device_ops::batch_reduce(reduce_op op, const std::vector<reduce_pair>& pairs) {
  for (const auto& p : pairs) {
    validate(p.destination);
    validate(p.value);
  }
  return batch_reduce_implementation(op, pairs);
}

mirrored<tensor> cross_device_ops::broadcast(const tensor& value,
                                             const destinations& destination) {
  validate(destination);
  return broadcast_implementation(value, destination);
}

std::vector<mirrored<tensor>>
cross_device_ops::batch_reduce_implementation(reduce_op op,
                                              const std::vector<reduce_pair>& pairs) {
  std::vector<mirrored<tensor>> out;
  out.reserve(pairs.size());
  for (const auto& p : pairs)
    out.push_back(reduce(op, p.value, p.destination));
  return out;
}

detail::replica_collectives
cross_device_ops::replica_collectives(const std::vector<device_spec>&, const std::string&) const {
  return {};
}

mirrored<tensor> cross_device_ops::broadcast_implementation(const tensor& value,
                                                            const destinations& destination) {
  std::vector<tensor> copies;
  copies.reserve(destination.devices().size());
  for (const auto& device : destination.devices())
    copies.push_back(device == value.device() ? value : value.to(device));
  return mirrored<tensor>{std::move(copies)};
}

} // namespace lockstep
