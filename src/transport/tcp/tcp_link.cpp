#include "transport/tcp/tcp_link.hpp"

#include "lockstep/error.hpp"

#include <string>
#include <utility>

namespace lockstep::detail {

namespace {

/// Why a tcp_link cannot reach `peer`.
[[noreturn]] void throw_unreachable(const ring_links& ring, const char* direction,
                                    std::size_t peer) {
  throw value_error("tcp_link of worker " + std::to_string(ring.rank) + " of "
                    + std::to_string(ring.world) + " cannot " + direction + " "
                    + (peer == link::no_rank ? "no rank" : "rank " + std::to_string(peer))
                    + ": it connects only the ring's neighbours (it sends"
                    " to rank " + std::to_string(ring.next_rank()) + " and receives from rank "
                    + std::to_string(ring.prev_rank()) + ")");
}

} // namespace

tcp_link::tcp_link(ring_links connections) noexcept : connections_(std::move(connections)) {}

void tcp_link::check_peers(std::size_t to, bool sends, std::size_t from, bool receives) const {
  if (to == no_rank ? sends : to != connections_.next_rank())
    throw_unreachable(connections_, "send to", to);
  if (from == no_rank ? receives : from != connections_.prev_rank())
    throw_unreachable(connections_, "receive from", from);
}

void tcp_link::exchange(std::size_t to, std::span<const std::uint8_t> out, std::size_t from,
                        std::span<std::uint8_t> in, time_point deadline) {
  check_peers(to, !out.empty(), from, !in.empty());
  connections_.exchange(out, in, deadline);
}

void tcp_link::exchange_frame(std::size_t to, std::span<const std::uint8_t> out,
                              std::size_t from, bytes& in, std::size_t max_bytes,
                              time_point deadline) {
  check_peers(to, !out.empty(), from, true);
  connections_.exchange_frame(out, in, max_bytes, deadline);
}

} // namespace lockstep::detail
