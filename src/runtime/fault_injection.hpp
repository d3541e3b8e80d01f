#pragma once

// A test hook for the failure tests of cross-worker collectives: with
//
//   LOCKSTEP_FAULT=<phase>:<kill|stop>[:<n>]
//
// in its environment, a process sends itself SIGKILL or SIGSTOP the n-th
// time (default 1) it reaches <phase> of a collective between workers:
//
//   agree           the start of every ring collective, before its
//                   fingerprint goes out (the collective's join)
//   reduce-scatter  after the first block of a ring all-reduce's
//                   reduce-scatter moved
//   all-gather      after the first block of an all-gather moved (on
//                   the small all-reduce path, the first record, which
//                   carries the data with the fingerprint)
//   fan-out         a worker's leader holding the cross-worker result,
//                   before its local replicas get it
//   ring-connect    joined, in the middle of connecting the ring (its
//                   hello sent to the next worker), not a collective
//
// Workers on shared memory (communicators/host_shm_communicator.hpp) reach
// the same phases: agree before their record goes out; all-gather with the
// small all-reduce's record written, or after a large one's first chunk
// came back; reduce-scatter after their slice of a large all-reduce's
// first chunk.
//
// Workers over MPI (communicators/mpi_communicator.hpp): agree before
// their record goes out; reduce-scatter with an all-reduce's or a
// reduce-scatter's MPI call posted (in flight); all-gather with an
// all-gather's posted.
//
// The algorithms that talk to any rank (collectives/recursive_doubling.hpp,
// halving_doubling.hpp, peer_agreement.hpp): agree before their record
// goes out; reduce-scatter after an all-reduce's first exchange of data;
// all-gather after an all-gather's first (or, in halving-doubling, its
// all-gather half's first) exchange.
//
// With LOCKSTEP_FAULT_RANK=<r> and/or LOCKSTEP_FAULT_GENERATION=<g> as
// well, only the worker of that rank and generation counts and acts (so a
// launcher may pass one environment to every worker and every restart);
// the multi-worker strategy tells the hook who this process is.
//
// Without the variable, each fault_point is one predictable branch.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lockstep::detail {

/// Acts on LOCKSTEP_FAULT when it names `phase` (read once, on the first
/// call); value_error naming the variable when it is malformed.
void fault_point(std::string_view phase);

/// While one lives, this thread's fault points are not counted: the node's
/// own collectives at its start (the shared-memory probe) are not the
/// program's, which the tests' counts are about.
class faults_paused {
public:
  faults_paused() noexcept;
  ~faults_paused();
  faults_paused(const faults_paused&) = delete;
  faults_paused& operator=(const faults_paused&) = delete;
};

/// This process's worker rank and generation, for LOCKSTEP_FAULT_RANK and
/// LOCKSTEP_FAULT_GENERATION; until it is called, a fault that names
/// either never fires.
void set_fault_worker(std::size_t rank, std::uint64_t generation);

} // namespace lockstep::detail
