#pragma once

// control_links: the control connections the rendezvous left open (a star:
// the coordinator holds one per worker, each worker one to the coordinator)
// and the one thread that does all their I/O. It reads frames and hands
// each message, decoded, to `deliver` (the node actor, node_actor.hpp),
// with the peer it came from; a connection that closes or fails is
// delivered as a failure naming why. It writes what post() queues, in
// order. No CAF here: the messages are the plain structs of
// wire_messages.hpp.

#include "node/wire_messages.hpp"
#include "transport/tcp/socket_io.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace lockstep::detail {

/// What a peer's connection gave: a message, or why it failed.
struct control_event {
  std::uint32_t peer = 0;
  std::variant<heartbeat, collective_abort, collective_progress,
               std::string>
    what;
};

class control_links {
public:
  /// `control`: as rendezvous_result::control for `rank` (the coordinator is
  /// rank 0, and its own slot is empty). `write_timeout`: how long a write
  /// may wait for a peer that does not read.
  control_links(std::size_t rank, std::vector<tcp_socket> control,
                std::chrono::milliseconds write_timeout);

  /// Starts the thread, which delivers what arrives to `deliver` (once;
  /// what was posted before is written then). resource_error when the
  /// thread cannot be created; the links can then only be destroyed.
  void start(std::function<void(control_event)> deliver);

  /// Stops the thread and closes the connections.
  ~control_links();

  control_links(const control_links&) = delete;
  control_links& operator=(const control_links&) = delete;

  /// The ranks at the other end of the connections.
  std::vector<std::uint32_t> peers() const;

  /// Queues `message` for `peer`; the thread writes it. A failed write is
  /// delivered as the connection's failure.
  void post(std::uint32_t peer, const control_post& message);

  /// Writes what is queued, then stops the thread (within about
  /// `write_timeout`); the connections stay open until destruction.
  void stop();

private:
  struct link {
    std::uint32_t peer = 0;
    tcp_socket socket;
    bool failed = false;
  };

  void loop();
  void write_queued();
  void wake();

  const std::chrono::milliseconds write_timeout_;
  std::function<void(control_event)> deliver_; // set once, before the thread starts
  std::vector<link> links_;
  int wake_[2] = {-1, -1}; // a pipe: post() and stop() wake the thread
  std::mutex mutex_;       // guards the two fields below
  std::deque<std::pair<std::uint32_t, control_post>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace lockstep::detail
