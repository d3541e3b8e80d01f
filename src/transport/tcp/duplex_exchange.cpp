#include "transport/tcp/duplex_exchange.hpp"

#include "runtime/little_endian.hpp"
#include "runtime/spin_wait.hpp"
#include "runtime/timeline.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace lockstep::detail {

namespace {

std::string worker(std::size_t rank) {
  return "worker " + std::to_string(rank);
}

/// One non-blocking write to `peer`; the bytes sent, 0 when it would block.
/// (The peer's name is only spelt out for an error: this runs in a spin.)
std::size_t send_some(tcp_socket& socket, std::span<const std::uint8_t> data, std::size_t peer) {
  boost::system::error_code error;
  const auto sent = socket.write_some(boost::asio::buffer(data.data(), data.size()), error);
  if (!error || error == boost::asio::error::would_block)
    return error ? 0 : sent;
  return moved_or_closed(sent, error, worker(peer));
}

/// One non-blocking read from the receiving end (what an earlier frame's
/// read took ahead first); the bytes received, 0 when it would block.
std::size_t receive_some(const duplex_ends& ends, std::span<std::uint8_t> data) {
  auto& ahead = *ends.ahead;
  if (ahead.at < ahead.data.size()) {
    const auto n = std::min(data.size(), ahead.data.size() - ahead.at);
    std::memcpy(data.data(), ahead.data.data() + ahead.at, n);
    ahead.at += n;
    return n;
  }
  boost::system::error_code error;
  const auto got = ends.receive->read_some(boost::asio::buffer(data.data(), data.size()), error);
  if (!error || error == boost::asio::error::would_block)
    return error ? 0 : got;
  return moved_or_closed(got, error, worker(ends.receive_worker));
}

/// Puts `early` (read past a frame's end) before what `ahead` still holds.
void keep_ahead(read_ahead& ahead, std::span<const std::uint8_t> early) {
  bytes rest(ahead.data.begin() + static_cast<std::ptrdiff_t>(ahead.at), ahead.data.end());
  ahead.data.assign(early.begin(), early.end());
  ahead.data.insert(ahead.data.end(), rest.begin(), rest.end());
  ahead.at = 0;
}

/// Polls `fds` without sleeping for up to `spin.budget`, yielding the CPU
/// between polls when `spin.yield`; true once one is ready. A
/// zero-timeout poll(2) reads the sockets' state without taking their
/// locks, where a retried send or receive would lock the socket that the
/// peer's send is delivering into (on loopback, from the peer's CPU).
bool spin_until_ready(std::span<pollfd> fds, host_spin spin) {
  if (spin.budget.count() <= 0)
    return false;
  const auto until = io_clock::now() + spin.budget;
  do {
    if (::poll(fds.data(), fds.size(), 0) > 0)
      return true;
    if (spin.yield)
      sched_yield();
  } while (io_clock::now() < until);
  return false;
}

/// The loop of duplex_exchange() and duplex_exchange_frame(): sends `out`
/// while it receives into `in`; after each read, `arrived(received)`
/// returns the buffer to go on with (a frame's grows once the length is in).
template <class Arrived>
void send_and_receive(const duplex_ends& ends, std::span<const std::uint8_t> out,
                      std::span<std::uint8_t> in, Arrived arrived,
                      host_spin spin, io_clock::time_point deadline) {
  // Set once: asio's non_blocking(true) is an ioctl(2) each time.
  for (auto* socket : {out.empty() ? nullptr : ends.send, in.empty() ? nullptr : ends.receive})
    if (socket != nullptr && !socket->non_blocking())
      socket->non_blocking(true);
  std::size_t sent = 0;
  std::size_t received = 0;
  while (sent < out.size() || received < in.size()) {
    std::size_t moved = 0;
    if (sent < out.size()) {
      const auto n = send_some(*ends.send, out.subspan(sent), ends.send_worker);
      sent += n;
      moved += n;
    }
    if (received < in.size()) {
      const auto n = receive_some(ends, in.subspan(received));
      if (n > 0)
        in = arrived(received += n);
      moved += n;
    }
    if (moved > 0)
      continue;
    const timeline_wait waiting; // the collective's span tells it from reducing
    // One entry per side still moving (the same socket twice when it sends
    // to and receives from one worker: poll(2) takes that).
    pollfd fds[2] = {
      {sent < out.size() ? ends.send->native_handle() : -1, POLLOUT, 0},
      {received < in.size() ? ends.receive->native_handle() : -1, POLLIN, 0}};
    if (spin_until_ready(fds, spin))
      continue;
    if (!poll_until(fds, deadline))
      throw link_deadline_passed(received < in.size()
                                   ? "no data came from " + worker(ends.receive_worker)
                                       + " before the deadline"
                                   : worker(ends.send_worker)
                                       + " did not take the data sent to it before the deadline");
  }
}

} // namespace

host_spin spin_budget_cache::get() {
  const auto now = io_clock::now();
  if (now - checked_ > std::chrono::milliseconds{10}) {
    spin_ = spin_on_this_host();
    checked_ = now;
  }
  return spin_;
}

void duplex_exchange(const duplex_ends& ends, std::span<const std::uint8_t> out,
                     std::span<std::uint8_t> in, host_spin spin,
                     io_clock::time_point deadline) {
  send_and_receive(ends, out, in, [in](std::size_t) { return in; }, spin, deadline);
}

void duplex_exchange_frame(const duplex_ends& ends, std::span<const std::uint8_t> out, bytes& in,
                           std::size_t max_bytes, host_spin spin,
                           io_clock::time_point deadline) {
  constexpr std::size_t length_bytes = 8;
  in.resize(std::max(length_bytes, out.size())); // as far as this rank's own frame
  bool sized = false;
  const auto arrived = [&](std::size_t received) -> std::span<std::uint8_t> {
    if (!sized && received >= length_bytes) {
      sized = true;
      const auto length = load_le<std::uint64_t>(in);
      if (length > max_bytes)
        throw connection_closed(worker(ends.receive_worker) + " sent a record of "
                                + std::to_string(length) + " bytes, more than any worker sends");
      const auto frame = length_bytes + length;
      if (received > frame) // a shorter frame than ours: the rest comes later
        keep_ahead(*ends.ahead, std::span(in).subspan(frame, received - frame));
      in.resize(frame);
    }
    return in;
  };
  send_and_receive(ends, out, in, arrived, spin, deadline);
}

} // namespace lockstep::detail
