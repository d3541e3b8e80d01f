#pragma once

// cancel_joins() (lockstep/multi_worker_mirrored_strategy.hpp), as the
// waits of a join see it: a flag, and an eventfd that becomes readable at
// the same moment, so a wait in poll(2) that lists it ends at once. Both
// are set from a signal handler: an atomic store and a write(2).

#include <poll.h>

#include <string>

namespace lockstep::detail {

/// What lockstep::cancel_joins() does: an atomic store, then a write(2) to
/// the eventfd. Safe in a signal handler.
void cancel_joins_now() noexcept;

/// True once cancel_joins() was called.
bool joins_cancelled() noexcept;

/// An entry for a poll set that becomes readable once cancel_joins() was
/// called (fd -1, which poll skips, if the eventfd could not be made: the
/// waits then see the flag when their slice ends).
pollfd join_cancel_entry() noexcept;

/// Throws cancelled_error ("`what` was cancelled") once cancel_joins() was
/// called.
void throw_if_joins_cancelled(const std::string& what);

} // namespace lockstep::detail
