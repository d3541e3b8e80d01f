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
//
// Without the variable, each fault_point is one predictable branch.

#include <string_view>

namespace lockstep::detail {

/// Acts on LOCKSTEP_FAULT when it names `phase` (read once, on the first
/// call); value_error naming the variable when it is malformed.
void fault_point(std::string_view phase);

} // namespace lockstep::detail
