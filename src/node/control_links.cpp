#include "node/control_links.hpp"

#include "node/control_messages.hpp"
#include "runtime/thread_start.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace lockstep::detail {

control_links::control_links(std::size_t rank, std::vector<tcp_socket> control,
                             std::chrono::milliseconds write_timeout)
  : write_timeout_(write_timeout) {
  for (std::size_t i = 0; i < control.size(); ++i) {
    if (rank == 0 && i == 0)
      continue; // the coordinator's own slot
    const auto peer = static_cast<std::uint32_t>(rank == 0 ? i : 0);
    links_.push_back({peer, std::move(control[i])});
  }
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(std::string("control_links: pipe2 failed: ") + std::strerror(errno));
}

void control_links::start(std::function<void(control_event)> deliver) {
  deliver_ = std::move(deliver);
  try {
    thread_ = start_thread("the control links (heartbeats between workers)", [this] { loop(); });
  } catch (...) {
    deliver_ = nullptr; // what it holds (the node actor's handle) goes now
    throw;
  }
}

control_links::~control_links() {
  stop();
  for (auto& l : links_) {
    boost::system::error_code ignored;
    l.socket.close(ignored);
  }
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void control_links::wake() {
  const char byte = 1;
  [[maybe_unused]] const auto written = ::write(wake_[1], &byte, 1);
}

std::vector<std::uint32_t> control_links::peers() const {
  std::vector<std::uint32_t> ranks;
  for (const auto& l : links_)
    ranks.push_back(l.peer);
  return ranks;
}

void control_links::post(std::uint32_t peer, const control_post& message) {
  {
    std::lock_guard lock{mutex_};
    queue_.emplace_back(peer, message);
  }
  wake();
}

void control_links::stop() {
  {
    std::lock_guard lock{mutex_};
    stopping_ = true;
  }
  wake();
  if (thread_.joinable())
    thread_.join();
}

void control_links::write_queued() {
  std::deque<std::pair<std::uint32_t, control_post>> queue;
  {
    std::lock_guard lock{mutex_};
    queue.swap(queue_);
  }
  for (auto& [peer, message] : queue)
    for (auto& l : links_) {
      if (l.peer != peer || l.failed)
        continue;
      try {
        std::visit([&](const auto& m) { send_control(l.socket, m, io_clock::now() + write_timeout_); },
                   message);
      } catch (const std::exception& e) {
        l.failed = true;
        deliver_({peer, std::string("its control connection failed (") + e.what() + ")"});
      }
    }
}

void control_links::loop() {
  for (;;) {
    write_queued();
    {
      std::lock_guard lock{mutex_};
      if (stopping_ && queue_.empty())
        return;
    }
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}};
    std::vector<link*> polled;
    for (auto& l : links_)
      if (!l.failed) {
        fds.push_back({l.socket.native_handle(), POLLIN, 0});
        polled.push_back(&l);
      }
    if (!poll_until(fds, io_clock::now() + std::chrono::seconds{1}))
      continue;
    if (fds[0].revents != 0) {
      char drained[64];
      while (::read(wake_[0], drained, sizeof drained) > 0) {
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0)
        continue;
      auto& l = *polled[i - 1];
      try {
        const auto f = read_frame(l.socket, max_control_payload, io_clock::now() + write_timeout_);
        if (f.kind == static_cast<std::uint32_t>(control_kind::collective_abort))
          deliver_({l.peer, decode_control<collective_abort>(f)});
        else if (f.kind == static_cast<std::uint32_t>(control_kind::collective_progress))
          deliver_({l.peer, decode_control<collective_progress>(f)});
        else
          deliver_({l.peer, decode_control<heartbeat>(f)});
      } catch (const connection_closed& e) {
        l.failed = true;
        deliver_({l.peer, std::string("its control connection closed (") + e.what()
                            + "; the process exited or was killed, or something on the "
                              "network path, a proxy or a firewall, cut the connection)"});
      } catch (const std::exception& e) {
        l.failed = true;
        deliver_({l.peer, std::string("its control connection failed (") + e.what() + ")"});
      }
    }
  }
}

} // namespace lockstep::detail
