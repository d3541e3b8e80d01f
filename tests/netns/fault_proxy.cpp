// fault_proxy: a userspace TCP proxy that the netns suite places between two
// network namespaces, where the kernel offers no netem and no iptables. It
// forwards each listen port to a target address and can, per chunk of bytes
// it reads, add a delay and jitter (keeping the bytes' order), throttle to
// a rate, stall (a partition: every byte held, nothing closed, until it
// resumes) and reset connections (RST on both sides, through SO_LINGER 0).
//
//   fault_proxy --forward [HOST:]PORT=IP:PORT [--forward ...]
//               [--delay MS] [--jitter MS] [--rate BYTES_PER_S] [--seed N]
//
// Commands, one a line on stdin (the test holds the pipe); each is answered
// "ok <command>" on stdout once it holds, or "error <why>":
//
//   delay MS [JITTER_MS]   each chunk leaves MS ± JITTER_MS (uniform) after it
//                          came, never before the chunk ahead of it
//   rate BYTES_PER_S       at most this many bytes a second per direction of
//                          a connection (0: no limit)
//   stall                  a partition: nothing is read, written, connected
//                          or closed (new connections are accepted and held)
//   resume                 everything held moves on
//   reset [PORT]           every connection (of the forward listening at
//                          PORT) is reset now, on both sides
//   reset-at BYTES [PORT]  every connection (of that forward), present and
//                          future, is reset once BYTES bytes have gone from
//                          its client to its target (0: never)
//   count                  prints "connections N" (those open now)
//
// Prints "ready" once every forward listens, and a line for each
// connection it accepts ("accepted PORT from IP:PORT") and resets. Ends on end of input (the test went away) or
// SIGTERM. A chunk is what one read returns (at most 64 KiB); at most
// 4 MiB wait in the proxy per direction, beyond which it stops reading, so
// a slow target slows its source down as TCP would.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::nanoseconds;

constexpr std::size_t chunk_bytes = 64 * 1024;
constexpr std::size_t held_bytes_limit = 4 * 1024 * 1024;

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "fault_proxy: %s\n", why.c_str());
  std::exit(2);
}

std::string errno_text() { return std::strerror(errno); }

/// "[HOST:]PORT" or "IP:PORT" as an IPv4 address; `what` names it in errors.
sockaddr_in parse_address(const std::string& text, bool host_optional, const std::string& what) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  const auto colon = text.rfind(':');
  std::string host = colon == std::string::npos ? "" : text.substr(0, colon);
  const std::string port = colon == std::string::npos ? text : text.substr(colon + 1);
  if (host.empty()) {
    if (!host_optional)
      fail(what + " '" + text + "' has no address: give IP:PORT");
    host = "0.0.0.0";
  }
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1)
    fail(what + " '" + text + "': '" + host + "' is not an IPv4 address");
  char* end = nullptr;
  const auto number = std::strtoul(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || number == 0 || number > 65535)
    fail(what + " '" + text + "': '" + port + "' is not a port from 1 to 65535");
  address.sin_port = htons(static_cast<std::uint16_t>(number));
  return address;
}

std::string to_string(const sockaddr_in& address) {
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &address.sin_addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(ntohs(address.sin_port));
}

