#include "transport/tcp/tcp_mesh_link.hpp"

#include "lockstep/error.hpp"

#include <string>
#include <utility>

namespace lockstep::detail {

tcp_mesh_link::tcp_mesh_link(mesh_links connections) noexcept
  : connections_(std::move(connections)) {}

duplex_ends tcp_mesh_link::ends(std::size_t to, bool sends, std::size_t from, bool receives) {
  const auto check = [&](std::size_t peer, bool moves, const char* direction) {
    if (peer == no_rank ? !moves : peer < size() && peer != rank())
      return;
    throw value_error("tcp_mesh_link of rank " + std::to_string(rank()) + " of "
                      + std::to_string(size()) + " cannot " + direction + " "
                      + (peer == no_rank ? std::string("no rank")
                         : peer == rank() ? "itself"
                                          : "rank " + std::to_string(peer))
                      + (peer == rank() ? " (it has no connection to itself)"
                                        : " (its ranks are 0 to " + std::to_string(size() - 1)
                                            + ")"));
  };
  check(to, sends, "send to");
  check(from, receives, "receive from");
  duplex_ends result;
  if (to != no_rank) {
    result.send = &connections_.socket(to);
    result.send_worker = connections_.worker_of(to);
  }
  if (from != no_rank) {
    result.receive = &connections_.socket(from);
    result.receive_worker = connections_.worker_of(from);
    result.ahead = &connections_.ahead(from);
  }
  return result;
}

void tcp_mesh_link::exchange(std::size_t to, std::span<const std::uint8_t> out, std::size_t from,
                             std::span<std::uint8_t> in, time_point deadline) {
  duplex_exchange(ends(to, !out.empty(), from, !in.empty()), out, in, connections_.spin().get(),
                  deadline);
}

void tcp_mesh_link::exchange_frame(std::size_t to, std::span<const std::uint8_t> out,
                                   std::size_t from, bytes& in, std::size_t max_bytes,
                                   time_point deadline) {
  duplex_exchange_frame(ends(to, !out.empty(), from, true), out, in, max_bytes,
                        connections_.spin().get(), deadline);
}

} // namespace lockstep::detail
