#pragma once

// peer_monitor: failure detection on the control connections that the
// rendezvous left open (a star: the coordinator holds one per worker, each
// worker one to the coordinator). Its thread sends a heartbeat every
// `interval` and reads the peers'. A peer is lost when its connection
// closes (noticed at once: a killed process's kernel closes it) or when it
// stays silent for `peer_timeout` (a frozen process, a partition). The
// coordinator tells the other workers of a loss (a collective_abort), so
// every survivor learns which rank was lost, not just that its neighbour
// went quiet. `on_lost(reason)` runs once, on the monitor's thread; the
// node breaks its ring there, so pending collectives fail at once.
//
// A peer that leaves in good order (its program ended) says goodbye, a
// heartbeat with sequence 0, and is not lost. No CAF actor system; the
// sockets belong to the monitor's thread alone.

#include "transport/tcp/socket_io.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace lockstep::detail {

struct peer_monitor_settings {
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds peer_timeout{10000};
};

class peer_monitor {
public:
  /// `control`: as rendezvous_result::control for `rank` (the coordinator
  /// is rank 0). Starts the thread.
  peer_monitor(std::size_t rank, std::vector<tcp_socket> control, peer_monitor_settings settings,
               std::function<void(const std::string&)> on_lost);

  /// Says goodbye to the peers still connected and stops the thread.
  ~peer_monitor();

  peer_monitor(const peer_monitor&) = delete;
  peer_monitor& operator=(const peer_monitor&) = delete;

  /// Why the group was lost ("worker 2 ..."); empty while it is whole.
  std::string lost() const;

private:
  struct peer;

  void loop();
  void declare_lost(const std::string& reason);

  const std::size_t rank_;
  const peer_monitor_settings settings_;
  const std::function<void(const std::string&)> on_lost_;
  std::vector<peer> peers_;
  int wake_[2] = {-1, -1}; // a pipe: the destructor writes to stop the thread
  mutable std::mutex mutex_;
  std::string lost_;
  std::thread thread_;
};

} // namespace lockstep::detail
