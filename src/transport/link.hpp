#pragma once

// link: what a collective algorithm (src/collectives/) needs from whatever
// carries its bytes between the ranks of a group, as Gloo's pairs are to
// its algorithms. A rank sends bytes to and receives bytes from any rank of
// the group, both at once (exchange), so that two ranks that send to each
// other never wait on each other with full buffers; a ring, recursive
// doubling or a tree is written once against it and runs over any link:
//
//   transport/tcp/tcp_link.hpp   the authenticated TCP ring between
//                                workers (its ring neighbours only)
//   transport/tcp/tcp_mesh_link.hpp  the authenticated TCP mesh between
//                                workers (a connection per pair: any rank)
//   tests/memory_link.hpp        threads of one process, through queues
//                                (any rank to any rank; the tests' link)
//
// Every wait ends at a deadline taken from the link's own clock (now()),
// so that a simulator can drive the same algorithm code on simulated time;
// an algorithm never blocks on anything but its link, and never reads
// another clock. Between two ranks, bytes arrive in the order they were
// sent, as a stream: what one exchange sends may be received over several
// exchanges of the peer, and an empty side of an exchange moves nothing.
//
// A link fails in one of two ways, which a communicator tells apart (a
// lost peer breaks the group; a deadline is explained, then breaks it):
// link_closed naming the rank whose end is gone, and link_deadline_passed
// naming the rank waited for. A failed link is not used again.
//
// A rank's link is used by one thread at a time (its rank's); what an
// implementation offers to other threads (tcp_link::shut_down,
// tcp_mesh_link::shut_down) it says.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "lockstep/error.hpp"

namespace lockstep::detail {

/// A byte buffer (the same alias as transport/tcp/handshake.hpp's).
using bytes = std::vector<std::uint8_t>;

/// The peer's end of a link is gone (its connection closed or reset, its
/// process died, or it sent what no rank sends); what() names it.
class link_closed : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A link's deadline passed before its bytes moved; what() names the rank
/// waited for. A lockstep::timeout_error that a communicator tells from a
/// timeout_error that a rank passed on as its failure (ring_records).
class link_deadline_passed : public timeout_error {
public:
  using timeout_error::timeout_error;
};

class link {
public:
  /// The link's clock: deadlines are its time points (a simulator's link
  /// returns simulated ones from now()).
  using time_point = std::chrono::steady_clock::time_point;

  /// The rank of an exchange's side that moves no bytes (send, receive).
  static constexpr std::size_t no_rank = SIZE_MAX;

  virtual ~link() = default;

  /// The number of ranks of the group.
  virtual std::size_t size() const noexcept = 0;

  /// This rank, 0 .. size() - 1.
  virtual std::size_t rank() const noexcept = 0;

  /// The time on the link's clock, from which deadlines are reckoned.
  virtual time_point now() const = 0;

  /// Sends `out` to rank `to` while it receives `in.size()` bytes from rank
  /// `from` (the same rank or another), until both are done. `to` may be
  /// no_rank when `out` is empty, `from` when `in` is. Throws link_closed
  /// or link_deadline_passed (see the file comment), and value_error for a
  /// rank that this link cannot reach (naming it).
  virtual void exchange(std::size_t to, std::span<const std::uint8_t> out, std::size_t from,
                        std::span<std::uint8_t> in, time_point deadline) = 0;

  /// exchange() for frames, messages whose length the receiver learns from
  /// them: 8 bytes of little-endian length L, then L bytes. Sends the
  /// frame `out` as it stands (one this rank wrote, or one it received and
  /// passes on) while it receives the next frame from `from` into `in`,
  /// resized to it (8 + L bytes). Throws as exchange(), and link_closed
  /// for a frame of more than `max_bytes`, which no rank sends.
  virtual void exchange_frame(std::size_t to, std::span<const std::uint8_t> out,
                              std::size_t from, bytes& in, std::size_t max_bytes,
                              time_point deadline) = 0;

  /// Sends `out` to rank `to` (exchange() with nothing to receive).
  void send(std::size_t to, std::span<const std::uint8_t> out, time_point deadline) {
    exchange(to, out, no_rank, {}, deadline);
  }

  /// Receives `in.size()` bytes from rank `from` (exchange() with nothing
  /// to send).
  void receive(std::size_t from, std::span<std::uint8_t> in, time_point deadline) {
    exchange(no_rank, {}, from, in, deadline);
  }

  /// The size of a call from which the log-step algorithms pace their
  /// steps (collectives/core_pacing.hpp): the links' bandwidth-delay
  /// product α·β (algorithm_choice.hpp's paced_from_bytes). It must be the
  /// same on every rank of the group, as the link costs it comes from
  /// are; SIZE_MAX, the default, never paces.
  std::size_t paced_from() const noexcept { return paced_from_; }
  void pace_from(std::size_t bytes) noexcept { paced_from_ = bytes; }

protected:
  link() = default;
  link(const link&) = default;
  link& operator=(const link&) = default;
  link(link&&) = default;
  link& operator=(link&&) = default;

private:
  std::size_t paced_from_ = SIZE_MAX;
};

} // namespace lockstep::detail
