#include "sim_link.hpp"

#include "runtime/little_endian.hpp"

#include "lockstep/error.hpp"

#include <simgrid/Exception.hpp>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Mailbox.hpp>

#include <algorithm>
#include <cstring>

namespace lockstep::detail::sim {

namespace sg4 = simgrid::s4u;

namespace {

std::string name(std::size_t rank) { return "rank " + std::to_string(rank); }

sg4::Mailbox* mailbox(std::size_t from, std::size_t to) {
  return sg4::Mailbox::by_name(std::to_string(from) + ">" + std::to_string(to));
}

/// Seconds from now to `deadline` on the simulated clock, at least 0.
double seconds_until(link::time_point deadline) {
  const auto left = std::chrono::duration<double>(deadline - simulated_now()).count();
  return std::max(left, 0.0);
}

} // namespace

link::time_point simulated_now() {
  const std::chrono::duration<double> since_start(sg4::Engine::get_clock());
  return link::time_point(std::chrono::duration_cast<link::time_point::duration>(since_start));
}

sim_link::sim_link(const sim_network& network, std::size_t rank)
  : network_(network), rank_(rank), told_(network.size) {}

sim_link::~sim_link() = default;

link::time_point sim_link::now() const { return simulated_now(); }

void sim_link::start_exchange(std::size_t to, bool sends, std::size_t from, bool receives) {
  for (const auto& [peer, moves] : {std::pair{to, sends}, std::pair{from, receives}})
    if (peer == no_rank ? moves : peer >= network_.size)
      throw value_error("sim_link: rank " + std::to_string(peer) + " is not a rank of "
                        + std::to_string(network_.size));
  if (network_.stop_rank == rank_ && exchanges_ == network_.stop_after)
    throw host_stopped(name(rank_) + "'s host stopped after " + std::to_string(exchanges_)
                       + " exchanges");
  ++exchanges_;
}

void sim_link::receive(std::size_t from, std::uint8_t* into, std::size_t count,
                       time_point deadline) {
  std::size_t received = 0;
  while (received < count) {
    auto& rest = pending_[from];
    if (!rest.message) {
      sim_message* message = nullptr;
      const auto get = mailbox(from, rank_)->get_async<sim_message>(&message);
      try {
        get->wait_for(seconds_until(deadline));
      } catch (const simgrid::TimeoutException&) {
        get->cancel();
        throw link_deadline_passed("no data came from " + name(from) + " before the deadline");
      }
      rest.message.reset(message);
      rest.at = 0;
    }
    const auto n = std::min(count - received, rest.message->size - rest.at);
    if (!rest.message->data.empty()) // else sizes only (sim_network::carry_payloads)
      std::memcpy(into + received, rest.message->data.data() + rest.at, n);
    received += n;
    rest.at += n;
    if (rest.at == rest.message->size)
      rest.message.reset();
  }
}

sg4::CommPtr sim_link::post(std::size_t to, std::span<const std::uint8_t> out, bool carry) {
  if (out.empty())
    return nullptr;
  auto* box = mailbox(rank_, to);
  if (!told_[to]) { // its bytes flow to `to` before it asks for them
    box->set_receiver(sg4::Actor::by_pid(network_.actor_ids.at(to)));
    told_[to] = true;
  }
  auto message = std::make_unique<sim_message>();
  message->size = out.size();
  if (carry)
    message->data.assign(out.begin(), out.end());
  // It moves on its own and its receiver frees it; a large one is waited for.
  if (out.size() <= network_.send_buffer) {
    box->put_init(message.release(), out.size())->detach();
    return nullptr;
  }
  return box->put_async(message.release(), out.size());
}

void sim_link::finish(const sg4::CommPtr& send, std::size_t to, time_point deadline) {
  if (!send)
    return;
  try {
    send->wait_for(seconds_until(deadline));
  } catch (const simgrid::TimeoutException&) {
    throw link_deadline_passed(name(to) + " took no data before the deadline");
  }
}

void sim_link::exchange(std::size_t to, std::span<const std::uint8_t> out, std::size_t from,
                        std::span<std::uint8_t> in, time_point deadline) {
  start_exchange(to, !out.empty(), from, !in.empty());
  const auto send =
    post(to, out, network_.carry_payloads || out.size() <= network_.carry_limit);
  receive(from, in.data(), in.size(), deadline);
  finish(send, to, deadline);
}

void sim_link::exchange_frame(std::size_t to, std::span<const std::uint8_t> out,
                              std::size_t from, bytes& in, std::size_t max_bytes,
                              time_point deadline) {
  start_exchange(to, !out.empty(), from, true);
  const auto send = post(to, out, true);
  in.resize(8);
  receive(from, in.data(), 8, deadline);
  const auto length = load_le<std::uint64_t>(in);
  if (length > max_bytes)
    throw link_closed(name(from) + " sent a frame of " + std::to_string(length)
                      + " bytes, more than any rank sends");
  in.resize(8 + length);
  receive(from, in.data() + 8, length, deadline);
  finish(send, to, deadline);
}

} // namespace lockstep::detail::sim
