#pragma once

// The connections of one worker in a mesh of workers: one authenticated TCP
// connection (authenticate.hpp) to every other rank of the group, n - 1 per
// worker, each carrying both directions. tcp_mesh_link (tcp_mesh_link.hpp)
// puts them behind the link interface, so that the algorithms that talk to
// any rank (recursive doubling, halving-doubling, the binomial tree,
// collectives/) run between workers; its bytes move through
// duplex_exchange.hpp, as the ring's do. No CAF: tested under
// ThreadSanitizer.

#include <cstddef>
#include <span>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "transport/tcp/connect_watch.hpp"
#include "transport/tcp/duplex_exchange.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/socket_io.hpp"

namespace lockstep::detail {

class mesh_links {
public:
  /// Unconnected connections of position `rank` in a mesh of `world`
  /// positions, their sockets on `context`. `workers`: by position, the
  /// cluster's number of its worker (the leaders of hosts, say), which
  /// the handshakes check and the errors name; empty for the mesh of all
  /// workers, where a position is the worker's number.
  mesh_links(std::size_t rank, std::size_t world, boost::asio::io_context& context,
             std::vector<std::size_t> workers = {});

  std::size_t rank() const noexcept { return rank_; }
  std::size_t world() const noexcept { return world_; }

  /// The cluster's number of the worker at `position` (see the constructor).
  std::size_t worker_of(std::size_t position) const noexcept {
    return position < workers_.size() ? workers_[position] : position;
  }
  const std::vector<std::size_t>& workers() const noexcept { return workers_; }

  /// The connection with position `peer` (not this one's own: it has none).
  tcp_socket& socket(std::size_t peer) { return sockets_.at(peer); }
  /// What frames' reads took ahead on the connection with `peer`.
  read_ahead& ahead(std::size_t peer) { return ahead_.at(peer); }
  /// How long an exchange may spin before it sleeps.
  spin_budget_cache& spin() noexcept { return spin_; }

  /// Closes every connection, so that the peers' exchanges fail at once
  /// instead of at their deadlines.
  void close() noexcept;
  /// Shuts every connection down (shutdown(2)) without touching the socket
  /// objects, so another thread may call it while one exchanges: the
  /// exchange and the peers' fail at once.
  void shut_down() noexcept;

private:
  std::size_t rank_;
  std::size_t world_;
  std::vector<tcp_socket> sockets_; // by position; this position's stays closed
  std::vector<read_ahead> ahead_;   // by position
  std::vector<std::size_t> workers_;
  spin_budget_cache spin_;
};

/// Connects `links` into the mesh, in the calling thread and no other:
/// this position accepts one connection from each lower position on
/// `acceptor`, authenticating each as the server, then dials each higher
/// position at `addresses[position]` in turn and authenticates as its
/// client. Every position first waits only for lower ones, which dial it
/// once their own lower ones are done, so a mesh of any size connects
/// without waiting on itself; its critical path is about world - 1
/// handshakes. The hellos say that they open a mesh connection
/// (connection_purpose): a peer that still awaits a ring connection at its
/// listener refuses one, and the dial is tried again (after 10 ms, growing
/// to 1 s) until the deadline. A connection to `acceptor` that fails the
/// handshake (a stranger, a ring connection, a rank that is not a lower
/// position or one already connected) is dropped after at most
/// handshake_timeout and the next one awaited. Every wait also watches
/// `watch`. Throws authentication_error (a peer that does not prove the
/// token, or is not the worker dialled), timeout_error (at the deadline,
/// naming the worker not connected), peer_lost_error when a peer closes
/// its connection in the middle of its handshake (it passed the
/// rendezvous with this token: it left), and what `watch.ready` throws.
void connect_mesh(mesh_links& links, boost::asio::ip::tcp::acceptor& acceptor,
                  std::span<const boost::asio::ip::tcp::endpoint> addresses,
                  std::span<const std::uint8_t> token, const handshake_identity& self,
                  io_clock::time_point deadline, ring_watch watch = {});

} // namespace lockstep::detail