void set_non_blocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void set_no_delay(int fd) {
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

/// Closes `fd` so that the peer gets a RST, not a FIN.
void close_with_reset(int fd) {
  if (fd < 0)
    return;
  const linger abort{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
  ::close(fd);
}

// -- what the proxy holds ---------------------------------------------------

struct forward {
  int listener = -1;
  sockaddr_in listen{};
  std::uint16_t port = 0; // the listen port, by which commands name it
  sockaddr_in target{};
  std::uint64_t reset_at = 0; // 0: never
};

/// Bytes read from one side, to be written to the other at `release`.
struct chunk {
  std::string bytes;
  std::size_t written = 0;
  clock_type::time_point release;
};

/// One direction of a connection: what came from `from` and waits for `to`.
struct direction {
  std::deque<chunk> held;
  std::size_t held_bytes = 0;
  bool source_ended = false; // `from` sent its FIN
  bool shut = false;         // passed on as our FIN to `to`
  clock_type::time_point last_release{};
  clock_type::time_point rate_free{}; // when the throttle lets the next chunk go
  std::uint64_t carried = 0;          // bytes written to `to`
};

struct connection {
  std::size_t forward_index = 0;
  int client = -1;
  int target = -1;
  bool connecting = false; // the target's connect is in progress
  sockaddr_in client_address{};
  direction up;   // client -> target
  direction down; // target -> client
};

struct settings {
  nanoseconds delay{0};
  nanoseconds jitter{0};
  std::uint64_t rate = 0; // bytes a second per direction; 0: no limit
  bool stalled = false;
};

class proxy {
public:
  proxy(std::vector<forward> forwards, settings initial, std::uint64_t seed)
    : forwards_(std::move(forwards)), settings_(initial), random_(seed) {}

  void listen();
  /// Until end of input.
  void run();

private:
  void accept_from(std::size_t forward_index);
  void start_connect(connection& c);
  /// Moves what can move for `c`; false when `c` is finished and closed.
  bool serve(connection& c, short client_events, short target_events);
  /// Reads a chunk from `from` into `d`; false on an error (reset it).
  bool read_into(int from, direction& d);
  /// Writes the ready chunks of `d` to `to`; false on an error.
  bool write_from(direction& d, int to, std::uint64_t reset_at, bool& reached_reset);
  void reset(connection& c, const std::string& why);
  /// The soonest time after `now` at which a held chunk is due.
  std::optional<clock_type::time_point> next_release(clock_type::time_point now) const;
  void command(const std::string& line);
  std::optional<std::size_t> forward_at(const std::string& port_text);

  std::vector<forward> forwards_;
  std::list<connection> connections_;
  settings settings_;
  std::mt19937_64 random_;
  std::string input_; // stdin's partial line
};

void proxy::listen() {
  for (auto& f : forwards_) {
    const auto address = f.listen;
    f.listener = ::socket(AF_INET, SOCK_STREAM, 0);
    const int on = 1;
    ::setsockopt(f.listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(f.listener, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0)
      fail("cannot listen at " + to_string(address) + ": " + errno_text());
    if (::listen(f.listener, 64) != 0)
      fail("cannot listen at port " + std::to_string(f.port) + ": " + errno_text());
    set_non_blocking(f.listener);
  }
  std::printf("ready\n");
  std::fflush(stdout);
}

void proxy::accept_from(std::size_t forward_index) {
  sockaddr_in from{};
  socklen_t length = sizeof from;
  const int fd = ::accept(forwards_[forward_index].listener, reinterpret_cast<sockaddr*>(&from),
                          &length);
  if (fd < 0)
    return;
  set_non_blocking(fd);
  set_no_delay(fd);
  auto& c = connections_.emplace_back();
  c.forward_index = forward_index;
  c.client = fd;
  c.client_address = from;
  std::printf("accepted %u from %s\n", static_cast<unsigned>(forwards_[forward_index].port),
              to_string(from).c_str());
  std::fflush(stdout);
  if (!settings_.stalled)
    start_connect(c);
}

void proxy::start_connect(connection& c) {
  const auto& target = forwards_[c.forward_index].target;
  c.target = ::socket(AF_INET, SOCK_STREAM, 0);
  set_non_blocking(c.target);
  set_no_delay(c.target);
  if (::connect(c.target, reinterpret_cast<const sockaddr*>(&target), sizeof target) == 0)
    return;
  if (errno == EINPROGRESS) {
    c.connecting = true;
    return;
  }
  // Refused at once: the client learns it as a reset.
  close_with_reset(c.target);
  c.target = -1;
}

bool proxy::read_into(int from, direction& d) {
  std::string bytes(chunk_bytes, '\0');
  const auto got = ::recv(from, bytes.data(), bytes.size(), 0);
  if (got < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (got == 0) {
    d.source_ended = true;
    return true;
  }
  bytes.resize(static_cast<std::size_t>(got));
  const auto now = clock_type::now();
  auto wait = settings_.delay;
  if (settings_.jitter.count() > 0)
    wait += nanoseconds(std::uniform_int_distribution<std::int64_t>(
      -settings_.jitter.count(), settings_.jitter.count())(random_));
  auto release = std::max({now + std::max(wait, nanoseconds{0}), d.last_release, d.rate_free});
  d.last_release = release;
  if (settings_.rate > 0)
    d.rate_free = release + nanoseconds(static_cast<std::int64_t>(
                              static_cast<double>(got) * 1e9 / static_cast<double>(settings_.rate)));
  d.held_bytes += bytes.size();
  d.held.push_back({std::move(bytes), 0, release});
  return true;
}

bool proxy::write_from(direction& d, int to, std::uint64_t reset_at, bool& reached_reset) {
  const auto now = clock_type::now();
  while (!d.held.empty() && d.held.front().release <= now) {
    if (reset_at > 0 && d.carried >= reset_at) {
      reached_reset = true;
      return true;
    }
    auto& head = d.held.front();
    auto size = head.bytes.size() - head.written;
    if (reset_at > 0)
      size = static_cast<std::size_t>(std::min<std::uint64_t>(size, reset_at - d.carried));
    const auto sent = ::send(to, head.bytes.data() + head.written, size, MSG_NOSIGNAL);
    if (sent < 0)
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    head.written += static_cast<std::size_t>(sent);
    d.carried += static_cast<std::uint64_t>(sent);
    d.held_bytes -= static_cast<std::size_t>(sent);
    if (reset_at > 0 && d.carried >= reset_at) {
      reached_reset = true;
      return true;
    }
    if (head.written < head.bytes.size())
      return true; // the socket is full
    d.held.pop_front();
  }
  if (d.held.empty() && d.source_ended && !d.shut) {
    ::shutdown(to, SHUT_WR);
    d.shut = true;
  }
  return true;
}

void proxy::reset(connection& c, const std::string& why) {
  std::printf("reset %s from %s after %llu bytes up, %llu down (%s)\n",
              std::to_string(forwards_[c.forward_index].port).c_str(),
              to_string(c.client_address).c_str(),
              static_cast<unsigned long long>(c.up.carried),
              static_cast<unsigned long long>(c.down.carried), why.c_str());
  std::fflush(stdout);
  close_with_reset(c.client);
  close_with_reset(c.target);
  c.client = c.target = -1;
}

bool proxy::serve(connection& c, short client_events, short target_events) {
  if (c.target < 0) { // the target refused
    reset(c, "the target refused the connection");
    return false;
  }
  if (c.connecting) {
    if ((target_events & (POLLOUT | POLLERR | POLLHUP)) == 0)
      return true;
    int error = 0;
    socklen_t length = sizeof error;
    ::getsockopt(c.target, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      reset(c, std::string("cannot connect to the target: ") + std::strerror(error));
      return false;
    }
    c.connecting = false;
    target_events = 0;
  }
  const bool client_error = (client_events & POLLERR) != 0;
  const bool target_error = (target_events & POLLERR) != 0;
  if (client_error || target_error) {
    reset(c, client_error ? "the client's side failed" : "the target's side failed");
    return false;
  }
  if ((client_events & (POLLIN | POLLHUP)) && !read_into(c.client, c.up)) {
    reset(c, "reading from the client: " + errno_text());
    return false;
  }
  if ((target_events & (POLLIN | POLLHUP)) && !read_into(c.target, c.down)) {
    reset(c, "reading from the target: " + errno_text());
    return false;
  }
  bool reached = false;
  const auto reset_at = forwards_[c.forward_index].reset_at;
  if (!write_from(c.up, c.target, reset_at, reached)) {
    reset(c, "writing to the target: " + errno_text());
    return false;
  }
  if (reached) {
    reset(c, "reset-at " + std::to_string(reset_at));
    return false;
  }
  bool never = false;
  if (!write_from(c.down, c.client, 0, never)) {
    reset(c, "writing to the client: " + errno_text());
    return false;
  }
  if (c.up.shut && c.down.shut) {
    ::close(c.client);
    ::close(c.target);
    c.client = c.target = -1;
    return false;
  }
  return true;
}

std::optional<clock_type::time_point> proxy::next_release(clock_type::time_point now) const {
  // A chunk due already waits for its socket (POLLOUT), not for the clock.
  std::optional<clock_type::time_point> next;
  for (const auto& c : connections_)
    for (const auto* d : {&c.up, &c.down})
      if (!d->held.empty() && d->held.front().release > now
          && (!next || d->held.front().release < *next))
        next = d->held.front().release;
  return next;
}

std::optional<std::size_t> proxy::forward_at(const std::string& port_text) {
  for (std::size_t i = 0; i < forwards_.size(); ++i)
    if (std::to_string(forwards_[i].port) == port_text)
      return i;
  return std::nullopt;
}

void proxy::command(const std::string& line) {
  std::istringstream in(line);
  std::string verb, first, second;
  in >> verb >> first >> second;
  const auto number = [](const std::string& text) -> std::optional<double> {
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(value >= 0))
      return std::nullopt;
    return value;
  };
  const auto milliseconds = [](double ms) {
    return nanoseconds(static_cast<std::int64_t>(ms * 1e6));
  };
  const auto answer = [&](const std::string& error) {
    if (error.empty())
      std::printf("ok %s\n", line.c_str());
    else
      std::printf("error %s: %s\n", line.c_str(), error.c_str());
    std::fflush(stdout);
  };
  // The forwards a command names: one port, or all.
  std::vector<std::size_t> named;
  const auto name_forwards = [&](const std::string& port) {
    if (port.empty()) {
      for (std::size_t i = 0; i < forwards_.size(); ++i)
        named.push_back(i);
      return true;
    }
    const auto index = forward_at(port);
    if (index)
      named.push_back(*index);
    return index.has_value();
  };
  if (verb == "delay" && number(first) && (second.empty() || number(second))) {
    settings_.delay = milliseconds(*number(first));
    settings_.jitter = second.empty() ? nanoseconds{0} : milliseconds(*number(second));
    return answer("");
  }
  if (verb == "rate" && number(first)) {
    settings_.rate = static_cast<std::uint64_t>(*number(first));
    return answer("");
  }
  if (verb == "stall") {
    settings_.stalled = true;
    return answer("");
  }
  if (verb == "resume") {
    settings_.stalled = false;
    // Held chunks leave now, not at the times they had before the stall
    // (they are in order already); held connections connect.
    const auto now = clock_type::now();
    for (auto& c : connections_) {
      for (auto* d : {&c.up, &c.down}) {
        for (auto& held : d->held)
          held.release = std::min(held.release, now);
        d->last_release = std::min(d->last_release, now);
        d->rate_free = std::min(d->rate_free, now);
      }
      if (c.target < 0 && c.client >= 0)
        start_connect(c);
    }
    return answer("");
  }
  if (verb == "reset") {
    if (!name_forwards(first))
      return answer("no forward listens at port " + first);
    // Closed here, removed by run() once it has served the round.
    for (auto& c : connections_)
      if (c.client >= 0 && std::find(named.begin(), named.end(), c.forward_index) != named.end())
        reset(c, "the reset command");
    return answer("");
  }
  if (verb == "reset-at" && number(first)) {
    if (!name_forwards(second))
      return answer("no forward listens at port " + second);
    for (const auto i : named)
      forwards_[i].reset_at = static_cast<std::uint64_t>(*number(first));
    return answer("");
  }
  if (verb == "count") {
    std::printf("connections %zu\n", connections_.size());
    return answer("");
  }
  answer("unknown command (delay, rate, stall, resume, reset, reset-at, count)");
}

void proxy::run() {
  set_non_blocking(STDIN_FILENO);
  for (;;) {
    // Who is polled: stdin, the listeners, and unless stalled every
    // connection's sockets for what they can move now.
    std::vector<pollfd> fds{{STDIN_FILENO, POLLIN, 0}};
    for (const auto& f : forwards_)
      fds.push_back({f.listener, POLLIN, 0});
    const auto first_connection = fds.size();
    const auto now = clock_type::now();
    if (!settings_.stalled)
      for (const auto& c : connections_) {
        short client = 0, target = 0;
        if (c.target >= 0 && !c.connecting) {
          if (!c.up.source_ended && c.up.held_bytes < held_bytes_limit)
            client |= POLLIN;
          if (!c.down.source_ended && c.down.held_bytes < held_bytes_limit)
            target |= POLLIN;
          if (!c.up.held.empty() && c.up.held.front().release <= now)
            target |= POLLOUT;
          if (!c.down.held.empty() && c.down.held.front().release <= now)
            client |= POLLOUT;
        }
        if (c.connecting)
          target |= POLLOUT;
        fds.push_back({c.client, client, 0});
        fds.push_back({c.target, target, 0});
      }
    timespec timeout{};
    const timespec* wait = nullptr; // until something happens
    if (const auto next = next_release(now); next && !settings_.stalled) {
      const auto due = std::chrono::duration_cast<nanoseconds>(*next - now).count();
      timeout = {static_cast<time_t>(due / 1'000'000'000), static_cast<long>(due % 1'000'000'000)};
      wait = &timeout;
    }
    if (::ppoll(fds.data(), fds.size(), wait, nullptr) < 0 && errno != EINTR)
      fail("poll: " + errno_text());

    if (fds[0].revents != 0) {
      char buffer[4096];
      const auto got = ::read(STDIN_FILENO, buffer, sizeof buffer);
      if (got == 0)
        return; // the test went away
      if (got > 0) {
        input_.append(buffer, static_cast<std::size_t>(got));
        for (auto end = input_.find('\n'); end != std::string::npos; end = input_.find('\n')) {
          const auto line = input_.substr(0, end);
          input_.erase(0, end + 1);
          if (!line.empty())
            command(line);
        }
      }
    }
    for (std::size_t i = 0; i < forwards_.size(); ++i)
      if (fds[1 + i].revents & POLLIN)
        accept_from(i);
    if (settings_.stalled)
      continue;
    // Serve the connections polled above (those accepted since wait for
    // the next round), in the order they were polled.
    auto c = connections_.begin();
    for (std::size_t k = first_connection; k + 1 < fds.size(); k += 2, ++c) {
      if (c->client < 0)
        continue;
      if (!serve(*c, fds[k].revents, fds[k + 1].revents))
        c->client = -1; // closed; removed below
    }
    connections_.remove_if([](const connection& c) { return c.client < 0; });
  }
}

} // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<forward> forwards;
  settings initial;
  std::uint64_t seed = 1;
  const auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc)
      fail(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  const auto milliseconds = [](const std::string& text, const char* what) {
    char* end = nullptr;
    const double ms = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(ms >= 0))
      fail(std::string(what) + " '" + text + "' is not a number of milliseconds");
    return nanoseconds(static_cast<std::int64_t>(ms * 1e6));
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--forward") {
      const auto text = value(i);
      const auto equals = text.find('=');
      if (equals == std::string::npos)
        fail("--forward '" + text + "' is not [HOST:]PORT=IP:PORT");
      forward f;
      f.listen = parse_address(text.substr(0, equals), true, "--forward's listen address");
      f.port = ntohs(f.listen.sin_port);
      f.target = parse_address(text.substr(equals + 1), false, "--forward's target");
      forwards.push_back(f);
    } else if (flag == "--delay") {
      initial.delay = milliseconds(value(i), "--delay");
    } else if (flag == "--jitter") {
      initial.jitter = milliseconds(value(i), "--jitter");
    } else if (flag == "--rate") {
      initial.rate = std::strtoull(value(i).c_str(), nullptr, 10);
    } else if (flag == "--seed") {
      seed = std::strtoull(value(i).c_str(), nullptr, 10);
    } else {
      fail("unknown option '" + flag
           + "' (--forward [HOST:]PORT=IP:PORT, --delay MS, --jitter MS, --rate BYTES_PER_S, "
             "--seed N)");
    }
  }
  if (forwards.empty())
    fail("give at least one --forward [HOST:]PORT=IP:PORT");
  proxy p(std::move(forwards), initial, seed);
  p.listen();
  p.run();
  return 0;
}
