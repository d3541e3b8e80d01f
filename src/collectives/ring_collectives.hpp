#pragma once

// Collectives over a ring of ranks, written once against a link
// (transport/link.hpp): rank r sends only to rank r + 1 and receives only
// from rank r - 1 (mod world), so any link runs them, the TCP ring between
// workers (transport/tcp/tcp_link.hpp, one rank per worker: the
// cross-worker stage of a hierarchical collective, whose local replicas
// reduce in process first) as well as the tests' in-memory link.
//
// Every collective starts by agreeing on what is issued: each rank's
// record (ring_records.hpp: its fingerprint, or the failure it passes on)
// goes around the ring (world - 1 hops), so every rank holds every rank's,
// and ranks that issued different collectives all throw the same error
// naming the ranks and what each issued (mismatch_error) before any data
// counts. An all-reduce on the all-gather path (below) sends its data in
// the same records: one pass of world - 1 hops in all, the data used only
// once every fingerprint matched. Larger collectives agree first, then
// move their data.
//
// All-reduce (reference/network.md §1.1): the buffer's E elements are cut
// into `world` segments. Reduce-scatter: in step t (0 .. world-2) rank r
// sends segment (r - t - 1) mod world to the next rank and receives
// segment (r - t - 2) mod world from the previous one, combining it into
// its own; after world - 1 steps rank r holds segment r reduced over all
// ranks. All-gather: in step t rank r sends segment (r - t) mod world and
// receives (r - t - 1) mod world into place; its first step runs inside
// the reduce-scatter's last, chunk by chunk, each chunk of segment r sent
// on as soon as it is final (while it is in cache). Each segment is
// summed in one fixed ring order, which depends only on the world size
// and the segment, never on timing, and every rank receives the same bits
// of every segment. Each element crosses each link 2(world - 1)/world
// times.
//
// Small buffers take the all-gather path: when (world - 1) * bytes is at
// most small_all_reduce_bytes, the ranks pass whole buffers around the
// ring (world - 1 hops instead of 2(world - 1)) and each combines all of
// them in rank order, the same bits everywhere.
//
// float16 and bfloat16 are combined in float32 and rounded once at the
// end, as every lockstep reduction does; MEAN is a SUM divided once by
// the world size.
//
// Deadlines are the link's time points (link::now()). A closed link or a
// silent neighbour fails the collective on this rank with the link's
// link_closed or link_deadline_passed; the caller then closes the link, so
// the failure travels around the ring at once.
//
// Nothing is allocated per chunk: the reduce-scatter receives through a
// scratch block that each thread keeps between calls, and the agreements'
// frames live in the caller's ring_records.

#include <cstddef>
#include <exception>
#include <span>

#include "collectives/collective_fingerprint.hpp"
#include "collectives/ring_records.hpp"
#include "lockstep/dtype.hpp"
#include "lockstep/reduce_op.hpp"
#include "transport/link.hpp"

namespace lockstep::detail {

/// The largest (world - 1) * bytes that takes the all-gather path.
inline constexpr std::size_t small_all_reduce_bytes = 64 * 1024;

/// Whether an all-reduce of `bytes` of `element`s among `world` ranks
/// takes the all-gather path: every rank's buffer travels in the
/// agreement's records and each rank combines them in rank order. The
/// recursive-doubling all-reduce takes the same path for the same sizes
/// (recursive_doubling.hpp), so both give the same bits there.
bool all_reduce_gathers(std::size_t world, std::size_t bytes, dtype element);

/// The all-gather path's reduction, once records.check() returned: `data`
/// becomes rank 0's payload op rank 1's .. op rank world - 1's, combined
/// in that order (`data` holds this rank's, `rank`'s payload).
void reduce_gathered(const ring_records& records, std::size_t rank, std::size_t world,
                     reduce_op op, dtype type, std::span<std::uint8_t> data);

/// The reduce-scatter combines what it receives in chunks of this many
/// bytes (a multiple of every element size).
inline constexpr std::size_t ring_chunk_bytes = 256 * 1024;

/// Passes fingerprints around the ring in `records` (kept by the caller
/// between collectives); throws mismatch_error's error when any rank's
/// differs from this rank's. A rank that cannot contribute passes its
/// `failure` along instead: then every rank throws the failure of the
/// lowest failing rank (its lockstep type and message), and the ring stays
/// usable for the next collective.
void ring_agree(link& ring, ring_records& records, const collective_fingerprint& mine,
                const std::exception_ptr& failure, link::time_point deadline);

/// ring_agree with records of its own, for a single collective.
void ring_agree(link& ring, const collective_fingerprint& mine,
                link::time_point deadline, const std::exception_ptr& failure = nullptr);

/// Agrees on `mine` (with `failure`, as ring_agree) and reduces `data`
/// (elements of `type`) across the ring in place: on the all-gather path
/// in the agreement's own pass, else after it. Every rank throws the same
/// error when the ranks disagree, and `data` is then unspecified.
void ring_all_reduce(link& ring, ring_records& records, const collective_fingerprint& mine,
                     const std::exception_ptr& failure, reduce_op op, dtype type,
                     std::span<std::uint8_t> data, link::time_point deadline);

/// Reduces `data` (elements of `type`) across the ring in place, without
/// an agreement: the caller's ranks know that they issued the same.
void ring_all_reduce(link& ring, reduce_op op, dtype type, std::span<std::uint8_t> data,
                     link::time_point deadline);

/// `data` holds world blocks of equal size; block `rank` is this rank's
/// and the others are filled from their ranks.
void ring_all_gather(link& ring, std::span<std::uint8_t> data,
                     link::time_point deadline);

/// Every rank's `data` receives rank `root`'s.
void ring_broadcast(link& ring, std::size_t root, std::span<std::uint8_t> data,
                    link::time_point deadline);

} // namespace lockstep::detail
