#pragma once

// tcp_link: the ring's TCP connections between workers (ring_links) as a
// link (transport/link.hpp), for the ring's algorithm
// (collectives/ring_collectives.hpp). It holds one connection to the next
// rank and one from the previous rank, so it sends only to the next rank
// and receives only from the previous one: an exchange that names another
// rank throws value_error naming it, before any byte moves. (Algorithms
// that talk to other ranks, such as recursive doubling or a tree, run over
// the mesh's link, tcp_mesh_link.hpp.) Its clock is io_clock.
// Its errors are ring_links': connection_closed (a link_closed) naming the
// neighbour whose connection closed, link_deadline_passed naming the
// neighbour it waited for.

#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/link.hpp"
#include "transport/tcp/ring_links.hpp"

namespace lockstep::detail {

class tcp_link final : public link {
public:
  /// Takes over `connections`, connected (connect_ring) or yet to be.
  explicit tcp_link(ring_links connections) noexcept;

  std::size_t size() const noexcept override { return connections_.world; }
  std::size_t rank() const noexcept override { return connections_.rank; }
  time_point now() const override { return io_clock::now(); }

  /// ring_links::exchange(), after checking that `to` is the next rank
  /// and `from` the previous one (or no_rank for a side that moves
  /// nothing).
  void exchange(std::size_t to, std::span<const std::uint8_t> out, std::size_t from,
                std::span<std::uint8_t> in, time_point deadline) override;

  /// ring_links::exchange_frame(), with the same checks as exchange().
  void exchange_frame(std::size_t to, std::span<const std::uint8_t> out, std::size_t from,
                      bytes& in, std::size_t max_bytes, time_point deadline) override;

  /// The connections (to connect them, or to use them directly).
  ring_links& connections() noexcept { return connections_; }

  /// ring_links::close(): the neighbours' exchanges fail at once.
  void close() noexcept { connections_.close(); }
  /// ring_links::shut_down(): safe from another thread while one exchanges.
  void shut_down() noexcept { connections_.shut_down(); }

private:
  /// Throws value_error unless `to` is the next rank (or no_rank, when it
  /// `sends` nothing) and `from` the previous one (or no_rank, when it
  /// `receives` nothing).
  void check_peers(std::size_t to, bool sends, std::size_t from, bool receives) const;

  ring_links connections_;
};

} // namespace lockstep::detail
