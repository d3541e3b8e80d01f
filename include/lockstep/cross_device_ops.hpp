#pragma once

#include "lockstep/device_spec.hpp"
#include "lockstep/pack_options.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/values.hpp"

#include <chrono>
#include <concepts>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace lockstep {

class variable;

namespace detail {
struct replica_collectives;
struct cross_device_ops_access;
} // namespace detail

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
  /// The devices of the variable's copies (a variable, mirrored_variable or
  /// sync_on_read_variable). A template, so that this header needs no
  /// variable.hpp (the variables sit above the cross-device ops): `var` is
  /// complete wherever a caller has one to pass.
  template <class Variable>
    requires std::derived_from<std::remove_cvref_t<Variable>, variable>
  destinations(const Variable& var) : devices_(var.devices()) {}

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
  /// of components (integers truncate toward zero); MIN, MAX and PROD are
  /// elementwise as in reduce_op.hpp.
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

  /// Worker processes the reductions span (TF's
  /// `_num_between_graph_workers`); with more than one, even a single
  /// component already on its destination is reduced with the others'.
  virtual std::size_t num_between_graph_workers() const { return 1; }

private:
  friend struct detail::cross_device_ops_access;

  /// How a strategy's replica threads run replica_context::all_reduce
  /// among themselves, one rank per device of `devices`, without the
  /// strategy actor: the communicator and its default options. The default,
  /// no communicator, sends all_reduce through merge_call and batch_reduce.
  /// Private, and typed with lockstep's internal communicator: a
  /// cross_device_ops written outside the library keeps the default.
  virtual detail::replica_collectives
  replica_collectives(const std::vector<device_spec>& devices, const std::string& name) const;
};

/// TF's ReductionToOneDevice: gathers every component on one device
/// (`reduce_to_device`, or the first destination), combines them there in
/// replica order (adds for SUM and MEAN, then divides for MEAN; multiplies
/// for PROD; min_into / max_into for MIN / MAX), and copies the result to
/// each destination device.
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

/// Settings of `slice_all_reduce`.
struct slice_all_reduce_options {
  /// How long a rank waits for the others before it throws timeout_error.
  std::chrono::milliseconds timeout{std::chrono::seconds{300}};
  /// How `batch_reduce` and `replica_context::all_reduce` of several
  /// tensors pack them.
  pack_options packing;
  /// Test-only: bytes per chunk of a rank's slice (0: 4 KiB up to 4
  /// replicas, 16 KiB beyond), so small tensors reach the multi-chunk paths.
  std::size_t chunk_bytes = 0;
};

namespace detail {
struct slice_all_reduce_state;
}

/// An all-reduce where each replica's thread owns one slice of every buffer:
/// it reduces its slice across all replicas in cache-sized chunks and writes
/// each finished chunk to every destination while it is in cache (2·N·S
/// bytes moved, one pass, no copy through one device). Called from a
/// merge function or in cross-replica context, the ranks run on the
/// destination devices' executor threads; `replica_context::all_reduce`
/// runs them on the replica threads themselves, which meet at the
/// collective without the strategy actor. Applies when the components lie on
/// the destination devices, one each, in order; otherwise it reduces to one
/// device. Components are combined in replica order, so results are
/// bit-identical to `reduction_to_one_device`'s. Replicas that disagree
/// (dtype, shape, op) get an error naming what each issued; a rank that
/// does not take part within the timeout is a timeout_error naming it.
class slice_all_reduce final : public cross_device_ops {
public:
  explicit slice_all_reduce(slice_all_reduce_options options = {});
  ~slice_all_reduce() override;

  std::string name() const override;

  const slice_all_reduce_options& options() const noexcept;

protected:
  mirrored<tensor> reduce_implementation(reduce_op op, const per_replica<tensor>& value,
                                         const destinations& destination) override;

  std::vector<mirrored<tensor>>
  batch_reduce_implementation(reduce_op op, const std::vector<reduce_pair>& pairs) override;

private:
  detail::replica_collectives
  replica_collectives(const std::vector<device_spec>& devices,
                      const std::string& name) const override;

  std::unique_ptr<detail::slice_all_reduce_state> state_;
};

/// TF's HierarchicalCopyAllReduce, kept for GPU groups: the N devices form
/// two groups, the first floor(N/2) and the last ceil(N/2) (TF's halves
/// assume N is even). As in TF, the i-th tensor of a batch has main device
/// i mod N and a partner, the device in the same position of the other group
/// (modulo that group's size), so that the work is spread. Each group
/// combines its components in device order on its own main device (the main
/// device or the partner); the main device combines the first group's result
/// with the second's, divides for MEAN, and sends the total to the partner;
/// each of the two copies it to the rest of its group. The order of the
/// operations does not depend on i, so results are deterministic and the
/// same wherever a tensor stands in a batch; for floating SUM and MEAN they
/// may differ in the last bits from reduction_to_one_device's (another
/// association of the additions).
/// `num_packs` > 0: `batch_reduce` concatenates each run of consecutive
/// tensors of one dtype (flattened) and splits it into `num_packs` parts
/// whose element counts differ by at most one (TF's concat-and-split packer
/// gives the remainder to the last part instead), reduces each part as one
/// tensor and unpacks the results into tensors of the original shapes:
/// bit-identical to reducing them one by one. 0: each tensor on its own.
/// A batch is reduced together when every pair's components lie on the
/// same destination devices, one each, in order; otherwise pair by pair.
/// With one device it is the identity; components that are not one per
/// destination device reduce to one device.
class hierarchical_copy final : public cross_device_ops {
public:
  explicit hierarchical_copy(std::size_t num_packs = 1);

