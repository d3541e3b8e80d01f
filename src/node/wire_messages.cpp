#include "node/wire_messages.hpp"

#include "collectives/collective_group.hpp"

namespace lockstep::detail {

collective_control to_collective_control(const detail::collective_fingerprint& fingerprint,
                                         std::uint32_t rank, std::uint64_t generation) {
  collective_control control;
  control.rank = rank;
  control.generation = generation;
  control.seq = fingerprint.seq;
  control.op = fingerprint.op;
  control.reduction = fingerprint.reduction;
  control.dtype = fingerprint.dtype;
  control.shape = fingerprint.shape;
  control.tag = fingerprint.tag;
  control.tensors = fingerprint.tensors;
  control.layout = fingerprint.layout;
  control.batch_tensors = fingerprint.batch_tensors;
  control.batch_dtypes = fingerprint.batch_dtypes;
  control.batch_shapes = fingerprint.batch_shapes;
  control.epoch = fingerprint.epoch;
  control.inline_data = fingerprint.inline_data;
  control.slice = fingerprint.slice;
  return control;
}

detail::collective_fingerprint to_collective_fingerprint(const collective_control& control) {
  detail::collective_fingerprint fingerprint;
  fingerprint.seq = control.seq;
  fingerprint.op = control.op;
  fingerprint.reduction = control.reduction;
  fingerprint.dtype = control.dtype;
  fingerprint.shape = control.shape;
  fingerprint.tag = control.tag;
  fingerprint.tensors = static_cast<std::size_t>(control.tensors);
  fingerprint.layout = control.layout;
  fingerprint.batch_tensors = static_cast<std::size_t>(control.batch_tensors);
  fingerprint.batch_dtypes = control.batch_dtypes;
  fingerprint.batch_shapes = control.batch_shapes;
  fingerprint.epoch = control.epoch;
  fingerprint.inline_data = control.inline_data;
  fingerprint.slice = static_cast<std::size_t>(control.slice);
  return fingerprint;
}

} // namespace lockstep::detail
