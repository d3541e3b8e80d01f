// nccl_all_reduce: TF's NcclAllReduce over the GPUs of one process. A pack
// of tensors is one NCCL group call: ncclGroupStart, one ncclAllReduce per
// tensor and replica (each on its replica's stream, in place of a copy
// into a pack buffer: NCCL fuses a group's operations), ncclGroupEnd. NCCL
// moves 2(N-1)/N·S bytes per rank for N ranks and S bytes (its ring).

#include "lockstep/cross_device_ops.hpp"

#include "lockstep/config.hpp"
#include "lockstep/error.hpp"

#include "cross_device_ops/component_placement.hpp"
#include "devices/device_registry.hpp"

#if LOCKSTEP_HAVE_NCCL
#include "devices/cuda/cuda_check.hpp"
#include "devices/cuda/cuda_places.hpp"
#include "devices/cuda/nccl_check.hpp"
#include "devices/cuda/nccl_watchdog.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#endif

namespace lockstep {

#if LOCKSTEP_HAVE_NCCL

namespace detail {

namespace {

/// NCCL is not safe for operations on several communicators of one device
/// from several threads at once: every nccl_all_reduce of the process
/// takes this lock around its NCCL calls.
std::mutex& nccl_mutex() {
  static std::mutex mutex;
  return mutex;
}

/// Calls `release` (ncclCommDestroy or ncclCommAbort) on each of `comms`,
/// keeping the thread's current CUDA device, which NCCL changes.
void release_all(const std::vector<ncclComm_t>& comms, ncclResult_t (*release)(ncclComm_t)) {
  cuda_device_keeper keeper;
  for (auto* comm : comms)
    (void) release(comm);
}

/// Ends an NCCL group that a throw left open (NCCL's group depth is per
/// thread: an open group would swallow every later NCCL call).
class group_guard {
public:
  group_guard() { LOCKSTEP_NCCL_CHECK(ncclGroupStart()); }
  ~group_guard() {
    if (open_)
      (void) ncclGroupEnd();
  }
  group_guard(const group_guard&) = delete;
  group_guard& operator=(const group_guard&) = delete;

  void end() {
    open_ = false;
    LOCKSTEP_NCCL_CHECK(ncclGroupEnd());
  }

private:
  bool open_ = true;
};

} // namespace

struct nccl_all_reduce_state {
  nccl_all_reduce_options options;
  /// Communicators by the physical GPUs of their ranks, in rank order.
  std::map<std::vector<int>, std::vector<ncclComm_t>> communicators;

  ~nccl_all_reduce_state() {
    std::lock_guard guard{nccl_mutex()};
    for (auto& [devices, comms] : communicators)
      release_all(comms, ncclCommDestroy);
  }

  std::vector<ncclComm_t>& communicators_of(const std::vector<int>& devices) {
    auto found = communicators.find(devices);
    if (found != communicators.end())
      return found->second;
    std::vector<ncclComm_t> comms(devices.size(), nullptr);
    LOCKSTEP_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()),
                                        devices.data()));
    return communicators.emplace(devices, std::move(comms)).first->second;
  }

  /// One NCCL group call for pairs [first, end), all over `devices`; their
  /// results into `results`.
  void group_call(reduce_op op, const std::vector<reduce_pair>& pairs, std::size_t first,
                  std::size_t end, const std::vector<int>& devices,
                  std::vector<mirrored<tensor>>& results);

  /// Drops the communicators of `devices` after a failure, aborting them
  /// unless the watchdog did (an aborted communicator is freed); the next
  /// collective makes new ones.
  void forget(const std::vector<int>& devices, bool abort) {
    const auto found = communicators.find(devices);
    if (found == communicators.end())
      return;
    if (abort)
      release_all(found->second, ncclCommAbort);
    communicators.erase(found);
  }
};

} // namespace detail

namespace {

ncclDataType_t nccl_type(dtype type) {
  switch (type) {
    case dtype::f32:
      return ncclFloat32;
    case dtype::f64:
      return ncclFloat64;
    case dtype::i32:
      return ncclInt32;
    case dtype::i64:
      return ncclInt64;
    case dtype::f16:
      return ncclFloat16;
    case dtype::bf16:
      return ncclBfloat16;
  }
  throw dtype_error("nccl_all_reduce: invalid dtype");
}

/// MEAN is NCCL's SUM, divided afterwards.
ncclRedOp_t nccl_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::mean:
      return ncclSum;
    case reduce_op::prod:
      return ncclProd;
    case reduce_op::min:
      return ncclMin;
    case reduce_op::max:
      return ncclMax;
  }
  throw value_error("nccl_all_reduce: invalid reduce_op");
}