  std::string name() const override;

protected:
  mirrored<tensor> reduce_implementation(reduce_op op, const per_replica<tensor>& value,
                                         const destinations& destination) override;

  std::vector<mirrored<tensor>>
  batch_reduce_implementation(reduce_op op, const std::vector<reduce_pair>& pairs) override;

private:
  std::size_t num_packs_;
};

/// lockstep's own all-reduce for replicas whose buffers one kernel can
/// reach: the K replicas of one physical GPU (TF's logical GPUs), or host
/// memory. One kernel reads the K components and writes the result to each
/// replica's new buffer (2K·S bytes moved for K components of S bytes),
/// combining them in replica order as reduction_to_one_device does, so the
/// results are bit-identical to it. Replicas on several physical GPUs are
/// reduced per GPU by that kernel, the GPUs' partial results then as by
/// reduction_to_one_device on the first GPU (MEAN divides once, by the
/// number of replicas), and the result copied back to every replica: the
/// association of the additions then differs from the CPU's. Components
/// that are not one per destination device reduce to one device. On
/// CUDA memory the work runs on the replicas' streams, ordered by events;
/// nothing waits on the host. In a strategy whose devices share one memory,
/// `replica_context::all_reduce` runs on the replica threads themselves,
/// which meet in a collective group (fingerprints, timeouts, the flight
/// recorder) and one of which launches the kernel, without merge_call.
class on_device_all_reduce final : public cross_device_ops {
public:
  std::string name() const override;

protected:
  mirrored<tensor> reduce_implementation(reduce_op op, const per_replica<tensor>& value,
                                         const destinations& destination) override;

private:
  detail::replica_collectives
  replica_collectives(const std::vector<device_spec>& devices,
                      const std::string& name) const override;
};

/// Settings of `nccl_all_reduce`.
struct nccl_all_reduce_options {
  /// How long a collective may take before its communicator is aborted
  /// (ncclCommAbort) and the call throws timeout_error. Must be positive
  /// (value_error); more than a day counts as a day.
  std::chrono::milliseconds timeout{std::chrono::seconds{300}};
  /// How `batch_reduce` groups consecutive tensors over the same GPUs:
  /// each pack is one NCCL group call (ncclGroupStart/End around one
  /// ncclAllReduce per tensor and replica); `num_packs` splits a run into
  /// that many packs of nearly equal tensor counts, else a pack closes once
  /// it holds `bytes_per_pack` bytes (0: the whole run).
  pack_options packing;
};

namespace detail {
struct nccl_all_reduce_state;
}

/// TF's NcclAllReduce: an all-reduce with NCCL over replicas on distinct
/// physical GPUs of this process (NCCL 2.28 refuses two ranks on one GPU;
/// `choose_the_best` picks `on_device_all_reduce` there). One communicator
/// per group of GPUs, created on first use (ncclCommInitAll) and kept; each
/// replica's part runs on its GPU's stream. SUM, MIN, MAX and PROD are
/// NCCL's; MEAN is SUM followed by a division on each GPU, as the other
/// algorithms do it, so integer MEAN truncates. NCCL's order of summation
/// is its own: floating results may differ from the CPU's in the last bits
/// (docs/gpu.md states the bound). A watchdog thread polls each
/// collective's completion and ncclCommGetAsyncError; an asynchronous error
/// or the timeout aborts the communicator (ncclCommAbort) and the call
/// throws device_error or timeout_error; the next call makes a new
/// communicator. One component on its one destination is a single-rank
/// communicator; components not one per destination GPU reduce to one
/// device. Throws device_error for components not in CUDA memory, and
/// where lockstep was built without NCCL.
class nccl_all_reduce final : public cross_device_ops {
public:
  explicit nccl_all_reduce(nccl_all_reduce_options options = {});
  ~nccl_all_reduce() override;

  std::string name() const override;

protected:
  mirrored<tensor> reduce_implementation(reduce_op op, const per_replica<tensor>& value,
                                         const destinations& destination) override;

  std::vector<mirrored<tensor>>
  batch_reduce_implementation(reduce_op op, const std::vector<reduce_pair>& pairs) override;

private:
  std::unique_ptr<detail::nccl_all_reduce_state> state_;
};

/// TF's `choose_the_best(devices)`: a list of CPU devices only (or an empty
/// list) gets `slice_all_reduce` (TF picks ReductionToOneDevice there; the
/// slice all-reduce gives the same results bit for bit and runs at memory
/// speed). A list of GPUs in CUDA memory gets `nccl_all_reduce` when
/// lockstep has NCCL and each device is a physical GPU of its own (at
/// least two), else `on_device_all_reduce` (logical GPUs sharing a
/// physical one). Any other list (GPUs that are host memory for want of a
/// CUDA device, other accelerators, a mix) gets `reduction_to_one_device`.
std::shared_ptr<cross_device_ops>
choose_the_best(const std::vector<device_spec>& devices);

} // namespace lockstep
