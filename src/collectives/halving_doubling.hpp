#pragma once

// Recursive halving-doubling (Rabenseifner's all-reduce), written once
// against a link (transport/link.hpp) that reaches any rank: the
// all-reduce for medium and large messages, with the ring's bytes on the
// busiest link but log2 steps instead of world - 1 (docs/algorithms.md).
// Any world size: the ranks beyond the largest power of two fold into a
// core of that size and take the result back (power_of_two_core.hpp).
//
// The buffer's E elements are cut into `core` segments (segment s:
// elements s*E/core .. (s+1)*E/core - 1; some are empty when E < core).
//   fold in         a folded-out rank r sends its buffer to r + 1, which
//                   combines it as x_r op x_{r+1}
//   reduce-scatter  by recursive halving: in step k (mask m = core/2,
//                   core/4, .. 1) virtual rank v holds segments
//                   v & ~(2m-1) .. + 2m - 1; it keeps the lower half when
//                   v & m is 0, else the upper one, sends the other half
//                   to virtual rank v ^ m and combines what it receives
//                   from it into the half it keeps, the lower ranks'
//                   operand first. At the end v holds segment v, reduced.
//   all-gather      by recursive doubling: in step k (m = 1, 2, ..
//                   core/2) v swaps segments v & ~(m-1) .. + m - 1 for
//                   its partner's (v ^ m)
//   fold out        rank r + 1 sends the result back to r
// 2 log2(core) steps (+2 off a power of two); 2 (core - 1)/core * S bytes
// on a core rank's link for S bytes (+2S off a power of two). Off a power
// of two a call of link::paced_from() bytes or more paces its
// reduce-scatter (core_pacing.hpp): the same bits, one word more a step.
//
// Order of combination: each element is a tree over the ranks in which
// the first combination joins virtual ranks that are core/2 apart, the
// next core/4 apart, .. the last neighbours, each with the lower ranks'
// operand first; with world = 4: (x0 op x2) op (x1 op x3). Off a power
// of two the leaves are the fold's pairs (x_{2i} op x_{2i+1}) and the ranks
// beyond them. Each segment is reduced on one rank and copied to the
// others, so every rank holds the same bits; integers give the ring's
// bits. float16 and bfloat16 are combined in float32 and rounded once at
// the end; MEAN is a SUM divided once by the world size.
//
// The agreed form first agrees as the ring does (peer_agreement.hpp), so
// every rank throws the same error on a mismatch or a passed-on failure
// before any data moves. Deadlines are the link's; a closed link or a
// silent peer throws link_closed or link_deadline_passed naming it.

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
/// (elements of `type`) across the group in place by recursive
/// halving-doubling. Every rank throws the same error when the ranks
/// disagree, and `data` is then unspecified.
void halving_doubling_all_reduce(link& group, ring_records& records,
                                 const collective_fingerprint& mine,
                                 const std::exception_ptr& failure, reduce_op op, dtype type,
                                 std::span<std::uint8_t> data, link::time_point deadline);

/// Reduces `data` in place by recursive halving-doubling, without an
/// agreement: the caller's ranks know that they issued the same.
void halving_doubling_all_reduce(link& group, reduce_op op, dtype type,
                                 std::span<std::uint8_t> data, link::time_point deadline);

} // namespace lockstep::detail
