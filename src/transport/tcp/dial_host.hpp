#pragma once

// Dialing a peer by host name until a deadline. A worker may start before
// the name of the host it dials resolves (a Kubernetes service whose pod
// has no address yet), and a name may resolve to several addresses (IPv6
// and IPv4, several records), of which only some reach the peer: so the
// name is looked up again on every round, and each of its addresses is
// tried in turn. Every wait ends at the deadline.

#include "transport/tcp/socket_io.hpp"

#include "lockstep/cluster_resolver.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::detail {

/// What a host name resolves to: its addresses in the resolver's order, or
/// none and why.
struct host_addresses {
  std::vector<boost::asio::ip::tcp::endpoint> endpoints;
  std::string error;
};

/// Looks up `host` with `port`, waiting at most until the deadline. A seam:
/// tests give one whose names resolve late, or to addresses they choose.
using host_resolver = std::function<host_addresses(
  const std::string& host, std::uint16_t port, io_clock::time_point deadline)>;

/// The most lookup threads (threaded_resolver) that may run at once in a
/// process; a resolver that would start another reports that it waits.
inline constexpr std::size_t max_lookup_threads = 4;

/// A resolver that runs each `lookup` of a name (not of an address, which
/// needs none) on a thread of its own, so the caller's wait ends at its
/// deadline even when the lookup does not; a lookup still running then
/// finishes alone, and the resolver's next call waits for it instead of
/// starting another. At most max_lookup_threads run at once across every
/// resolver of the process: beyond that a call starts none and reports
/// why, and the dial's next round asks again. For one caller at a time.
host_resolver threaded_resolver(
  std::function<host_addresses(const std::string& host, std::uint16_t port)> lookup);

/// How many lookup threads run now, across the process.
std::size_t lookup_threads_running() noexcept;

/// The system's resolver: threaded_resolver over getaddrinfo (whose only
/// limits are resolv.conf's).
host_resolver system_resolver();

/// How long one address may take to answer before the next one is tried
/// (a refusal answers at once; a host that drops the SYN never does).
inline constexpr std::chrono::seconds address_attempt_timeout{5};

/// The longest one round waits for a lookup (a lookup still running then
/// goes on, and the next round waits for it again).
inline constexpr std::chrono::seconds lookup_slice{5};

/// How a dial waits between rounds, and what it looks at before each.
struct dial_waits {
  /// Called before every round; it may throw to end the dial (a join's
  /// cancellation). Empty: nothing.
  std::function<void()> check;
  /// Sleeps between rounds; empty: std::this_thread::sleep_for. (A join
  /// passes one that wakes at once for a cancellation.)
  std::function<void(std::chrono::milliseconds)> sleep;
  /// A failure that lasts this long is logged (warn): a peer that is still
  /// starting is not worth a warning, one that cannot be reached is.
  std::chrono::milliseconds first_report{std::chrono::seconds{5}};
  /// Then one line at most per this interval until the dial ends.
  std::chrono::milliseconds report_interval{std::chrono::seconds{30}};
};

/// Connects `socket` to `address`: every round looks its host up with
/// `resolve` and tries each address it gives, in order, until one accepts;
/// rounds repeat with a growing pause (10 ms to 1 s) until the deadline.
/// A failure that lasts `waits.first_report` is logged, with the time the
/// dial goes on trying, and then at most one line per
/// `waits.report_interval`.
/// Throws lockstep::timeout_error naming `peer`, the address and the last
/// reason (the lookup's error or the last address's) at the deadline, and
/// what `waits.check` throws.
void dial_host(tcp_socket& socket, const network_address& address, std::string_view peer,
               io_clock::time_point deadline, const host_resolver& resolve = system_resolver(),
               const dial_waits& waits = {});

} // namespace lockstep::detail
