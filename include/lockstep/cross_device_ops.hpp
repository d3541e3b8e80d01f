#pragma once

#include "lockstep/device_spec.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/values.hpp"
#include "lockstep/variable.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lockstep {

/// Where a reduction or broadcast delivers its result (TF's `destinations`):
/// the devices of a distributed value, the device of a tensor, or a device
/// string. An empty device list is an error ("destinations can not be
/// empty"), raised where the destinations are used.
class destinations {
public:
  destinations(const device_spec& device);
  destinations(const char* device);
  destinations(const std::string& device);
  destinations(const tensor& value);
  destinations(const distributed_values<tensor>& value);
  /// The devices of the variable's copies.
  destinations(const variable& var);

  /// Canonical devices, in order.
  const std::vector<device_spec>& devices() const noexcept { return devices_; }

private:
  std::vector<device_spec> devices_;
};

/// One entry of `batch_reduce`: a value and where its result goes.
struct reduce_pair {
  per_replica<tensor> value;
  destinations destination;
};

/// How a strategy moves and combines values between devices (TF's
/// CrossDeviceOps). The public calls validate their input (equal dtypes and
/// shapes across replicas, non-empty destinations) and then delegate to the
/// `*_implementation` hooks. Every result component is a buffer of its own
/// on its destination device.
class cross_device_ops {
public:
  virtual ~cross_device_ops() = default;

  /// Reduces `value` (one component per replica) and places a copy of the
  /// result on every destination device. MEAN divides the sum by the number
  /// of components (integers truncate toward zero).
  mirrored<tensor> reduce(reduce_op op, const per_replica<tensor>& value,
                          const destinations& destination);

  /// `reduce` for several values; results are in the order of `pairs`.
  std::vector<mirrored<tensor>>
  batch_reduce(reduce_op op, const std::vector<reduce_pair>& pairs);

  /// A copy of `value` on every destination device (the value itself on
  /// the device it already lives on).
  mirrored<tensor> broadcast(const tensor& value,
                             const destinations& destination);

  /// The algorithm's name, e.g. "reduction_to_one_device".
  virtual std::string name() const = 0;

protected:
  virtual mirrored<tensor>
  reduce_implementation(reduce_op op, const per_replica<tensor>& value,
                        const destinations& destination)
    = 0;

  /// Default: one `reduce_implementation` per pair.
  virtual std::vector<mirrored<tensor>>
  batch_reduce_implementation(reduce_op op,
                              const std::vector<reduce_pair>& pairs);

  /// Default: one copy per destination device.
  virtual mirrored<tensor>
  broadcast_implementation(const tensor& value,
                           const destinations& destination);
};

/// TF's ReductionToOneDevice: gathers every component on one device
/// (`reduce_to_device`, or the first destination), sums them there, divides
/// for MEAN, and copies the result to each destination device.
class reduction_to_one_device final : public cross_device_ops {
public:
  explicit reduction_to_one_device(
    std::optional<device_spec> reduce_to_device = std::nullopt);

  std::string name() const override;

protected:
  mirrored<tensor> reduce_implementation(reduce_op op,
                                         const per_replica<tensor>& value,
                                         const destinations& destination) override;

private:
  std::optional<device_spec> reduce_to_device_;
};

namespace detail {
struct slice_all_reduce_state;
}

/// An all-reduce where each device's thread owns one slice of every buffer:
/// it sums its slice across all replicas in cache-sized chunks and writes
/// each finished chunk to every destination (2·N·S bytes moved, no copy
/// through one device). Applies when the components lie on the destination
/// devices, one each, in order; otherwise it reduces to one device. Results
/// are bit-identical to `reduction_to_one_device`'s (same order of sums).
/// Replicas that disagree (dtype, shape) get the usual validation errors; a
/// device thread that does not take part within `timeout` is a
/// timeout_error naming it.
class slice_all_reduce final : public cross_device_ops {
public:
  explicit slice_all_reduce(std::chrono::milliseconds timeout = std::chrono::seconds{300});
  ~slice_all_reduce() override;

  std::string name() const override;

protected:
  mirrored<tensor> reduce_implementation(reduce_op op, const per_replica<tensor>& value,
                                         const destinations& destination) override;

private:
  std::unique_ptr<detail::slice_all_reduce_state> state_;
};

/// TF's `choose_the_best(devices)`: a device that is not a GPU means
/// `reduction_to_one_device`; so do GPUs until the NCCL backend exists.
std::shared_ptr<cross_device_ops>
choose_the_best(const std::vector<device_spec>& devices);

} // namespace lockstep
