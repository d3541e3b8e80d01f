#pragma once

// Which workers of a cluster share memory, and their shared segments: the
// node asks once, right after the ring between the workers
// connected, over that ring (authenticated). Sharing is probed, not
// guessed from host names: workers in separate network namespaces or
// containers of one machine may share a name and not /dev/shm, or the
// reverse. Each worker creates a probe object holding a random nonce, the
// workers exchange the probes' names and nonces, each opens the others'
// and reads the nonce, and they exchange what each could open; every
// worker decides from the same tables, so all decide alike. Workers that
// share memory with each other, and with no one else, are a host; each
// host's first worker (its leader) creates its group's segment.

#include "collectives/hierarchical_communicator.hpp"
#include "communicators/host_shm_communicator.hpp"
#include "communicators/tcp_ring_communicator.hpp"

#include <chrono>
#include <memory>
#include <string>

namespace lockstep::detail {

/// Which workers share memory: the hosts, as the probe found them.
struct host_plan {
  /// The collectives between this host's workers, one rank each in
  /// `hosts.groups[host]`'s order: their shared-memory group, or a group
  /// of one where this worker shares memory with no other. Null when the
  /// ring carries every collective: no two workers share memory, a worker
  /// asks for TCP, or the sharing is not a partition into hosts.
  std::shared_ptr<communicator> local;
  /// The shared-memory group in `local`, if it is one (to break it when a
  /// worker is lost).
  std::shared_ptr<host_shm_communicator> shared;
  /// The workers of each host in rank order; the first of each leads it.
  /// One host: `local` carries every collective between the workers. More:
  /// a hierarchical_communicator over `local` and a ring of the leaders.
  rank_groups hosts;
  /// This worker's host: its index in `hosts.groups`.
  std::size_t host = 0;
};

/// Probes which of the `world` workers share memory (file comment) and
/// maps each host's group segment, unless a worker asks for TCP
/// (`wants_tcp`: LOCKSTEP_TRANSPORT=tcp or the strategy's option). Every
/// worker gets the same plan but its own `local` and `host`. Every
/// segment's name is removed once every worker mapped it, so none
/// outlives the workers; the names start with /lockstep-<job>-, the job
/// id's first 16 letters, digits, '-' and '_' (segment_prefix). Throws
/// what the ring's collectives throw (each takes at most `timeout`).
host_plan join_host_group(tcp_ring_communicator& ring, std::size_t rank, std::size_t world,
                          const std::string& job_id, bool wants_tcp,
                          std::chrono::milliseconds timeout);

/// "<job>-": what the names of job `job_id`'s segments start with, after
/// "/lockstep-".
std::string segment_prefix(const std::string& job_id);

} // namespace lockstep::detail
