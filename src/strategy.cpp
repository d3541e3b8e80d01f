// strategy and strategy_extended: the cross-replica API shared by every
// strategy. What differs between strategies is the executor (who runs the
// replicas) and whether reductions are identities (one replica).

#include "lockstep/strategy.hpp"

#include "error_text.hpp"
#include "spin_wait.hpp"
#include "strategy_state.hpp"
#include "thread_mode.hpp"

#include "log.hpp"

#include "lockstep/context.hpp"
#include "lockstep/error.hpp"
#include "lockstep/runtime_options.hpp"

#include <algorithm>
#include <mutex>
#include <thread>
#include <optional>

#include <sstream>

namespace lockstep::detail {

strategy_state::strategy_state(strategy_kind kind, std::vector<device_spec> devices,
                               std::shared_ptr<cross_device_ops> ops,
                               std::chrono::milliseconds timeout)
  : kind(kind), devices(std::move(devices)), ops(std::move(ops)), timeout(timeout) {}

namespace {

/// Stops the replicas, then deletes the state; keeps it (never freed) when
/// a replica is stuck in user code that may still use it.
void destroy(strategy_state* s) {
  if (!s->executor || s->executor->stop()) {
    delete s;
    return;
  }
  LOCKSTEP_LOG_ERROR("{}: a replica thread still runs user code at shutdown; "
                     "its strategy is kept alive for it",
                     s->name());
  static auto* abandoned = new std::vector<strategy_state*>;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock{mutex};
  abandoned->push_back(s); // reachable, never freed, on purpose
}

} // namespace

std::shared_ptr<strategy_state> strategy_state::create(strategy_kind kind,
                                                       std::vector<device_spec> devices,
                                                       std::shared_ptr<cross_device_ops> ops,
                                                       std::chrono::milliseconds timeout) {
  auto* state = new strategy_state(kind, std::move(devices), std::move(ops), timeout);
  return std::shared_ptr<strategy_state>(state, [](strategy_state* s) {
    // A posted write's captures may hold the last handle; an executor
    // cannot join its own thread, so another thread destroys the state.
    if (s->on_device_executor_thread())
      std::thread{[s] { destroy(s); }}.detach();
    else
      destroy(s);
  });
}

actors::device_executor& strategy_state::device_executor(std::size_t device) {
  std::lock_guard<std::mutex> lock{variables_mutex_};
  if (device_executors_.empty()) {
    // Replica threads are idle while posted writes run.
    const auto spin = spin_budget(devices.size() + 1);
    for (const auto& d : devices) {
      try {
        device_executors_.push_back(actors::device_executor::of(d, spin));
      } catch (const std::exception& e) { // std::system_error, or std::bad_alloc
        const auto started = device_executors_.size();
        device_executors_.clear(); // lets go of those started here
        throw resource_error(name() + ": could not start the executor thread of "
                             + d.to_string() + " (" + std::to_string(started) + " of "
                             + std::to_string(devices.size()) + " had started): " + e.what());
      }
    }
  }
  return *device_executors_.at(device);
}

bool strategy_state::on_device_executor_thread() const {
  std::lock_guard<std::mutex> lock{variables_mutex_};
  return std::any_of(device_executors_.begin(), device_executors_.end(),
                     [](const auto& e) { return e->on_this_thread(); });
}

void strategy_state::drain_device_executors() {
  std::vector<actors::device_executor*> executors;
  {
    std::lock_guard<std::mutex> lock{variables_mutex_};
    for (const auto& e : device_executors_)
      executors.push_back(e.get());
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto* e : executors)
    if (!e->drain(deadline))
      throw timeout_error(name() + ": the writes posted to " + e->device().to_string()
                          + " did not finish within " + std::to_string(timeout.count())
                          + " ms");
}

void strategy_state::record_write_failure(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock{variables_mutex_};
  if (!write_failure_)
    write_failure_ = std::move(error);
}

std::exception_ptr strategy_state::take_write_failure() {
  std::lock_guard<std::mutex> lock{variables_mutex_};
  return std::exchange(write_failure_, nullptr);
}

std::chrono::milliseconds checked_timeout(std::chrono::milliseconds timeout, const char* what) {
  if (timeout.count() <= 0 || timeout > runtime_options::max_timeout)
    throw value_error(std::string{what} + ": the timeout must be greater than 0 and at most 1e9 s, got "
                      + std::to_string(timeout.count()) + " ms");
  return timeout;
}

std::string strategy_state::name() const {
  switch (kind) {
    case strategy_kind::default_strategy:
      return "default_strategy";
    case strategy_kind::one_device:
      return "one_device_strategy(" + devices.at(0).to_string() + ")";
    case strategy_kind::mirrored:
      break;
  }
  std::vector<std::string> names;
  for (const auto& d : devices)
    names.push_back(d.to_string());
  return "mirrored_strategy(" + joined_list(names) + ")";
}

user_claim::user_claim(strategy_state& state) : state_(state) {
  const auto me = std::this_thread::get_id();
  auto expected = std::thread::id{};
  if (!state.user.compare_exchange_strong(expected, me) && expected != me)
    throw context_error(state.name() + " is in use by another thread: a "
                        "strategy's cross-replica API is used from one thread "
                        "at a time");
  ++state.user_depth;
}

user_claim::~user_claim() {
  if (--state_.user_depth == 0)
    state_.user.store(std::thread::id{});
}

std::string describe_replica(const strategy_state& state, std::size_t replica) {
  std::string out = "replica " + std::to_string(replica);
  if (replica < state.devices.size())
    out += " (" + state.devices[replica].to_string() + ")";
  return out;
}

std::vector<std::any>
call_for_each_replica(strategy_state& state,
                      std::shared_ptr<const replica_function> fn,
                      const run_options& options) {
  auto scope = state.handle().scope(); // checks the context as TF's run does
  const auto timeout = checked_timeout(options.timeout.value_or(state.timeout), "run_options");
  // The default strategy is every thread's; the others serve one at a time.
  std::optional<user_claim> claim;
  if (state.kind != strategy_kind::default_strategy)
    claim.emplace(state);
  state.dispatches.fetch_add(1, std::memory_order_relaxed);
  return state.executor->run(std::move(fn), timeout);
}

void throw_non_distributed(reduce_op op, const std::string& value) {
  throw value_error("A non-distributed value " + value
                    + " cannot be reduced with the given reduce op " + std::string{to_string(op)}
                    + ".");
}

std::vector<device_spec> replica_devices(const strategy_state& state) {
  if (state.kind == strategy_kind::default_strategy)
    return {current_device()};
  return state.devices;
}

std::size_t replica_id(const replica_context& ctx) {
  return ctx.replica_id_in_sync_group();
}

void throw_structure_mismatch(std::size_t replica, const std::string& what,
                              const std::string& first) {
  throw value_error("regroup: replica " + std::to_string(replica) + " returned "
                    + what + " but replica 0 returned " + first);
}

} // namespace lockstep::detail

