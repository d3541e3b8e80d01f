#pragma once

// sim_link: a link (src/transport/link.hpp) over SimGrid's S4U, so that
// lockstep's own algorithm code (src/collectives/) runs on a simulated
// cluster (docs/algorithms.md, "A simulated cluster"). A test and
// benchmark helper only: the library users link never sees SimGrid.
//
// Each rank is an S4U actor on its own simulated host; each ordered pair
// of ranks (from, to) has a mailbox. exchange() posts its send (an
// asynchronous put, timed as out.size() bytes) and then receives (gets
// from the peer's mailbox) while the send moves, so the two directions of
// a host's link move together (full duplex; the platform's links are
// split-duplex, sim_platform.hpp). Sends are eager, as over TCP: the
// receiving actor is its mailbox's permanent receiver, so the bytes start
// to move when the sender posts them (a rendezvous would make a send wait
// for a receive that the peer posts only after its own send is done) and
// cost the route's latency plus size / bandwidth; a receive takes them,
// in the order they were sent, once they are in. As TCP's send returns
// once the kernel's buffer holds the bytes, an exchange does not wait for
// a send of up to sim_network::send_buffer bytes (64 KiB) to arrive, and
// waits for a larger one, so that a rank's large sends in a row take turns
// on its link instead of sharing it all at once.
//
// Between two ranks bytes are a stream, as the link contract says: a
// message larger than what one receive asks for is kept and read by the
// next receives. now() is the simulated clock (seconds since the
// simulation started, as a steady_clock time point), and every wait ends
// at its deadline on that clock with link_deadline_passed naming the rank
// waited for ("no data came from rank R before the deadline", as the
// in-memory link says; "rank R took no data before the deadline" for a
// large send that never arrived).
//
// Two switches, for all ranks of a simulation (sim_network):
//   carry_payloads  false: a message of more than carry_limit bytes
//                   moves its size only (the receiver's buffer is left as
//                   it is), so that sizes beyond what the host's memory
//                   holds for every rank can be timed; smaller ones carry
//                   their bytes, since the agreement's frames are read
//                   (and a frame may be sent by exchange() and received
//                   by exchange_frame()).
//   stop_rank       that rank's host stops when it starts its
//                   (stop_after + 1)-th exchange: its actor ends (the
//                   link throws host_stopped, which the runner catches)
//                   and nothing more comes from it, as a host that hangs.
//
// A rank's link is used by its actor only. SimGrid must run its actors
// as threads (contexts/factory:thread, sim_platform.hpp's configuration),
// since the algorithms keep thread_local scratch.

#include "transport/link.hpp"

#include <simgrid/forward.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace lockstep::detail::sim {

/// Thrown by the link of the rank that stops (sim_network::stop_rank).
class host_stopped : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// What every rank's link of one simulation shares.
struct sim_network {
  std::size_t size = 0;
  bool carry_payloads = true;
  std::size_t carry_limit = 1 << 20; ///< with carry_payloads false (above)
  std::size_t send_buffer = 64 << 10; ///< sends up to this many bytes do not wait
  std::optional<std::size_t> stop_rank;
  std::size_t stop_after = 0; ///< exchanges the stopping rank completes first
  std::vector<long> actor_ids; ///< by rank: its actor (the runner sets them)
};

/// One message in a mailbox: its bytes (none when payloads are not
/// carried) and its size.
struct sim_message {
  std::vector<std::uint8_t> data;
  std::size_t size = 0;
};

/// Rank `rank`'s end; construct it inside the rank's actor.
class sim_link final : public link {
public:
  sim_link(const sim_network& network, std::size_t rank);
  ~sim_link() override;

  std::size_t size() const noexcept override { return network_.size; }
  std::size_t rank() const noexcept override { return rank_; }
  time_point now() const override;

  void exchange(std::size_t to, std::span<const std::uint8_t> out, std::size_t from,
                std::span<std::uint8_t> in, time_point deadline) override;

  void exchange_frame(std::size_t to, std::span<const std::uint8_t> out, std::size_t from,
                      bytes& in, std::size_t max_bytes, time_point deadline) override;

  /// Exchanges this rank started (the stop counts them).
  std::size_t exchanges() const noexcept { return exchanges_; }

private:
  struct pending {
    std::unique_ptr<sim_message> message;
    std::size_t at = 0; ///< bytes of it already received
  };

  /// Posts `out` to `to` (nothing when it is empty): it moves on its own,
  /// in order behind this rank's earlier messages to `to`; the send to
  /// wait for when it is larger than the send buffer, else null.
  simgrid::s4u::CommPtr post(std::size_t to, std::span<const std::uint8_t> out, bool carry);
  /// Waits until `send` (when not null) arrived.
  void finish(const simgrid::s4u::CommPtr& send, std::size_t to, time_point deadline);
  void start_exchange(std::size_t to, bool sends, std::size_t from, bool receives);
  /// Receives `count` bytes from `from` into `into` (nullptr: sizes only).
  void receive(std::size_t from, std::uint8_t* into, std::size_t count, time_point deadline);

  const sim_network& network_;
  std::size_t rank_;
  std::size_t exchanges_ = 0;
  std::unordered_map<std::size_t, pending> pending_; ///< by sending rank: a message's rest
  std::vector<bool> told_;                          ///< by rank: its mailbox has its receiver
};

/// The simulated clock as a link time point.
link::time_point simulated_now();

} // namespace lockstep::detail::sim
