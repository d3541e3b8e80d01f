// The floor under any all-reduce between 2 processes over loopback TCP,
// for tools/compare_tcp.sh: each operation, each of the 2 processes sends
// S bytes to the other while it receives S bytes from it (what a 2-rank
// all-reduce must at least move through the kernel: S/2 in each of the
// reduce-scatter and the all-gather, or S at once), on plain non-blocking
// sockets, spinning with zero-timeout poll(2), no reduction, no framing,
// no checks beyond the byte count. A 4-byte all-reduce cannot take less
// than one such exchange.
//
//   socket_floor [--sizes B,B,...] [--reps R] [--target-ms T]
//
// Per size: a warm-up estimates the time per exchange, K exchanges per
// batch last about T ms (rank 0 decides and sends K to rank 1), and R
// batches are timed on rank 0, each after one exchange that lines the two
// processes up. Each batch prints, as the other peers do:
//
//   CSV,floor,tcp,2,BYTES,K,BATCH,US_PER_OP
//
// Built by tools/compare_tcp.sh with g++; needs nothing but POSIX.

#include "peer_common.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "socket_floor: %s\n", what.c_str());
  std::exit(2);
}

[[noreturn]] void fail_errno(const std::string& what) {
  fail(what + ": " + std::strerror(errno));
}

struct options {
  std::vector<std::size_t> sizes{4, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
  int reps = 5;
  double target_ms = 300;
};

options parse(int argc, char** argv) {
  options opts;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc)
      fail(flag + ": missing value");
    const std::string value = argv[++i];
    if (flag == "--sizes")
      opts.sizes = peers::parse_sizes(value, std::size_t{1} << 30, fail);
    else if (flag == "--reps")
      opts.reps = std::atoi(value.c_str());
    else if (flag == "--target-ms")
      opts.target_ms = std::atof(value.c_str());
    else
      fail("unknown option " + flag
           + " (usage: socket_floor [--sizes B,B,...] [--reps R] [--target-ms T])");
  }
  if (opts.reps < 1 || opts.target_ms <= 0)
    fail("--reps and --target-ms must be positive");
  return opts;
}

/// A listening socket on a free loopback port, and the port.
std::pair<int, int> listen_on_loopback() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0
      || ::listen(fd, 1) != 0
      || ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    fail_errno("listening on loopback");
  return {fd, ntohs(address.sin_port)};
}

int dial(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    fail_errno("connecting on loopback");
  return fd;
}

/// The two connections, one each way, as in a ring of two.
struct links {
  int to = -1;
  int from = -1;
};

/// Sends `out` while it receives as many bytes into `in`, on non-blocking
/// sockets; spins on poll(2) with a zero timeout when neither moves (as
/// lockstep's ring does while both workers have a CPU).
void exchange(const links& fd, const char* out, char* in, std::size_t size) {
  std::size_t sent = 0;
  std::size_t received = 0;
  while (sent < size || received < size) {
    bool moved = false;
    if (sent < size) {
      const auto n = ::send(fd.to, out + sent, size - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        moved = true;
      } else if (n < 0 && errno != EAGAIN) {
        fail_errno("send");
      }
    }
    if (received < size) {
      const auto n = ::recv(fd.from, in + received, size - received, 0);
      if (n > 0) {
        received += static_cast<std::size_t>(n);
        moved = true;
      } else if (n == 0) {
        fail("the other process closed the connection");
      } else if (errno != EAGAIN) {
        fail_errno("recv");
      }
    }
    if (!moved) {
      pollfd entries[2] = {{fd.to, static_cast<short>(sent < size ? POLLOUT : 0), 0},
                           {fd.from, static_cast<short>(received < size ? POLLIN : 0), 0}};
      ::poll(entries, 2, 0);
    }
  }
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int run(int rank, const links& fd, const options& opts) {
  for (const auto bytes : opts.sizes) {
    std::vector<char> out(bytes, static_cast<char>(rank + 1));
    std::vector<char> in(bytes);
    const auto once = [&] { exchange(fd, out.data(), in.data(), bytes); };
    once();
    if (in.front() != static_cast<char>(2 - rank) || in.back() != static_cast<char>(2 - rank))
      fail("the bytes received are not the other process's");
    const int warmup = bytes <= 65536 ? 20 : 3;
    const auto start = seconds_now();
    for (int i = 0; i < warmup; ++i)
      once();
    const double per_op = (seconds_now() - start) / warmup;
    // Rank 0 decides the batch length and sends it in an exchange of its own.
    std::int32_t batch =
      static_cast<std::int32_t>(std::clamp(std::ceil(opts.target_ms / 1e3 / per_op), 3.0, 1e6));
    std::int32_t theirs = 0;
    exchange(fd, reinterpret_cast<const char*>(&batch), reinterpret_cast<char*>(&theirs),
             sizeof batch);
    if (rank == 1)
      batch = theirs;
    for (int rep = 0; rep < opts.reps; ++rep) {
      once(); // lines the two up
      const auto begin = seconds_now();
      for (std::int32_t i = 0; i < batch; ++i)
        once();
      const auto elapsed = seconds_now() - begin;
      if (rank == 0)
        std::printf("CSV,floor,tcp,2,%zu,%d,%d,%.3f\n", bytes, batch, rep, elapsed / batch * 1e6);
    }
    std::fflush(stdout);
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  const auto opts = parse(argc, argv);
  // Each process listens before the fork, so neither dials a port not yet open.
  const auto [listener0, port0] = listen_on_loopback();
  const auto [listener1, port1] = listen_on_loopback();
  const pid_t child = ::fork();
  if (child < 0)
    fail_errno("fork");
  const int rank = child == 0 ? 1 : 0;
  ::close(rank == 0 ? listener1 : listener0);
  const int listener = rank == 0 ? listener0 : listener1;
  links fd;
  fd.to = dial(rank == 0 ? port1 : port0);
  fd.from = ::accept(listener, nullptr, nullptr);
  if (fd.from < 0)
    fail_errno("accept");
  ::close(listener);
  const int one = 1;
  ::setsockopt(fd.to, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  for (const int socket : {fd.to, fd.from})
    if (::fcntl(socket, F_SETFL, O_NONBLOCK) != 0)
      fail_errno("fcntl");
  const int status = run(rank, fd, opts);
  ::close(fd.to);
  ::close(fd.from);
  if (rank == 1)
    return status;
  int child_status = 0;
  if (::waitpid(child, &child_status, 0) < 0 || !WIFEXITED(child_status)
      || WEXITSTATUS(child_status) != 0)
    fail("the second process failed");
  return status;
}
