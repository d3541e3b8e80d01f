#pragma once

// Recursive doubling, written once against a link (transport/link.hpp)
// that reaches any rank of the group: the algorithms for small messages,
// whose cost is their number of steps (docs/algorithms.md). Any world
// size: the ranks beyond the largest power of two fold into a core of
// that size and take the result back (power_of_two_core.hpp).
//
// All-reduce (Thakur, Rabenseifner and Gropp 2005, §4.1), S bytes:
//   fold in   a folded-out rank r sends its buffer to r + 1, which
//             combines it as x_r op x_{r+1}
//   core      in step k (mask m = 2^k) virtual rank v swaps its whole
//             buffer with virtual rank v ^ m and combines the two,
//             the lower ranks' operand first
//   fold out  rank r + 1 sends the result back to r
// log2(core) steps (+2 off a power of two), S bytes each: log2(core) * S
// on the busiest link (+2S).
//
// Order of combination: a balanced tree in rank order. With world = 8,
// every element is ((x0 op x1) op (x2 op x3)) op ((x4 op x5) op (x6 op x7));
// off a power of two the leaves of the core's tree are the fold's pairs
// (x_{2i} op x_{2i+1}) and the ranks beyond them. Both partners of a step
// combine the same two operands in the same order, so every rank holds the
// same bits after every step; integers give the ring's bits, since their
// ops are associative and commutative. float16 and bfloat16 are combined
// in float32 and rounded once at the end; MEAN is a SUM divided once by
// the world size (byte_reduction.hpp).
//
// All-gather: the same steps, swapping blocks instead of combining: in
// step k virtual rank v sends the blocks of the ranks that virtual ranks
// v & ~(m-1) .. + m - 1 stand for (consecutive) and receives its
// partner's; the fold sends rank r's block in and the whole buffer back.
// log2(core) steps (+2), (world - 1) / world * S bytes on a core rank's
// link for S bytes in all (+S/world in, S out off a power of two).
//
// The agreed all-reduce first agrees as the ring does, by recursive
// doubling of the same records (peer_agreement.hpp), so every rank throws
// the same error on a mismatch or a passed-on failure before any data
// moves. At the sizes where the ring's all-reduce takes its all-gather
// path (all_reduce_gathers) the data rides in the records instead: one
// pass of log2(core) steps (+2), after which every rank combines the
// buffers in rank order, the ring's bits (ring_collectives.hpp). Off a
// power of two a call of link::paced_from() bytes or more paces its steps
// (core_pacing.hpp): the same bits, one word more. Deadlines are the
// link's; a closed link or a silent peer throws link_closed or
// link_deadline_passed naming it, and the caller closes its link so that
// the others fail at once.

#include <cstddef>
#include <exception>
#include <span>

#include "collectives/collective_fingerprint.hpp"
#include "collectives/ring_records.hpp"
#include "lockstep/dtype.hpp"
#include "lockstep/reduce_op.hpp"
#include "transport/link.hpp"

namespace lockstep::detail {

/// Agrees on `mine` (with `failure`, as peer_agree) and reduces `data`
/// (elements of `type`) across the group in place by recursive doubling.
/// Every rank throws the same error when the ranks disagree, and `data`
/// is then unspecified.
void recursive_doubling_all_reduce(link& group, ring_records& records,
                                   const collective_fingerprint& mine,
                                   const std::exception_ptr& failure, reduce_op op, dtype type,
                                   std::span<std::uint8_t> data, link::time_point deadline);

/// Reduces `data` in place by recursive doubling, without an agreement:
/// the caller's ranks know that they issued the same.
void recursive_doubling_all_reduce(link& group, reduce_op op, dtype type,
                                   std::span<std::uint8_t> data, link::time_point deadline);

/// `data` holds world blocks of equal size; block `rank` is this rank's
/// and the others are filled from their ranks, by recursive doubling.
void recursive_doubling_all_gather(link& group, std::span<std::uint8_t> data,
                                   link::time_point deadline);

} // namespace lockstep::detail
