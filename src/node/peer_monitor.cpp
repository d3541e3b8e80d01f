#include "node/peer_monitor.hpp"

#include "node/control_messages.hpp"
#include "runtime/log.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace lockstep::detail {

namespace {

std::string who(std::uint32_t rank) {
  return rank == 0 ? "worker 0 (the coordinator)" : "worker " + std::to_string(rank);
}

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           io_clock::now().time_since_epoch())
    .count();
}

} // namespace

struct peer_monitor::peer {
  std::uint32_t rank = 0;
  tcp_socket socket;
  io_clock::time_point last_heard;
  bool gone = false; // said goodbye, or its connection failed
};

peer_monitor::peer_monitor(std::size_t rank, std::vector<tcp_socket> control,
                           peer_monitor_settings settings,
                           std::function<void(const std::string&)> on_lost)
  : rank_(rank), settings_(settings), on_lost_(std::move(on_lost)) {
  const auto now = io_clock::now();
  for (std::size_t i = 0; i < control.size(); ++i) {
    const auto peer_rank = rank == 0 ? i : 0;
    if (rank == 0 && i == 0)
      continue; // the coordinator's own slot
    peers_.push_back({static_cast<std::uint32_t>(peer_rank), std::move(control[i]), now});
  }
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(std::string("peer_monitor: pipe2 failed: ") + std::strerror(errno));
  thread_ = std::thread([this] { loop(); });
}

peer_monitor::~peer_monitor() {
  const char stop = 1;
  [[maybe_unused]] const auto written = ::write(wake_[1], &stop, 1);
  thread_.join();
  const bool whole = lost().empty();
  for (auto& p : peers_) {
    if (whole && !p.gone)
      try {
        send_control(p.socket, actors::heartbeat{static_cast<std::uint32_t>(rank_), 0, 0, 0},
                     io_clock::now() + std::chrono::milliseconds{100});
      } catch (const std::exception&) {
        // It may be gone already; nothing is waiting for this goodbye.
      }
    boost::system::error_code ignored;
    p.socket.close(ignored);
  }
  ::close(wake_[0]);
  ::close(wake_[1]);
}

std::string peer_monitor::lost() const {
  std::lock_guard lock{mutex_};
  return lost_;
}

void peer_monitor::declare_lost(const std::string& reason) {
  {
    std::lock_guard lock{mutex_};
    lost_ = reason;
  }
  LOCKSTEP_LOG_ERROR("worker {}: {}", rank_, reason);
  if (rank_ == 0) // tell the survivors which rank was lost
    for (auto& p : peers_)
      if (!p.gone)
        try {
          actors::collective_abort abort;
          abort.error = {error_kind::peer_lost_error, reason, "lockstep::peer_lost_error"};
          send_control(p.socket, abort, io_clock::now() + settings_.interval);
        } catch (const std::exception&) {
          // That one is going too; it learns from its own connections.
        }
  on_lost_(reason);
}

void peer_monitor::loop() {
  std::uint64_t sequence = 1;
  auto next_beat = io_clock::now();
  const auto live = [&] {
    return std::any_of(peers_.begin(), peers_.end(), [](const peer& p) { return !p.gone; });
  };
  while (live()) {
    auto now = io_clock::now();
    if (now >= next_beat) {
      const actors::heartbeat beat{static_cast<std::uint32_t>(rank_), 0, sequence++, steady_ns()};
      for (auto& p : peers_)
        if (!p.gone)
          try {
            send_control(p.socket, beat, now + settings_.interval);
          } catch (const std::exception& e) {
            return declare_lost(who(p.rank) + " was lost: its control connection failed ("
                                + e.what() + ")");
          }
      next_beat = now + settings_.interval;
    }
    auto wake_at = next_beat;
    for (const auto& p : peers_)
      if (!p.gone) {
        if (now - p.last_heard >= settings_.peer_timeout)
          return declare_lost(who(p.rank) + " was lost: no heartbeat for "
                              + std::to_string(settings_.peer_timeout.count())
                              + " ms (peer_timeout): the process is frozen or unreachable");
        wake_at = std::min(wake_at, p.last_heard + settings_.peer_timeout);
      }
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}};
    std::vector<peer*> polled;
    for (auto& p : peers_)
      if (!p.gone) {
        fds.push_back({p.socket.native_handle(), POLLIN, 0});
        polled.push_back(&p);
      }
    if (!poll_until(fds, wake_at))
      continue;
    if (fds[0].revents != 0)
      return; // stopping
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0)
        continue;
      auto& p = *polled[i - 1];
      try {
        const auto f = read_frame(p.socket, max_control_payload, io_clock::now() + settings_.interval);
        if (f.kind == static_cast<std::uint32_t>(control_kind::collective_abort))
          return declare_lost(decode_control<actors::collective_abort>(f).error.message);
        const auto beat = decode_control<actors::heartbeat>(f);
        p.last_heard = io_clock::now();
        if (beat.sequence == 0) {
          LOCKSTEP_LOG_DEBUG("worker {}: {} left", rank_, who(p.rank));
          p.gone = true;
        }
      } catch (const connection_closed& e) {
        return declare_lost(who(p.rank) + " was lost: its control connection closed ("
                            + e.what() + "; the process exited or was killed)");
      } catch (const std::exception& e) {
        return declare_lost(who(p.rank) + " was lost: its control connection failed ("
                            + e.what() + ")");
      }
    }
  }
}

} // namespace lockstep::detail
