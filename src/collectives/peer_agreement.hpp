#pragma once

// peer_agreement: the ring's agreement (ring_collectives.hpp, ring_agree)
// for the algorithms that talk to any rank, in log2 steps instead of
// world - 1. The same records (ring_records.hpp: each rank's fingerprint,
// or the failure it passes on) end up on every rank, by recursive
// doubling over the power-of-two core (power_of_two_core.hpp):
//
//   fold in   a folded-out rank r sends its frame to r + 1 (1 step)
//   core      in step k (mask m = 2^k, k = 0 .. log2(core) - 1) virtual
//             rank v swaps every frame it holds (those of the ranks that
//             virtual ranks v & ~(m-1) .. + m - 1 stand for) with
//             virtual rank v ^ m, all in one outer frame (one message)
//   fold out  rank r + 1 sends every rank's frame back to r, in one outer
//             frame (1 step)
//
// log2(core) steps on a power of two, log2(core) + 2 otherwise. Then every
// rank holds every rank's frame and records.check() throws the same
// error on every rank (the lowest failing rank's, or the mismatch naming
// the ranks), as ring_agree does. Deadlines are the link's; a closed link
// or a silent peer throws link_closed or link_deadline_passed naming it.

#include <cstdint>
#include <exception>
#include <span>

#include "collectives/collective_fingerprint.hpp"
#include "collectives/ring_records.hpp"
#include "transport/link.hpp"

namespace lockstep::detail {

/// ring_agree (ring_collectives.hpp) by recursive doubling: returns when
/// every rank issued `mine` and none passed a failure on, else throws on
/// every rank what ring_agree throws. `records` are kept by the caller
/// between collectives (the same type as the ring's).
void peer_agree(link& group, ring_records& records, const collective_fingerprint& mine,
                const std::exception_ptr& failure, link::time_point deadline);

/// peer_agree with `payload` in this rank's record (at most
/// ring_records' payload limit): once it returns, records.payload(r) is
/// rank r's, on every rank (the all-reduce's gather path).
void peer_agree(link& group, ring_records& records, const collective_fingerprint& mine,
                const std::exception_ptr& failure, std::span<const std::uint8_t> payload,
                link::time_point deadline);

} // namespace lockstep::detail
