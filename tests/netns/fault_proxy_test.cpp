// The fault proxy (tests/netns/fault_proxy.cpp) on loopback, between a
// client and a server of this test: every byte arrives, in order, under
// delay and jitter and under a rate; a stall holds the bytes and closes
// nothing, and a resume releases them; a reset reaches both sides as a
// reset, not an end of stream; reset-at lets exactly that many bytes
// through first. Needs no root: it makes no namespace.

#include <doctest/doctest.h>

#include "../worker_processes.hpp"
#include "fault_proxy_process.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>

using namespace std::chrono_literals;

namespace {

/// A socket that closes with its scope.
class socket_fd {
public:
  explicit socket_fd(int fd = -1) : fd_(fd) {}
  ~socket_fd() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  socket_fd(socket_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  socket_fd& operator=(socket_fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  int get() const { return fd_; }

private:
  int fd_;
};

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  return a;
}

/// The server, the proxy in front of it, and a client connected through it
/// with the server's end accepted.
struct proxied_connection {
  int server_port = free_ports(2);
  int proxy_port = server_port + 1;
  socket_fd listener{::socket(AF_INET, SOCK_STREAM, 0)};
  temp_folder folder;
  std::optional<fault_proxy_process> proxy;
  socket_fd client;
  socket_fd server;

  explicit proxied_connection(const std::vector<std::string>& options = {}) {
    const auto address = loopback(server_port);
    REQUIRE(::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address)
            == 0);
    REQUIRE(::listen(listener.get(), 4) == 0);
    std::vector<std::string> argv{test_program("FAULT_PROXY"), "--forward",
                                  "127.0.0.1:" + std::to_string(proxy_port)
                                    + "=127.0.0.1:" + std::to_string(server_port)};
    argv.insert(argv.end(), options.begin(), options.end());
    proxy.emplace(argv, folder.path() / "proxy.txt");
    client = socket_fd{::socket(AF_INET, SOCK_STREAM, 0)};
    const auto to_proxy = loopback(proxy_port);
    REQUIRE(::connect(client.get(), reinterpret_cast<const sockaddr*>(&to_proxy), sizeof to_proxy)
            == 0);
    pollfd waiting{listener.get(), POLLIN, 0};
    REQUIRE(::poll(&waiting, 1, 10'000) == 1);
    server = socket_fd{::accept(listener.get(), nullptr, nullptr)};
    REQUIRE(server.get() >= 0);
  }
};

/// Reads from `fd` until `count` bytes came, the stream ended, it failed
/// (errno kept in `error`) or `limit` passed with nothing new.
std::string read_bytes(int fd, std::size_t count, int& error,
                       std::chrono::milliseconds limit = 10'000ms) {
  std::string got;
  error = 0;
  char buffer[65536];
  while (got.size() < count) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(limit.count())) == 0)
      break;
    const auto n = ::recv(fd, buffer, std::min(sizeof buffer, count - got.size()), 0);
    if (n < 0) {
      error = errno;
      break;
    }
    if (n == 0)
      break;
    got.append(buffer, static_cast<std::size_t>(n));
  }
  return got;
}

std::string random_bytes(std::size_t count) {
  std::mt19937 generator{11};
  std::string bytes(count, '\0');
  for (auto& b : bytes)
    b = static_cast<char>(generator() & 0xff);
  return bytes;
}

/// Sends `bytes` from a thread in writes of `piece` bytes.
std::thread send_all(int fd, const std::string& bytes, std::size_t piece) {
  return std::thread([fd, &bytes, piece] {
    for (std::size_t at = 0; at < bytes.size();) {
      const auto n = ::send(fd, bytes.data() + at, std::min(piece, bytes.size() - at),
                            MSG_NOSIGNAL);
      if (n <= 0)
        return;
      at += static_cast<std::size_t>(n);
    }
  });
}

} // namespace

TEST_CASE("every byte arrives in order under delay and jitter, and under a rate") {
  for (const auto& options : std::vector<std::vector<std::string>>{
         {"--delay", "1", "--jitter", "0.5"}, {"--delay", "2", "--jitter", "2", "--rate", "4000000"}}) {
    CAPTURE(options[1]);
    proxied_connection c(options);
    // Many small writes, so that many chunks get their own delays; both
    // directions at once.
    const auto up = random_bytes(1 << 20);
    const auto down = up.substr(1000) + up.substr(0, 1000);
    auto up_sender = send_all(c.client.get(), up, 1000);
    auto down_sender = send_all(c.server.get(), down, 3000);
    int error = 0;
    const auto got_up = read_bytes(c.server.get(), up.size(), error);
    const auto got_down = read_bytes(c.client.get(), down.size(), error);
    up_sender.join();
    down_sender.join();
    CHECK(got_up.size() == up.size());
    CHECK((got_up == up));
    CHECK((got_down == down));
  }
}

TEST_CASE("a stall holds the bytes and closes nothing; a resume releases them in order") {
  proxied_connection c;
  c.proxy->command("stall");
  REQUIRE(::send(c.client.get(), "abc", 3, 0) == 3);
  REQUIRE(::send(c.server.get(), "xyz", 3, 0) == 3);
  int error = 0;
  CHECK(read_bytes(c.server.get(), 3, error, 300ms).empty());
  CHECK(error == 0);
  CHECK(read_bytes(c.client.get(), 3, error, 100ms).empty());
  // A connection made during the stall is held as well.
  socket_fd late{::socket(AF_INET, SOCK_STREAM, 0)};
  const auto to_proxy = loopback(c.proxy_port);
  REQUIRE(::connect(late.get(), reinterpret_cast<const sockaddr*>(&to_proxy), sizeof to_proxy)
          == 0);
  pollfd waiting{c.listener.get(), POLLIN, 0};
  CHECK(::poll(&waiting, 1, 200) == 0);
  REQUIRE(::send(c.client.get(), "def", 3, 0) == 3);
  c.proxy->command("resume");
  CHECK(read_bytes(c.server.get(), 6, error) == "abcdef");
  CHECK(read_bytes(c.client.get(), 3, error) == "xyz");
  CHECK(::poll(&waiting, 1, 10'000) == 1); // the held connection reaches the server now
}

TEST_CASE("a reset reaches both sides as a reset, not as the end of the stream") {
  proxied_connection c;
  REQUIRE(::send(c.client.get(), "abc", 3, 0) == 3);
  int error = 0;
  REQUIRE(read_bytes(c.server.get(), 3, error) == "abc");
  c.proxy->command("count");
  CHECK(c.proxy->lines_starting("connections 1") == 1);
  c.proxy->command("reset");
  CHECK(read_bytes(c.server.get(), 1, error).empty());
  CHECK(error == ECONNRESET);
  CHECK(read_bytes(c.client.get(), 1, error).empty());
  CHECK(error == ECONNRESET);
  CHECK(c.proxy->lines_starting("reset " + std::to_string(c.proxy_port)) == 1);
}

TEST_CASE("reset-at lets exactly that many bytes through, then resets both sides") {
  proxied_connection c;
  c.proxy->command("reset-at 100000 " + std::to_string(c.proxy_port));
  const auto bytes = random_bytes(300'000);
  auto sender = send_all(c.client.get(), bytes, 7000);
  int error = 0;
  const auto got = read_bytes(c.server.get(), bytes.size(), error);
  sender.join();
  CHECK(got.size() == 100'000);
  CHECK((got == bytes.substr(0, 100'000)));
  CHECK(error == ECONNRESET);
  read_bytes(c.client.get(), 1, error);
  CHECK(error == ECONNRESET);
}
