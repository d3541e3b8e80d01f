#pragma once

// How long a thread that waits for work may poll before it sleeps. On these
// machines a sleeping thread takes tens of microseconds to wake, so polling
// pays, but only while every busy thread has a CPU of its own: polling on a
// shared CPU steals it from the thread that would produce the work, unless
// the poller yields between polls (host_spin, for waits on other processes).

#include <chrono>
#include <cstddef>

namespace lockstep::detail {

/// CPUs this process may run on (its affinity mask, e.g. a container's cpuset).
std::size_t usable_cpus();

/// runtime_options::spin_wait when `threads` threads fit on the usable CPUs,
/// else 0 (sleep at once).
std::chrono::microseconds spin_budget(std::size_t threads);

/// How a thread that waits on another process (the ring and the mesh
/// between workers) polls before it sleeps.
struct host_spin {
  std::chrono::microseconds budget{0};
  /// Yield the CPU between polls: more threads are runnable on this host
  /// than it has CPUs, and a bare spin would take a CPU from the process
  /// that produces the data (Open MPI yields when oversubscribed too).
  bool yield = false;
};

/// runtime_options::spin_wait, yielding when the threads runnable on this
/// host right now, every process's (the kernel's count in /proc/loadavg,
/// this thread included), outnumber its usable CPUs; no spin when unknown.
host_spin spin_on_this_host();

/// spin_on_this_host's rule for `runnable` threads.
host_spin spin_for_runnable(std::size_t runnable, std::chrono::microseconds spin_wait);

} // namespace lockstep::detail
