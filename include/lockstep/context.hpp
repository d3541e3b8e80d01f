#pragma once

#include "lockstep/replica_context.hpp"
#include "lockstep/strategy.hpp"

namespace lockstep {

/// The thread's current strategy: the one whose scope or replica function
/// the thread is in, else the default strategy (one replica, no threads).
strategy get_strategy();

/// True unless the current strategy is the default strategy.
bool has_strategy();

/// The thread's replica context: inside `run`, that replica's; outside any
/// strategy, the default strategy's; nullptr in cross-replica context.
replica_context* get_replica_context();

/// The strategy whose cross-replica context the thread is in (inside
/// `scope()` or a `merge_call` function), else nullopt.
std::optional<strategy> get_cross_replica_context();

/// True inside `scope()` and inside a `merge_call` function.
bool in_cross_replica_context();

} // namespace lockstep