namespace lockstep {

using detail::strategy_kind;

namespace {

bool single_replica(const detail::strategy_state& state) {
  return state.kind != strategy_kind::mirrored;
}

std::string describe(const tensor& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

} // namespace

// -- scope_guard ------------------------------------------------------------------

scope_guard::~scope_guard() {
  if (pushed_)
    detail::pop_mode();
}

// -- strategy ----------------------------------------------------------------------

scope_guard strategy::scope() const {
  auto& state = *state_;
  if (has_strategy()) {
    if (state.kind == strategy_kind::default_strategy)
      throw context_error("Must not nest lockstep::strategy scopes.");
    detail::require_cross_replica_or_default_context(state);
    return scope_guard{false}; // already in this strategy's scope
  }
  detail::push_mode({&state, nullptr});
  return scope_guard{true};
}

tensor strategy::reduce_tensor(reduce_op op, const per_replica<tensor>& value) const {
  detail::require_cross_replica_or_default_context(*state_);
  return extended().reduce_to(op, value, current_device())[0];
}

tensor strategy::reduce(reduce_op op, const tensor& value) const {
  detail::require_cross_replica_or_default_context(*state_);
  return extended().reduce_to(op, value, current_device())[0];
}

tensor strategy::reduce(reduce_op op, const per_replica<tensor>& value,
                        std::int64_t axis) const {
  detail::require_cross_replica_or_default_context(*state_);
  if (op != reduce_op::sum && op != reduce_op::mean)
    throw value_error("reduce along an axis supports sum and mean, not "
                      + std::string{lockstep::to_string(op)});
  std::vector<tensor> sums;
  std::int64_t length = 0;
  for (const auto& part : value.values()) {
    const auto rank = static_cast<std::int64_t>(part.rank());
    if (axis >= rank || axis + rank < 0)
      throw value_error("`axis` = " + std::to_string(axis)
                        + " out of range for `value` with rank "
                        + std::to_string(rank));
    const auto a = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
    length += part.shape()[a];
    sums.push_back(reduce_sum_axis(part, a));
  }
  auto total = reduce_tensor(reduce_op::sum, per_replica<tensor>{std::move(sums)});
  if (op == reduce_op::sum)
    return total;
  if (length == 0 && is_integer(total.dtype()))
    throw value_error("cannot take the mean of an integer tensor over an empty axis");
  divide_into(total, length);
  return total;
}

std::size_t strategy::num_replicas_in_sync() const noexcept {
  return extended().num_replicas_in_sync();
}

strategy_extended& strategy::extended() const noexcept {
  return state_->extended;
}

std::string strategy::to_string() const {
  return state_->name();
}

// -- strategy_extended -----------------------------------------------------------

std::size_t strategy_extended::num_replicas_in_sync() const noexcept {
  return state_->kind == strategy_kind::mirrored ? state_->devices.size() : 1;
}

void strategy_extended::check_reduce_non_distributed(
  const destinations& destination) const {
  detail::require_cross_replica_or_default_context(*state_);
  if (destination.devices().empty())
    throw value_error("destinations can not be empty");
}

mirrored<tensor> strategy_extended::reduce_to(reduce_op op,
                                              const per_replica<tensor>& value,
                                              const destinations& destination) const {
  detail::require_cross_replica_or_default_context(*state_);
  // TF's regroup would have collapsed it into a plain value.
  if (value.is_single())
    return reduce_to(op, value.primary(), destination);
  return state_->ops->reduce(op, value, destination);
}

mirrored<tensor> strategy_extended::reduce_to(reduce_op op, const tensor& value,
                                              const destinations& destination) const {
  check_reduce_non_distributed(destination);
  // N copies of the value: its MEAN, MIN and MAX are the value itself.
  if ((op == reduce_op::sum || op == reduce_op::prod) && num_replicas_in_sync() != 1)
    detail::throw_non_distributed(op, describe(value));
  return broadcast_to(value, destination);
}

std::vector<mirrored<tensor>>
strategy_extended::batch_reduce_to(reduce_op op,
                                   const std::vector<reduce_pair>& pairs) const {
  detail::require_cross_replica_or_default_context(*state_);
  const bool any_single = std::any_of(pairs.begin(), pairs.end(),
                                      [](const reduce_pair& p) { return p.value.is_single(); });
  if (!any_single)
    return state_->ops->batch_reduce(op, pairs);
  std::vector<mirrored<tensor>> out;
  for (const auto& p : pairs)
    out.push_back(reduce_to(op, p.value, p.destination));
  return out;
}

mirrored<tensor> strategy_extended::broadcast_to(const tensor& value,
                                                 const destinations& destination) const {
  check_reduce_non_distributed(destination);
  if (single_replica(*state_))
    return mirrored<tensor>{{value}}; // TF: one device broadcasts to itself
  return state_->ops->broadcast(value, destination);
}

const std::vector<device_spec>& strategy_extended::worker_devices() const {
  if (state_->kind == strategy_kind::default_strategy)
    throw context_error("worker_devices() method unsupported by default_strategy.");
  return state_->devices;
}

const std::vector<device_spec>& strategy_extended::parameter_devices() const {
  if (state_->kind == strategy_kind::default_strategy)
    throw context_error("parameter_devices() method unsupported by default_strategy.");
  return state_->devices;
}

// Single-process strategies: in-graph, every worker initialises, saves and
// writes summaries (TF's Mirrored/OneDevice/default values).
bool strategy_extended::experimental_between_graph() const noexcept {
  return false;
}

bool strategy_extended::experimental_should_init() const noexcept {
  return true;
}

bool strategy_extended::should_checkpoint() const noexcept {
  return true;
}

bool strategy_extended::should_save_summary() const noexcept {
  return true;
}

cross_device_ops& strategy_extended::cross_device_ops() const {
  return *state_->ops;
}

std::string strategy_extended::collective_flight_record() const {
  const auto& group = state_->replica_collectives;
  return group ? group->dump() : std::string{};
}

std::chrono::milliseconds strategy_extended::timeout() const noexcept {
  return state_->timeout;
}

} // namespace lockstep