/// The physical GPU of each replica of `value`, which must lie in CUDA
/// memory, one per destination (or one on its one destination), each on a
/// GPU of its own; empty when the components are not one per destination
/// (the caller reduces to one device then).
std::vector<int> rank_devices(const per_replica<tensor>& value, const destinations& destination) {
  const auto* cuda = detail::cuda_kind_if_present();
  for (std::size_t r = 0; r < value.size(); ++r)
    if (cuda == nullptr || &detail::kind_of(value[r]) != cuda)
      throw device_error("nccl_all_reduce: component " + std::to_string(r) + " is in "
                         + std::string(detail::kind_of(value[r]).name) + " memory of "
                         + value[r].device().to_string()
                         + "; NCCL reduces CUDA memory (this process sees "
                         + std::to_string(detail::physical_cuda_devices()) + " CUDA devices)");
  // One component on its one destination is a single-rank communicator.
  const auto& targets = destination.devices();
  const bool single = value.size() == 1 && targets.size() == 1 && value[0].device() == targets[0];
  if (!single && !detail::one_component_per_destination(value, targets))
    return {};
  std::vector<int> devices;
  for (const auto& component : value.values()) {
    const int physical = detail::place_of(component.device()).physical;
    if (std::find(devices.begin(), devices.end(), physical) != devices.end())
      throw device_error("nccl_all_reduce: " + component.device().to_string()
                         + " shares CUDA device " + std::to_string(physical)
                         + " with another replica; NCCL allows one rank per GPU (use"
                           " on_device_all_reduce, which choose_the_best picks there)");
    devices.push_back(physical);
  }
  return devices;
}

std::string devices_text(const std::vector<int>& devices) {
  std::string text;
  for (auto d : devices)
    text += (text.empty() ? "" : ", ") + std::to_string(d);
  return text;
}

/// The packs of the run of pairs [first, end) (one group call each):
/// `num_packs` parts of nearly equal tensor counts, else packs closed once
/// they hold `bytes_per_pack` bytes, else one.
std::vector<std::pair<std::size_t, std::size_t>> packs_of(const std::vector<reduce_pair>& pairs,
                                                          std::size_t first, std::size_t end,
                                                          const pack_options& packing) {
  std::vector<std::pair<std::size_t, std::size_t>> packs;
  const auto count = end - first;
  if (packing.num_packs > 0) {
    const auto parts = std::min(packing.num_packs, count);
    for (std::size_t k = 0, begin = first; k < parts; ++k) {
      const auto size = count / parts + (k < count % parts ? 1 : 0);
      packs.emplace_back(begin, begin + size);
      begin += size;
    }
    return packs;
  }
  std::size_t begin = first;
  std::size_t bytes = 0;
  for (std::size_t p = first; p < end; ++p) {
    bytes += pairs[p].value.primary().byte_size();
    if (packing.bytes_per_pack != 0 && bytes >= packing.bytes_per_pack) {
      packs.emplace_back(begin, p + 1);
      begin = p + 1;
      bytes = 0;
    }
  }
  if (begin < end)
    packs.emplace_back(begin, end);
  return packs;
}

} // namespace

