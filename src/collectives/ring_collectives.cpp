#include "collectives/ring_collectives.hpp"

#include "collectives/byte_reduction.hpp"
#include "collectives/thread_scratch.hpp"
#include "runtime/fault_injection.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace lockstep::detail {

namespace {

/// The ranks this rank exchanges with on the ring.
struct neighbours {
  std::size_t next; // it sends to rank + 1
  std::size_t prev; // it receives from rank - 1

  explicit neighbours(const link& ring)
    : next((ring.rank() + 1) % ring.size()), prev((ring.rank() + ring.size() - 1) % ring.size()) {}
};

// -- reductions -----------------------------------------------------------------------

/// The all-gather path: every rank gets every rank's buffer and combines
/// them in rank order.
void all_reduce_by_gather(link& ring, reduce_op op, dtype type,
                          std::span<std::uint8_t> data, link::time_point deadline) {
  const auto world = ring.size();
  const auto size = data.size();
  if (size == 0) // nothing to move (and memcpy must not see a null buffer)
    return;
  bytes blocks(world * size);
  std::memcpy(blocks.data() + ring.rank() * size, data.data(), size);
  ring_all_gather(ring, blocks, deadline);
  std::memcpy(data.data(), blocks.data(), size);
  for (std::size_t r = 1; r < world; ++r)
    combine_bytes(op, type, data.data(), blocks.data() + r * size, size);
}

/// Reduce-scatter, then all-gather, over `world` segments. In the last
/// reduce-scatter step each chunk of this rank's segment is final once
/// combined, so it goes on to the next rank at once, as the all-gather's
/// first step, while it is still in cache; every rank's stream interleaves
/// the two steps chunk by chunk in the same order, so each rank knows what
/// comes next.
void all_reduce_by_ring(link& ring, reduce_op op, dtype type, std::span<std::uint8_t> data,
                        link::time_point deadline) {
  const auto world = ring.size();
  const neighbours peers(ring);
  const auto element = size_of(type);
  const auto elements = data.size() / element;
  const auto segment = [&](std::size_t s) {
    s %= world;
    const auto begin = s * elements / world * element;
    const auto end = (s + 1) * elements / world * element;
    return data.subspan(begin, end - begin);
  };
  const auto part = [](std::span<std::uint8_t> span, std::size_t at, std::size_t chunk) {
    return at < span.size() ? span.subspan(at, std::min(chunk, span.size() - at))
                            : span.subspan(0, 0);
  };
  // Received data is combined chunk by chunk through a scratch block that
  // stays in L2 (network.md §1.7); a segment-sized block would also be a
  // fresh mmap on every call beyond malloc's 32 MiB threshold, page faults
  // included (64 MiB all-reduces ran 16x slower than 32 MiB ones).
  const auto chunk = std::min(ring_chunk_bytes, (elements / world + 1) * element);
  auto* scratch = reinterpret_cast<std::uint8_t*>(thread_scratch(chunk));
  const auto rank = ring.rank() + world; // so that rank - t - 2 stays positive
  for (std::size_t t = 0; t + 1 < world; ++t) {
    const bool last = t + 2 == world;
    const auto out = segment(rank - t - 1);
    const auto mine = segment(rank - t - 2); // segment(rank) in the last step
    const auto gathered = segment(rank - 1); // the all-gather's first receive
    const auto chunks = std::max({out.size(), mine.size(), last ? gathered.size() : 0});
    for (std::size_t at = 0; at < chunks; at += chunk) {
      const auto received = part(mine, at, chunk);
      ring.exchange(peers.next, part(out, at, chunk), peers.prev,
                    std::span(scratch, received.size()), deadline);
      combine_bytes(op, type, received.data(), scratch, received.size());
      if (t == 0 && at == 0)
        fault_point("reduce-scatter");
      if (!last)
        continue;
      ring.exchange(peers.next, received, peers.prev, part(gathered, at, chunk), deadline);
      if (at == 0)
        fault_point("all-gather");
    }
  }
  for (std::size_t t = 1; t + 1 < world; ++t)
    ring.exchange(peers.next, segment(rank - t), peers.prev, segment(rank - t - 1), deadline);
}

/// Passes every rank's frame around the ring (world - 1 hops): in step t
/// rank r sends rank (r - t)'s frame and receives rank (r - t - 1)'s.
void pass_records(link& ring, ring_records& records, bool with_data,
                  link::time_point deadline) {
  const auto world = ring.size();
  const neighbours peers(ring);
  const auto rank = ring.rank() + world; // so that rank - t - 1 stays positive
  for (std::size_t t = 0; t + 1 < world; ++t) {
    ring.exchange_frame(peers.next, records.frame((rank - t) % world), peers.prev,
                        records.buffer((rank - t - 1) % world), ring_records::max_frame_bytes,
                        deadline);
    if (with_data && t == 0)
      fault_point("all-gather");
  }
}

/// What a collective agrees on before its data counts.
struct agreement {
  ring_records& records;
  const collective_fingerprint& mine;
  const std::exception_ptr& failure;
};

/// The all-gather path with the agreement folded in: every rank's frame
/// carries its data with its fingerprint, one pass in all; once every
/// fingerprint matched, each rank combines the buffers in rank order.
void agree_and_reduce_by_gather(link& ring, const agreement& agreed, reduce_op op,
                                dtype type, std::span<std::uint8_t> data,
                                link::time_point deadline) {
  fault_point("agree");
  agreed.records.start(ring.rank(), ring.size(), agreed.mine, agreed.failure, data);
  pass_records(ring, agreed.records, true, deadline);
  agreed.records.check(); // before any data is used
  reduce_gathered(agreed.records, ring.rank(), ring.size(), op, type, data);
}

/// ring_all_reduce, with the agreement first (`agreed`) or without.
void all_reduce(link& ring, const agreement* agreed, reduce_op op, dtype type,
                std::span<std::uint8_t> data, link::time_point deadline) {
  const auto world = ring.size();
  reduce_as_ring_does("ring_all_reduce", op, type, data, world,
                      [&](reduce_op combining, dtype element, std::span<std::uint8_t> bytes) {
    const bool by_gather = all_reduce_gathers(world, bytes.size(), element);
    if (agreed != nullptr && world > 1 && by_gather) {
      agree_and_reduce_by_gather(ring, *agreed, combining, element, bytes, deadline);
      return;
    }
    if (agreed != nullptr)
      ring_agree(ring, agreed->records, agreed->mine, agreed->failure, deadline);
    if (world > 1 && by_gather)
      all_reduce_by_gather(ring, combining, element, bytes, deadline);
    else if (world > 1)
      all_reduce_by_ring(ring, combining, element, bytes, deadline);
  });
}

} // namespace

