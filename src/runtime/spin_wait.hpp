#pragma once

// How long a thread that waits for work may poll before it sleeps. On these
// machines a sleeping thread takes tens of microseconds to wake, so polling
// pays, but only while every busy thread has a CPU of its own: polling on a
// shared CPU steals it from the thread that would produce the work.

#include <chrono>
#include <cstddef>

namespace lockstep::detail {

/// CPUs this process may run on (its affinity mask, e.g. a container's cpuset).
std::size_t usable_cpus();

/// runtime_options::spin_wait when `threads` threads fit on the usable CPUs,
/// else 0 (sleep at once).
std::chrono::microseconds spin_budget(std::size_t threads);

/// For waits on another process (the ring between workers): spin_budget of
/// the threads runnable on this host right now, every process's (the
/// kernel's count in /proc/loadavg, this thread included); 0 when unknown.
std::chrono::microseconds spin_budget_on_this_host();

} // namespace lockstep::detail