namespace detail {

void nccl_all_reduce_state::group_call(reduce_op op, const std::vector<reduce_pair>& pairs,
                                       std::size_t first, std::size_t end,
                                       const std::vector<int>& devices,
                                       std::vector<mirrored<tensor>>& results) {
  const auto n = devices.size();
  std::vector<std::vector<tensor>> outputs(end - first);
  for (std::size_t p = first; p < end; ++p)
    for (std::size_t r = 0; r < n; ++r) {
      const auto& in = pairs[p].value[r];
      outputs[p - first].push_back(tensor::uninitialized(in.dtype(), in.shape(), in.device()));
    }
  std::vector<cudaEvent_t> events(n, nullptr);
  const auto release_events = [&] {
    for (std::size_t r = 0; r < n; ++r)
      if (events[r] != nullptr) {
        cuda_device_guard device{devices[r]};
        (void) cudaEventDestroy(events[r]);
      }
  };
  nccl_work work;
  work.what = "nccl_all_reduce of " + std::to_string(end - first) + " tensor"
              + (end - first == 1 ? "" : "s") + " on CUDA devices " + devices_text(devices);
  try {
    auto& comms = communicators_of(devices);
    group_guard group;
    for (std::size_t p = first; p < end; ++p)
      for (std::size_t r = 0; r < n; ++r) {
        const auto& in = pairs[p].value[r];
        LOCKSTEP_NCCL_CHECK(ncclAllReduce(in.buffer().data(), outputs[p - first][r].buffer().data(),
                                          static_cast<std::size_t>(in.num_elements()),
                                          nccl_type(in.dtype()), nccl_op(op), comms[r],
                                          place_of(in.device()).stream));
      }
    group.end();
    if (op == reduce_op::mean)
      for (auto& per_pair : outputs)
        for (auto& out : per_pair)
          divide_into(out, static_cast<std::int64_t>(n));
    for (std::size_t r = 0; r < n; ++r) {
      auto& place = place_of(pairs[first].value[r].device());
      cuda_device_guard device{place.physical};
      LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&events[r], cudaEventDisableTiming));
      LOCKSTEP_CUDA_CHECK(cudaEventRecord(events[r], place.stream));
      work.done.emplace_back(place.physical, events[r]);
    }
    work.communicators = comms;
    work.deadline = std::chrono::steady_clock::now() + options.timeout;
  } catch (...) {
    release_events();
    forget(devices, /*abort=*/true);
    throw;
  }
  try {
    watch_nccl_work(work);
  } catch (...) {
    release_events();
    forget(devices, /*abort=*/false); // aborted by the watchdog
    throw;
  }
  release_events();
  for (std::size_t p = first; p < end; ++p)
    results[p] = mirrored<tensor>{std::move(outputs[p - first])};
}

} // namespace detail

nccl_all_reduce::nccl_all_reduce(nccl_all_reduce_options options)
  : state_(std::make_unique<detail::nccl_all_reduce_state>()) {
  if (options.timeout <= std::chrono::milliseconds::zero())
    throw value_error("nccl_all_reduce: the timeout must be positive, got "
                      + std::to_string(options.timeout.count()) + " ms");
  // At most a day, so deadlines (and the watchdog's minute past them) fit.
  options.timeout = std::min<std::chrono::milliseconds>(options.timeout, std::chrono::hours{24});
  state_->options = options;
}

std::vector<mirrored<tensor>>
nccl_all_reduce::batch_reduce_implementation(reduce_op op, const std::vector<reduce_pair>& pairs) {
  std::vector<mirrored<tensor>> results(pairs.size());
  std::lock_guard guard{detail::nccl_mutex()};
  std::size_t next = 0;
  while (next < pairs.size()) {
    const auto devices = rank_devices(pairs[next].value, pairs[next].destination);
    if (devices.empty()) {
      results[next] = reduction_to_one_device{}.reduce(op, pairs[next].value,
                                                       pairs[next].destination);
      ++next;
      continue;
    }
    // The run of consecutive pairs over the same GPUs, in packs.
    auto end = next + 1;
    while (end < pairs.size() && rank_devices(pairs[end].value, pairs[end].destination) == devices)
      ++end;
    for (const auto& [first, last] : packs_of(pairs, next, end, state_->options.packing))
      state_->group_call(op, pairs, first, last, devices, results);
    next = end;
  }
  return results;
}

#else // without NCCL

namespace detail {
struct nccl_all_reduce_state {};
} // namespace detail

nccl_all_reduce::nccl_all_reduce(nccl_all_reduce_options) {
  throw device_error("nccl_all_reduce: lockstep was built without NCCL (meson option nccl)");
}

std::vector<mirrored<tensor>>
nccl_all_reduce::batch_reduce_implementation(reduce_op, const std::vector<reduce_pair>&) {
  throw device_error("nccl_all_reduce: lockstep was built without NCCL (meson option nccl)");
}

#endif

nccl_all_reduce::~nccl_all_reduce() = default;

std::string nccl_all_reduce::name() const {
  return "nccl_all_reduce";
}

mirrored<tensor> nccl_all_reduce::reduce_implementation(reduce_op op,
                                                        const per_replica<tensor>& value,
                                                        const destinations& destination) {
  return std::move(batch_reduce_implementation(op, {reduce_pair{value, destination}}).front());
}

} // namespace lockstep
