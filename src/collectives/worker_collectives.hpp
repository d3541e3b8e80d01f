#pragma once

// worker_collectives: a collective between workers by the algorithm a
// call chose (algorithm_choice.hpp), over the links the workers hold: the
// ring's (tcp_link: next and previous rank) and, where the workers
// connected one, the mesh (a link to every rank). The ring agrees and
// moves its data around the ring, as it always did (its small all-reduce
// in the agreement's records); the other algorithms agree by recursive
// doubling over the mesh (peer_agree; recursive doubling's small
// all-reduce rides in it) and move their data over the mesh. The
// fingerprint names the algorithm, so ranks whose non-ring choices differ
// are told in the agreement; a rank on the ring and one off it do not meet
// there, and the collective ends at its deadline (every rank must pass the
// same per-call algorithm). Without a mesh only the ring runs. Every
// function is called by every rank of the group with the same algorithm;
// each throws the same error on every rank when the ranks disagree, and
// the links' errors otherwise.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>

#include "collectives/algorithm_choice.hpp"
#include "collectives/collective_fingerprint.hpp"
#include "collectives/ring_records.hpp"
#include "lockstep/dtype.hpp"
#include "lockstep/reduce_op.hpp"
#include "transport/link.hpp"

namespace lockstep::detail {

struct worker_links {
  link& ring;          ///< the ring's: the next and the previous rank
  link* mesh = nullptr; ///< any rank; null: none
};

/// Reduces `data` (elements of `type`) in place by `a` (ring,
/// recursive_doubling or halving_doubling; without a mesh, the ring).
void worker_all_reduce(algorithm a, const worker_links& links, ring_records& records,
                       const collective_fingerprint& mine, const std::exception_ptr& failure,
                       reduce_op op, dtype type, std::span<std::uint8_t> data,
                       link::time_point deadline);

/// `data` holds world blocks of equal size, block `rank` this rank's; the
/// others are filled by `a` (ring or recursive_doubling).
void worker_all_gather(algorithm a, const worker_links& links, ring_records& records,
                       const collective_fingerprint& mine, const std::exception_ptr& failure,
                       std::span<std::uint8_t> data, link::time_point deadline);

/// Every rank's `buffers` receive rank `root`'s, by `a` (ring or
/// binomial_tree), one buffer after another.
void worker_broadcast(algorithm a, const worker_links& links, ring_records& records,
                      const collective_fingerprint& mine, const std::exception_ptr& failure,
                      std::size_t root, std::span<const std::span<std::uint8_t>> buffers,
                      link::time_point deadline);

} // namespace lockstep::detail
