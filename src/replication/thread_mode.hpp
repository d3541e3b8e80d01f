#pragma once

// Per-thread modes as in TF: outside any strategy a thread is in the default
// replica context; `scope()` and merge functions push a cross-replica mode;
// a replica function runs in its replica's replica mode.

#include "lockstep/detail/replica_calls.hpp"

#include <cstddef>

namespace lockstep::detail {

struct strategy_state;

struct thread_mode {
  strategy_state* strategy;
  /// nullptr: cross-replica context of `strategy`.
  replica_context* replica;
  /// With `replica`: its index among this worker's replicas (whose copy of
  /// a variable is its own).
  std::size_t replica_index = 0;
};

/// Throws unless this thread may use `state`'s cross-replica API (also
/// declared in lockstep/strategy.hpp, whose templates check it; defined
/// with the default strategy, src/strategies/context.cpp).
void require_cross_replica_or_default_context(const strategy_state& state);

/// The innermost mode of this thread; nullptr in the default replica context.
const thread_mode* current_mode() noexcept;

void push_mode(thread_mode mode);
void pop_mode() noexcept;

/// Pushes a mode for its lifetime.
class mode_guard {
public:
  explicit mode_guard(thread_mode mode) { push_mode(mode); }
  ~mode_guard() { pop_mode(); }
  mode_guard(const mode_guard&) = delete;
  mode_guard& operator=(const mode_guard&) = delete;
};

/// TF's UpdateContext: set while an `update()` / `update_non_slot()`
/// function runs for copy `copy`; writes and reads of that strategy's
/// variables then touch copy `copy` alone.
struct update_context {
  const strategy_state* strategy;
  std::size_t copy;
};

/// The innermost update context of this thread; nullptr outside updates.
const update_context* current_update_context() noexcept;

/// Enters an update context (and the strategy's cross-replica mode, where
/// update functions run) for its lifetime.
class update_context_guard {
public:
  update_context_guard(strategy_state& strategy, std::size_t copy);
  ~update_context_guard();
  update_context_guard(const update_context_guard&) = delete;
  update_context_guard& operator=(const update_context_guard&) = delete;

private:
  const update_context* outer_;
  update_context context_;
  mode_guard mode_;
};

/// The default strategy's replica context (the default replica context).
replica_context& default_replica_context();

} // namespace lockstep::detail
