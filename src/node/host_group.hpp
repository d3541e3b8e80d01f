#pragma once

// Whether the workers of a cluster share memory, and if so their shared
// segment: the node asks once, right after the ring between the workers
// connected, over that ring (authenticated). Sharing is probed, not
// guessed from host names: workers in separate network namespaces or
// containers of one machine may share a name and not /dev/shm, or the
// reverse. Each worker creates a probe object holding a random nonce, the
// workers exchange the probes' names and nonces, each opens the others'
// and reads the nonce, and they exchange what each could open; every
// worker decides from the same tables, so all decide alike.

#include "communicators/host_shm_communicator.hpp"
#include "communicators/tcp_ring_communicator.hpp"

#include <chrono>
#include <memory>
#include <string>

namespace lockstep::detail {

/// The shared-memory group of all `world` workers (one rank each, rank =
/// worker) when every worker shares memory with every other and none asks
/// for TCP (`wants_tcp`: LOCKSTEP_TRANSPORT=tcp or the strategy's option);
/// else null, and the ring carries the collectives. Workers that share
/// memory only in groups (several hosts) also get null: the hierarchical
/// form (a group per host, the ring between their leaders) is not built
/// yet. Every segment's name is removed once every worker mapped it, so
/// none outlives the workers; the names start with /lockstep-<job>-, the
/// job id's first 16 letters, digits, '-' and '_' (segment_prefix). Throws
/// what the ring's collectives throw (each takes at most `timeout`).
std::shared_ptr<host_shm_communicator> join_host_group(tcp_ring_communicator& ring,
                                                       std::size_t rank, std::size_t world,
                                                       const std::string& job_id, bool wants_tcp,
                                                       std::chrono::milliseconds timeout);

/// "<job>-": what the names of job `job_id`'s segments start with, after
/// "/lockstep-".
std::string segment_prefix(const std::string& job_id);

} // namespace lockstep::detail
