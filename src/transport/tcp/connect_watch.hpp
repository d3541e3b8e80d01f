#pragma once

// What the connecting of the workers' data connections (connect_ring,
// connect_mesh) watches beside its own waits: connections whose end (or a
// cancellation) means that the connections will never all form, so that
// a wait ends at once instead of at its deadline.

#include <cstddef>
#include <functional>
#include <vector>

#include <poll.h>

#include "transport/tcp/socket_io.hpp"

namespace lockstep::detail {

/// What else connect_ring and connect_mesh watch while they wait.
struct ring_watch {
  /// Polled for POLLIN beside each of the connecting's own waits.
  std::vector<pollfd> entries;
  /// Called with the index of an entry that became ready: throws to end
  /// the connecting, or returns whether to keep watching that entry
  /// (false: it carries news that is no end, such as a peer that went
  /// ahead).
  std::function<bool(std::size_t)> ready;
};

/// Waits until `own` is ready (true) or the deadline passes (false),
/// handing each watched entry that becomes ready meanwhile to the watch
/// (an entry it stops watching gets fd -1). An `own` of fd -1 only waits
/// (and watches).
bool wait_watching(pollfd own, io_clock::time_point deadline, ring_watch& watch);

} // namespace lockstep::detail
