#pragma once

// Per-thread modes as in TF: outside any strategy a thread is in the default
// replica context; `scope()` and merge functions push a cross-replica mode;
// a replica function runs in its replica's replica mode.

#include "lockstep/replica_context.hpp"

namespace lockstep::detail {

struct strategy_state;

struct thread_mode {
  strategy_state* strategy;
  /// nullptr: cross-replica context of `strategy`.
  replica_context* replica;
};

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

/// The default strategy's replica context (the default replica context).
replica_context& default_replica_context();

} // namespace lockstep::detail
