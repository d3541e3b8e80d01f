#pragma once

// How a strategy numbers its calls and their collectives, in one place.
//
// Calls. The strategy actor numbers every replica dispatch (a run, a
// multi-step loop) 1, 2, ... as it starts them; a run nested in a merge
// function takes the next number. Replicas echo the number in their
// replies (replica_result, merge_request) and the strategy actor in its
// (merge_reply, abort_message), so a late message of a call that timed out
// is recognised and dropped.
//
// Collectives. The replica collectives of call c are numbered from
// first_collective(c) up, so every call starts above all earlier ones (a
// replica's numbers only rise: replica_context::begin_collectives), and
// when the latest call c fails, cancelling every collective below
// first_collective(c + 1) unwinds the replicas waiting in its collectives,
// nested calls' included, without touching any later call's.

#include <cstdint>

namespace lockstep::detail {

/// Collectives a call may issue: 2^20.
inline constexpr unsigned collectives_per_call_bits = 20;

/// The first sequence number of call `call`'s replica collectives.
constexpr std::uint64_t first_collective(std::uint64_t call) noexcept {
  return call << collectives_per_call_bits;
}

} // namespace lockstep::detail
