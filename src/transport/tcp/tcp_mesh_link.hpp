#pragma once

// tcp_mesh_link: the mesh's TCP connections between workers (mesh_links)
// as a link (transport/link.hpp), for the algorithms that talk to any rank
// (collectives/recursive_doubling.hpp, halving_doubling.hpp,
// binomial_tree.hpp, peer_agreement.hpp) and for the ring's too. Ranks
// are the mesh's positions. exchange() sends to any rank while it
// receives from any rank (the same one or another), both at once, through
// the ring's loop (duplex_exchange.hpp): the same spin-then-poll wait, and
// the same errors: connection_closed (a link_closed) naming the worker
// whose connection closed, link_deadline_passed naming the worker waited
// for. Its clock is io_clock. A rank outside the group, or this rank
// itself (it has no connection to itself), is a value_error naming it,
// before any byte moves.

#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/link.hpp"
#include "transport/tcp/mesh_links.hpp"

namespace lockstep::detail {

class tcp_mesh_link final : public link {
public:
  /// Takes over `connections`, connected (connect_mesh) or yet to be.
  explicit tcp_mesh_link(mesh_links connections) noexcept;

  std::size_t size() const noexcept override { return connections_.world(); }
  std::size_t rank() const noexcept override { return connections_.rank(); }
  time_point now() const override { return io_clock::now(); }

  void exchange(std::size_t to, std::span<const std::uint8_t> out, std::size_t from,
                std::span<std::uint8_t> in, time_point deadline) override;

  /// Frames as link::exchange_frame; bytes a read took beyond a frame's
  /// end wait, per peer, for the next receive from that peer.
  void exchange_frame(std::size_t to, std::span<const std::uint8_t> out, std::size_t from,
                      bytes& in, std::size_t max_bytes, time_point deadline) override;

  /// The connections (to connect them).
  mesh_links& connections() noexcept { return connections_; }

  /// mesh_links::close(): the peers' exchanges fail at once.
  void close() noexcept { connections_.close(); }
  /// mesh_links::shut_down(): safe from another thread while one exchanges.
  void shut_down() noexcept { connections_.shut_down(); }

private:
  /// The ends of an exchange with `to` and `from` (a null socket for a
  /// side that moves nothing). Throws value_error for a rank that this
  /// link cannot reach.
  duplex_ends ends(std::size_t to, bool sends, std::size_t from, bool receives);

  mesh_links connections_;
};

} // namespace lockstep::detail
