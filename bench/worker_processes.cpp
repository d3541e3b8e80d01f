// loopback_stream_rates: two processes, one loopback TCP connection, a
// sending thread and a receiving loop in each.

#include "worker_processes.hpp"

#include "bench_support.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

namespace lockstep::bench {

namespace {

constexpr std::size_t message_bytes = 64 << 20;

[[noreturn]] void fail(const char* what) {
  throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

void send_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const auto n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0)
      fail("send");
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

void receive_all(int fd, char* data, std::size_t size) {
  while (size > 0) {
    const auto n = ::recv(fd, data, size, 0);
    if (n <= 0)
      fail("recv");
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

/// The connected socket of `rank` (0 accepts on `listener`, 1 dials `port`).
int connect_pair(std::size_t rank, int listener, std::uint16_t port) {
  if (rank == 0) {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0)
      fail("accept");
    return fd;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    fail("connect");
  return fd;
}

/// Each repetition: both sides send `count` messages while receiving the
/// other's; the first byte of every message is checked, so no side
/// measures a stream that the other did not send.
std::vector<double> stream(int fd, std::size_t reps, std::size_t count) {
  std::vector<char> out(message_bytes, 1), in(message_bytes);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<double> rates;
  for (std::size_t rep = 0; rep < reps; ++rep) {
    char token = 0; // both sides start together
    send_all(fd, &token, 1);
    receive_all(fd, &token, 1);
    const auto start = std::chrono::steady_clock::now();
    std::exception_ptr send_failure;
    std::thread sender([&] {
      try {
        for (std::size_t i = 0; i < count; ++i)
          send_all(fd, out.data(), out.size());
      } catch (...) {
        send_failure = std::current_exception();
      }
    });
    try {
      for (std::size_t i = 0; i < count; ++i) {
        receive_all(fd, in.data(), in.size());
        if (in[0] != 1)
          throw std::runtime_error("loopback bound: a message arrived damaged");
      }
    } catch (...) {
      ::shutdown(fd, SHUT_RDWR); // ends the sender's send
      sender.join();
      throw;
    }
    sender.join();
    if (send_failure)
      std::rethrow_exception(send_failure);
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    rates.push_back(2.0 * static_cast<double>(count * message_bytes) / seconds.count());
  }
  return rates;
}

} // namespace

loopback_listener listen_on_loopback() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0
      || ::listen(fd, 1) != 0
      || ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    if (fd >= 0)
      ::close(fd);
    return {-1, 0};
  }
  return {fd, ntohs(address.sin_port)};
}

std::vector<double> loopback_stream_rates(std::size_t reps, std::size_t budget_ms) {
  const auto [listener, port] = listen_on_loopback();
  if (listener < 0)
    return {};
  // About 30 ms a message on the 2-core VM.
  const auto count = std::max<std::size_t>(2, budget_ms / 30);
  auto rates = run_processes(2, reps, [&](std::size_t rank) {
    const int fd = connect_pair(rank, listener, port);
    auto samples = stream(fd, reps, count);
    ::close(fd);
    return samples;
  });
  ::close(listener);
  return rates;
}

void print_worker_table_header() {
  std::printf("| W | bytes | time us | algbw GB/s | busbw GB/s | bound GB/s | of bound |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
}

worker_figures print_worker_row(std::size_t world, std::size_t bytes, double seconds,
                                double stream_rate) {
  const auto w = static_cast<double>(world);
  worker_figures f{};
  f.algbw = static_cast<double>(bytes) / seconds;
  f.busbw = f.algbw * 2.0 * (w - 1) / w;
  if (stream_rate <= 0) {
    std::printf("| %zu | %s | %.1f | %.3f | %.3f | - | - |\n", world, size_string(bytes).c_str(),
                seconds * 1e6, f.algbw / 1e9, f.busbw / 1e9);
    return f;
  }
  f.bound = stream_rate / (2.0 * (w - 1));
  std::printf("| %zu | %s | %.1f | %.3f | %.3f | %.2f | %.0f%% |\n", world,
              size_string(bytes).c_str(), seconds * 1e6, f.algbw / 1e9, f.busbw / 1e9,
              f.bound / 1e9, 100.0 * f.algbw / f.bound);
  return f;
}

} // namespace lockstep::bench
