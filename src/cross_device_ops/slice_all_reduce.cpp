// slice_all_reduce: which threads are the ranks of its shared-memory
// communicator (communicators/shm_communicator.hpp). In cross-replica context, the destination
// devices' executor threads, one rank each; in replica context
// (replica_context::all_reduce), the replica threads themselves, through
// the communicator that replica_collectives() gives the strategy.
//
// The caller (a merge function, a cross-replica reduce) posts rank r to the
// executor of destination r and waits. Ranks must run together, so all
// ranks of one collective are posted under one process-wide lock: every
// executor then sees collectives in the same order and two collectives can
// never wait for each other's ranks.

#include "lockstep/cross_device_ops.hpp"

#include "cross_device_ops/component_placement.hpp"

#include "cross_device_ops/replica_collectives.hpp"
#include "communicators/shm_communicator.hpp"
#include "runtime/completion.hpp"
#include "devices/device_executor.hpp"
#include "devices/device_registry.hpp"
#include "runtime/spin_wait.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <map>
#include <mutex>

namespace lockstep::detail {

struct slice_all_reduce_state {
  slice_all_reduce_options options;
  reduction_to_one_device fallback;
  std::mutex mutex;
  /// One communicator per device list, so sequence numbers follow each.
  std::map<std::vector<device_spec>, std::shared_ptr<shm_communicator>> groups;

  collective_options collective(const std::string& tag) const {
    return {.timeout = options.timeout, .tag = tag, .chunk_bytes = options.chunk_bytes,
            .packing = options.packing};
  }
};

namespace {

/// Serialises the posting of collectives across every slice_all_reduce.
std::mutex& posting_mutex() {
  static std::mutex mutex;
  return mutex;
}

} // namespace

} // namespace lockstep::detail

namespace lockstep {

slice_all_reduce::slice_all_reduce(slice_all_reduce_options options)
  : state_(std::make_unique<detail::slice_all_reduce_state>()) {
  state_->options = options;
}

const slice_all_reduce_options& slice_all_reduce::options() const noexcept {
  return state_->options;
}


slice_all_reduce::~slice_all_reduce() = default;

std::string slice_all_reduce::name() const {
  return "slice_all_reduce";
}

detail::replica_collectives
slice_all_reduce::replica_collectives(const std::vector<device_spec>& devices,
                                      const std::string& name) const {
  return {std::make_shared<detail::shm_communicator>(devices.size(), name, "replica"),
          state_->collective(name)};
}

mirrored<tensor> slice_all_reduce::reduce_implementation(reduce_op op,
                                                         const per_replica<tensor>& value,
                                                         const destinations& destination) {
  return std::move(batch_reduce_implementation(op, {{value, destination}}).at(0));
}

std::vector<mirrored<tensor>>
slice_all_reduce::batch_reduce_implementation(reduce_op op, const std::vector<reduce_pair>& pairs) {
  if (pairs.empty())
    return {};
  const auto& devices = pairs[0].destination.devices();
  const bool eligible = std::all_of(pairs.begin(), pairs.end(), [&](const reduce_pair& p) {
    return p.destination.devices() == devices
           && detail::one_component_per_destination(p.value, devices);
  });
  if (!eligible)
    return state_->fallback.batch_reduce(op, pairs);
  const auto n = devices.size();
  const auto spin = detail::spin_budget(n + 1);
  std::vector<std::shared_ptr<detail::device_executor>> executors;
  for (const auto& d : devices) {
    executors.push_back(detail::executor_of(d, spin));
    // Called by a device's own thread (inside an update): its rank could
    // never start, so reduce on this thread instead.
    if (executors.back()->on_this_thread())
      return state_->fallback.batch_reduce(op, pairs);
  }
  std::shared_ptr<detail::shm_communicator> group;
  {
    std::lock_guard<std::mutex> lock{state_->mutex};
    auto& slot = state_->groups[devices];
    if (!slot)
      slot = std::make_shared<detail::shm_communicator>(n, name());
    group = slot;
  }
  // Per rank: its component of every pair, and an output for each. Every
  // element is written by the ranks, which also take the page faults of
  // fresh buffers, in parallel.
  auto inputs = std::make_shared<std::vector<std::vector<tensor>>>(n);
  auto outputs = std::make_shared<std::vector<std::vector<tensor>>>(n);
  for (std::size_t r = 0; r < n; ++r)
    for (const auto& p : pairs) {
      (*inputs)[r].push_back(p.value[r]);
      (*outputs)[r].push_back(tensor::uninitialized(p.value[r].dtype(), p.value[r].shape(),
                                                    devices[r]));
    }
  auto done = std::make_shared<detail::completion>(n);
  const auto& options = state_->options;
  const auto collective = state_->collective(name());
  {
    std::lock_guard<std::mutex> lock{detail::posting_mutex()};
    for (std::size_t r = 0; r < n; ++r)
      executors[r]->post([group, r, op, inputs, outputs, done, collective] {
        std::exception_ptr error;
        try {
          group->all_reduce(r, op, (*inputs)[r], (*outputs)[r], collective);
        } catch (...) {
          error = std::current_exception();
        }
        done->done(std::move(error));
      });
  }
  // The ranks time out on their own; the extra second lets them report it.
  const auto deadline = std::chrono::steady_clock::now() + options.timeout + std::chrono::seconds{1};
  if (!done->wait(deadline))
    throw timeout_error("slice_all_reduce: the device threads did not finish within "
                        + std::to_string(options.timeout.count()) + " ms");
  if (auto error = done->error())
    std::rethrow_exception(error);
  std::vector<mirrored<tensor>> results;
  results.reserve(pairs.size());
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    std::vector<tensor> copies;
    copies.reserve(n);
    for (std::size_t r = 0; r < n; ++r)
      copies.push_back(std::move((*outputs)[r][k]));
    results.emplace_back(std::move(copies));
  }
  return results;
}

} // namespace lockstep
