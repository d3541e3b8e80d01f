// The default strategy, the API's context functions over the thread modes
// (replication/thread_mode.cpp), and the context checks TF performs
// before cross-replica and replica-only operations.

#include "lockstep/context.hpp"

#include "strategies/inline_executor.hpp"
#include "strategies/public_state.hpp"
#include "replication/thread_mode.hpp"

#include "lockstep/error.hpp"
#include "lockstep/runtime_options.hpp"

#include <vector>

namespace lockstep::detail {

namespace {

std::shared_ptr<strategy_state> make_default_strategy() {
  auto state = public_strategy_state::create("default_strategy", {}, false,
                                             std::make_shared<reduction_to_one_device>(),
                                             get_runtime_options().timeout, false);
  state->executor = std::make_unique<inline_executor>(*state, std::nullopt);
  return state;
}

[[noreturn]] void throw_wrong_strategy_scope(const strategy_state& wanted) {
  if (!has_strategy())
    throw context_error("Need to be inside `strategy.scope()` for "
                        + wanted.name());
  throw context_error("Mixing different lockstep::strategy objects: "
                      + current_mode()->strategy->name() + " is not "
                      + wanted.name());
}

} // namespace

strategy_state& default_strategy_state() {
  // Intentionally never destroyed: threads may consult it during exit.
  static auto* state = new std::shared_ptr<strategy_state>(make_default_strategy());
  return **state;
}

replica_context& default_replica_context() {
  return static_cast<inline_executor&>(*default_strategy_state().executor)
    .context();
}

void require_cross_replica_or_default_context(const strategy_state& state) {
  const auto* mode = current_mode();
  if (mode == nullptr)
    return;
  if (mode->strategy == &state && mode->replica == nullptr)
    return;
  if (mode->strategy != &state)
    throw_wrong_strategy_scope(state);
  throw context_error("Method requires being in cross-replica context, use "
                      "get_replica_context()->merge_call()");
}

void require_replica_context(const replica_context& ctx) {
  const auto* mode = current_mode();
  const auto* current = mode == nullptr ? &default_replica_context() : mode->replica;
  if (current == &ctx)
    return;
  if (current == nullptr)
    throw context_error("Need to be inside `call_for_each_replica()`");
  if (&current->state() == &ctx.state())
    throw context_error("Mismatching replica_context.");
  throw context_error("Mismatching lockstep::strategy objects: "
                      + current->state().name() + " is not "
                      + ctx.state().name() + ".");
}

} // namespace lockstep::detail

namespace lockstep {

using detail::current_mode;

strategy get_strategy() {
  const auto* mode = current_mode();
  auto& state = mode == nullptr ? detail::default_strategy_state() : *mode->strategy;
  return strategy_handle(state);
}

bool has_strategy() {
  const auto* mode = current_mode();
  return mode != nullptr && mode->strategy != &detail::default_strategy_state();
}

replica_context* get_replica_context() {
  const auto* mode = current_mode();
  return mode == nullptr ? &detail::default_replica_context() : mode->replica;
}

std::optional<strategy> get_cross_replica_context() {
  const auto* mode = current_mode();
  if (mode == nullptr || mode->replica != nullptr)
    return std::nullopt;
  return detail::strategy_handle(*mode->strategy);
}

bool in_cross_replica_context() {
  const auto* mode = current_mode();
  return mode != nullptr && mode->replica == nullptr;
}

} // namespace lockstep