bool all_reduce_gathers(std::size_t world, std::size_t bytes, dtype element) {
  return (world - 1) * bytes <= small_all_reduce_bytes || bytes / size_of(element) < world;
}

void reduce_gathered(const ring_records& records, std::size_t rank, std::size_t world,
                     reduce_op op, dtype type, std::span<std::uint8_t> data) {
  if (data.empty())
    return;
  if (rank != 0)
    std::memcpy(data.data(), records.payload(0).data(), data.size());
  for (std::size_t r = 1; r < world; ++r)
    combine_bytes(op, type, data.data(), records.payload(r).data(), data.size());
}

void ring_agree(link& ring, ring_records& records, const collective_fingerprint& mine,
                const std::exception_ptr& failure, link::time_point deadline) {
  fault_point("agree");
  records.start(ring.rank(), ring.size(), mine, failure, {});
  pass_records(ring, records, false, deadline);
  records.check();
}

void ring_agree(link& ring, const collective_fingerprint& mine,
                link::time_point deadline, const std::exception_ptr& failure) {
  ring_records records;
  ring_agree(ring, records, mine, failure, deadline);
}

void ring_all_reduce(link& ring, ring_records& records, const collective_fingerprint& mine,
                     const std::exception_ptr& failure, reduce_op op, dtype type,
                     std::span<std::uint8_t> data, link::time_point deadline) {
  const agreement agreed{records, mine, failure};
  all_reduce(ring, &agreed, op, type, data, deadline);
}

void ring_all_reduce(link& ring, reduce_op op, dtype type, std::span<std::uint8_t> data,
                     link::time_point deadline) {
  all_reduce(ring, nullptr, op, type, data, deadline);
}

void ring_all_gather(link& ring, std::span<std::uint8_t> data,
                     link::time_point deadline) {
  const auto world = ring.size();
  const neighbours peers(ring);
  if (data.size() % world != 0)
    throw value_error("ring_all_gather: " + std::to_string(data.size())
                      + " bytes are not " + std::to_string(world) + " equal blocks");
  const auto block = data.size() / world;
  const auto rank = ring.rank() + world;
  for (std::size_t t = 0; t + 1 < world; ++t) {
    ring.exchange(peers.next, data.subspan((rank - t) % world * block, block), peers.prev,
                  data.subspan((rank - t - 1) % world * block, block), deadline);
    if (t == 0)
      fault_point("all-gather");
  }
}

void ring_broadcast(link& ring, std::size_t root, std::span<std::uint8_t> data,
                    link::time_point deadline) {
  if (root >= ring.size())
    throw value_error("ring_broadcast: root " + std::to_string(root) + " is not a rank of "
                      + std::to_string(ring.size()));
  if (ring.size() == 1)
    return;
  const neighbours peers(ring);
  if (ring.rank() != root)
    ring.receive(peers.prev, data, deadline);
  if (peers.next != root)
    ring.send(peers.next, data, deadline);
}

} // namespace lockstep::detail
