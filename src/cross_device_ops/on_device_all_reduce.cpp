// on_device_all_reduce: one kernel per memory domain (a physical GPU, or
// the host) reads the K components there and writes the result to each of
// the K replicas' buffers: 2K·S bytes for K components of S bytes. With
// several domains, each domain's kernel writes a partial result to its
// first replica; those are combined on the first domain's leader as
// reduction_to_one_device combines components, and the total is copied
// back to every replica.

#include "lockstep/cross_device_ops.hpp"

#include "collectives/reduce_kernels.hpp"
#include "cross_device_ops/component_placement.hpp"
#include "cross_device_ops/replica_collectives.hpp"
#include "devices/device_registry.hpp"
#include "communicators/device_communicator.hpp"

#include <algorithm>
#include <vector>

namespace lockstep {

namespace {

/// Replicas (indices) grouped by the memory their buffers are in, groups in
/// order of their first replica.
std::vector<std::vector<std::size_t>> replicas_by_domain(const per_replica<tensor>& value) {
  struct domain_group {
    const device_kind* kind;
    int domain;
    std::vector<std::size_t> replicas;
  };
  std::vector<domain_group> groups;
  for (std::size_t r = 0; r < value.size(); ++r) {
    const auto& kind = detail::kind_of(value[r]);
    const auto domain = detail::memory_domain(value[r].device());
    auto found = std::find_if(groups.begin(), groups.end(), [&](const domain_group& g) {
      return g.kind == &kind && g.domain == domain;
    });
    if (found == groups.end())
      found = groups.insert(groups.end(), domain_group{&kind, domain, {}});
    found->replicas.push_back(r);
  }
  std::vector<std::vector<std::size_t>> result;
  for (auto& g : groups)
    result.push_back(std::move(g.replicas));
  return result;
}

std::vector<tensor> pick(const std::vector<tensor>& tensors, const std::vector<std::size_t>& at) {
  std::vector<tensor> picked;
  for (auto i : at)
    picked.push_back(tensors[i]);
  return picked;
}

} // namespace

std::string on_device_all_reduce::name() const {
  return "on_device_all_reduce";
}

mirrored<tensor> on_device_all_reduce::reduce_implementation(reduce_op op,
                                                             const per_replica<tensor>& value,
                                                             const destinations& destination) {
  const auto& devices = destination.devices();
  if (!detail::one_component_per_destination(value, devices))
    return reduction_to_one_device{}.reduce(op, value, destination);
  const auto& first = value.primary();
  std::vector<tensor> inputs = value.values();
  std::vector<tensor> outputs;
  for (const auto& d : devices)
    outputs.push_back(tensor::uninitialized(first.dtype(), first.shape(), d));
  const auto groups = replicas_by_domain(value);
  if (groups.size() == 1) {
    detail::reduce_buffers(op, inputs, outputs);
    return mirrored<tensor>{std::move(outputs)};
  }
  // Partial results per domain, combined across domains once; MEAN
  // divides by all the replicas at the end.
  const auto partial_op = op == reduce_op::mean ? reduce_op::sum : op;
  for (const auto& group : groups) {
    const auto group_inputs = pick(inputs, group);
    tensor leader = outputs[group.front()];
    detail::reduce_buffers(partial_op, group_inputs, std::span<tensor>{&leader, 1});
  }
  auto total = detail::start_reduction(outputs[groups[0].front()], devices[groups[0].front()]);
  for (std::size_t g = 1; g < groups.size(); ++g)
    detail::combine_into(partial_op, total, outputs[groups[g].front()]);
  detail::finish_reduction(op, total, value.size(), first.dtype());
  for (auto& output : outputs)
    copy_into(output, total);
  return mirrored<tensor>{std::move(outputs)};
}

detail::replica_collectives
on_device_all_reduce::replica_collectives(const std::vector<device_spec>& devices,
                                          const std::string& name) const {
  // Replica threads meet only where one kernel reaches every replica's
  // memory; across physical GPUs, merge_call and reduce_implementation.
  if (devices.empty())
    return {};
  const auto& kind = detail::kind_of(devices.front());
  const auto domain = detail::memory_domain(devices.front());
  for (const auto& d : devices)
    if (&detail::kind_of(d) != &kind || detail::memory_domain(d) != domain)
      return {};
  return {std::make_shared<detail::device_communicator>(devices.size(), name),
          detail::collective_options{.tag = name}};
}

} // namespace lockstep
