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

/// This process's worker rank and generation, for LOCKSTEP_FAULT_RANK and
/// LOCKSTEP_FAULT_GENERATION; until it is called, a fault that names
/// either never fires.
void set_fault_worker(std::size_t rank, std::uint64_t generation);

} // namespace lockstep::detail
