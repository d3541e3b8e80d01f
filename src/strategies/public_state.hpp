#pragma once

// public_strategy_state: a strategy's state (src/replication/strategy_state.hpp)
// with the public faces that only the strategy API knows how to make: the
// strategy_extended its handles return, the replica contexts its executors
// hand to replica functions, and the library's ways to the handles'
// private constructors. Every strategy_state is one: the strategies make
// them here (public_strategy_state::create), so the layers below the API
// hold a strategy_state without including the API.

#include "lockstep/replica_context.hpp"
#include "lockstep/strategy.hpp"

#include "replication/strategy_state.hpp"

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace lockstep::detail {

/// The library's way to a strategy handle's private constructor and state
/// (public signatures name no detail type).
struct strategy_access {
  static lockstep::strategy make(std::shared_ptr<strategy_state> state) noexcept {
    return lockstep::strategy{std::move(state)};
  }
  static strategy_state& state(const lockstep::strategy& s) noexcept { return s.state(); }
};

/// The library's way to replica_context's private constructor: the
/// executors make one context per replica.
struct replica_context_access {
  static replica_context make(strategy_state& state, std::size_t replica_id,
                              merge_channel& channel) noexcept {
    return replica_context{state, replica_id, channel};
  }
  static std::shared_ptr<replica_context> share(strategy_state& state, std::size_t replica_id,
                                                merge_channel& channel) {
    return std::shared_ptr<replica_context>(new replica_context{state, replica_id, channel});
  }
  /// The replica's index among its worker's replicas.
  static std::size_t local_id(const replica_context& ctx) noexcept { return ctx.replica_id_; }
};

/// A strategy's state with its public faces.
struct public_strategy_state final : strategy_state {
  /// A new strategy's shared state (strategy_state::share says how it
  /// ends); `records`: whether it holds the timeline's recording.
  static std::shared_ptr<strategy_state> create(std::string name, detail::topology topology,
                                                bool replicated,
                                                std::shared_ptr<cross_device_ops> ops,
                                                std::chrono::milliseconds timeout,
                                                bool records = true);

  using strategy_state::strategy_state;

  std::shared_ptr<replica_context> make_replica_context(std::size_t replica,
                                                        merge_channel& channel) override {
    return replica_context_access::share(*this, replica, channel);
  }

  void merge_write(const variable& whole, std::optional<reduce_op> reduce, const tensor& value,
                   merged_write post) override;

  /// What strategy::extended() returns.
  strategy_extended extended{*this};
};

/// `state`'s public face: every strategy_state is a public_strategy_state.
inline public_strategy_state& public_state(strategy_state& state) noexcept {
  return static_cast<public_strategy_state&>(state);
}
inline const public_strategy_state& public_state(const strategy_state& state) noexcept {
  return static_cast<const public_strategy_state&>(state);
}

/// TF's TPU rule inside the replicated computation: on the pod strategy
/// only SUM and MEAN reduce there. TF raises NotImplementedError, a Python
/// RuntimeError; lockstep's RuntimeError is context_error (the op is refused
/// in this context, inside `run`: outside, it reduces). Callers check that
/// they are inside `run` (strategy.cpp, replica_context.cpp, multi_step.cpp).
void check_pod_reduce_op(const strategy_state& state, reduce_op op);

} // namespace lockstep::detail
