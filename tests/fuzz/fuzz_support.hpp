#pragma once

// What the fuzz targets of tests/fuzz share: a connected pair of sockets
// (an AF_UNIX socketpair behind Asio's tcp::socket, so the code under test
// reads and writes exactly as it does on a TCP connection), a reader of the
// fuzzer's bytes, the cluster every target pretends to be, and the one way
// a target reports a broken guarantee (abort, which libFuzzer and
// replay_main.cpp both report as a crash with the input that caused it).
//
// Every target defines LLVMFuzzerTestOneInput and lockstep_fuzz_seeds():
// the valid inputs its corpus starts from (tests/fuzz/corpus/<target>/ holds
// them as files, written by `fuzz_<target>_replay --write-seeds DIR`).

#include "transport/tcp/handshake.hpp"
#include "transport/tcp/socket_io.hpp"

#include <boost/asio/io_context.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace lockstep::fuzz {

using detail::bytes;
using detail::io_clock;
using detail::tcp_socket;

/// A guarantee broke: print why and abort.
[[noreturn]] inline void broken(const std::string& why) {
  std::fprintf(stderr, "fuzz: guarantee broken: %s\n", why.c_str());
  std::fflush(stderr);
  std::abort();
}

/// Both ends of a fresh connection, as tcp sockets on `context`.
inline std::pair<tcp_socket, tcp_socket> connected_pair(boost::asio::io_context& context) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    broken("socketpair failed");
  tcp_socket a(context), b(context);
  a.assign(boost::asio::ip::tcp::v4(), fds[0]);
  b.assign(boost::asio::ip::tcp::v4(), fds[1]);
  return {std::move(a), std::move(b)};
}

/// Writes as much of `data` as the connection buffers without blocking
/// (inputs are small: all of it), then closes the sending direction, so
/// the other end reads `data` and then end of stream.
inline void send_then_close(tcp_socket& socket, std::span<const std::uint8_t> data) {
  socket.non_blocking(true);
  std::size_t sent = 0;
  while (sent < data.size()) {
    const auto n = ::send(socket.native_handle(), data.data() + sent, data.size() - sent,
                          MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0)
      break;
    sent += static_cast<std::size_t>(n);
  }
  ::shutdown(socket.native_handle(), SHUT_WR);
}

/// Reads the fuzzer's bytes front to back; past the end it gives zeros
/// and empty spans, so a target never reads out of bounds.
class input_reader {
public:
  explicit input_reader(std::span<const std::uint8_t> data) : data_(data) {}

  std::uint8_t byte() {
    return at_ < data_.size() ? data_[at_++] : 0;
  }

  std::uint16_t u16() {
    const std::uint16_t low = byte();
    return static_cast<std::uint16_t>(low | (byte() << 8));
  }

  /// The next `n` bytes, or as many as are left.
  std::span<const std::uint8_t> take(std::size_t n) {
    const auto count = std::min(n, data_.size() - at_);
    const auto part = data_.subspan(at_, count);
    at_ += count;
    return part;
  }

  /// Everything not read yet.
  std::span<const std::uint8_t> rest() { return take(data_.size() - at_); }

  bool empty() const noexcept { return at_ == data_.size(); }

private:
  std::span<const std::uint8_t> data_;
  std::size_t at_ = 0;
};

/// How the harness changes one message before sending it.
struct edit {
  enum class op : std::uint8_t { keep, flip, cut, replace };
  op what = op::keep;
  std::size_t at = 0;
  std::uint8_t mask = 0;
  std::span<const std::uint8_t> replacement;

  static edit read(input_reader& in) {
    edit e;
    e.what = static_cast<op>(in.byte() % 4);
    e.at = in.u16();
    e.mask = in.byte();
    if (e.what == op::replace)
      e.replacement = in.take(in.byte());
    return e;
  }

  /// `genuine` as sent; `closes` says whether the connection closes after it.
  bytes apply(const bytes& genuine, bool& closes) const {
    closes = false;
    switch (what) {
      case op::keep:
        return genuine;
      case op::flip: {
        auto out = genuine;
        if (!out.empty())
          out[at % out.size()] ^= mask;
        return out;
      }
      case op::cut:
        closes = true;
        return {genuine.begin(),
                genuine.begin() + static_cast<std::ptrdiff_t>(genuine.empty() ? 0 : at % genuine.size())};
      case op::replace:
        return {replacement.begin(), replacement.end()};
    }
    return genuine;
  }
};

/// The cluster the targets run in: its token, job and generation.
inline const bytes& cluster_token() {
  static const bytes token(32, 0x6b);
  return token;
}
inline constexpr const char* job_id = "fuzz-job";
inline constexpr std::uint64_t generation = 3;

/// A deadline that a target never reaches unless it hangs: every input
/// ends in end of stream, so any wait that lasts this long is a hang.
inline io_clock::time_point hang_deadline() {
  return io_clock::now() + std::chrono::seconds{10};
}

} // namespace lockstep::fuzz

/// The valid inputs a target's corpus starts from.
std::vector<std::vector<std::uint8_t>> lockstep_fuzz_seeds();
