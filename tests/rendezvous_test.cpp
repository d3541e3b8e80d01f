// Dialing the coordinator by name (src/transport/tcp/dial_host.hpp) and the
// rendezvous that uses it (src/node/rendezvous.hpp): a name that resolves
// only after a while (a Kubernetes service whose pod has no address yet),
// a name with several addresses of which the first refuses, and a name
// that never resolves, which ends at the deadline naming the address and
// the last reason. Resolvers are seams here: no DNS is needed, except for
// the system resolver's own test. No CAF actor system: suite 'unit'.

#include "node/rendezvous.hpp"
#include "transport/tcp/dial_host.hpp"

#include "test_support.hpp"

#include "lockstep/error.hpp"

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <string>
#include <thread>

using namespace lockstep;
using namespace lockstep::detail;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

asio::ip::tcp::endpoint loopback(std::uint16_t port) {
  return {asio::ip::make_address("127.0.0.1"), port};
}

/// A loopback port nobody listens on (it was bound, then released).
std::uint16_t closed_port(asio::io_context& context) {
  asio::ip::tcp::acceptor acceptor(context, loopback(0));
  return acceptor.local_endpoint().port();
}

/// A resolver whose name fails to resolve `failures` times, then gives
/// `endpoints`; counts its lookups.
struct late_resolver {
  int failures;
  std::vector<asio::ip::tcp::endpoint> endpoints;
  std::shared_ptr<std::atomic<int>> lookups = std::make_shared<std::atomic<int>>(0);

  host_resolver resolver() const {
    return [failures = failures, endpoints = endpoints, lookups = lookups](
             const std::string& host, std::uint16_t, io_clock::time_point) {
      if (lookups->fetch_add(1) < failures)
        return host_addresses{{}, "cannot resolve '" + host + "': Host not found"};
      return host_addresses{endpoints, {}};
    };
  }
};

const bytes token{'0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'a', 'b', 'c', 'd', 'e', 'f'};

} // namespace

TEST_CASE("dial_host: a name that resolves only after a few lookups is waited for") {
  asio::io_context context;
  asio::ip::tcp::acceptor acceptor(context, loopback(0));
  const late_resolver names{3, {acceptor.local_endpoint()}};
  tcp_socket socket(context);
  dial_host(socket, {"train-master-0", 23456}, "the coordinator", io_clock::now() + 10s,
            names.resolver());
  CHECK(socket.is_open());
  CHECK(names.lookups->load() == 4);
}

TEST_CASE("dial_host: every address of a name is tried, not only the first") {
  asio::io_context context;
  asio::ip::tcp::acceptor acceptor(context, loopback(0));
  const late_resolver names{0, {loopback(closed_port(context)), acceptor.local_endpoint()}};
  tcp_socket socket(context);
  dial_host(socket, {"master", 23456}, "the coordinator", io_clock::now() + 10s,
            names.resolver());
  CHECK(socket.remote_endpoint() == acceptor.local_endpoint());
  CHECK(names.lookups->load() == 1); // the second address, in the first round
}

TEST_CASE("dial_host: at the deadline the error names the address and the last reason") {
  asio::io_context context;
  tcp_socket socket(context);
  const late_resolver never{1 << 30, {}};
  const auto start = io_clock::now();
  const auto unresolved = error_of<timeout_error>([&] {
    dial_host(socket, {"master-0.train.svc", 23456}, "the coordinator", start + 300ms,
              never.resolver());
  });
  CHECK(io_clock::now() - start < 2s);
  CHECK(contains(unresolved, "the coordinator at master-0.train.svc:23456 did not accept a "
                             "connection before the deadline (last: cannot resolve "
                             "'master-0.train.svc': Host not found)"));
  CHECK(never.lookups->load() > 1); // looked up again on every round

  const auto port = closed_port(context);
  const late_resolver refusing{0, {loopback(port)}};
  const auto refused = error_of<timeout_error>([&] {
    dial_host(socket, {"master", 23456}, "the coordinator", io_clock::now() + 300ms,
              refusing.resolver());
  });
  CHECK(contains(refused, "the coordinator at master:23456 did not accept"));
  CHECK(contains(refused, "(last: 127.0.0.1:" + std::to_string(port) + ": Connection refused)"));
}

TEST_CASE("system_resolver: addresses without a lookup, names through getaddrinfo, bounded") {
  const auto resolve = system_resolver();
  const auto numeric = resolve("127.0.0.1", 80, io_clock::now());
  REQUIRE(numeric.endpoints.size() == 1);
  CHECK(numeric.endpoints[0] == loopback(80));
  const auto local = resolve("localhost", 80, io_clock::now() + 10s);
  REQUIRE_FALSE(local.endpoints.empty());
  CHECK(local.endpoints[0].address().is_loopback());
  // .invalid never resolves (RFC 6761); without DNS the wait still ends.
  const auto start = io_clock::now();
  const auto none = resolve("lockstep-test.invalid", 80, start + 10s);
  CHECK(none.endpoints.empty());
  CHECK_FALSE(none.error.empty());
  CHECK(io_clock::now() - start < 12s);
}

TEST_CASE("join_rendezvous: a worker started before the coordinator's name resolves joins") {
  asio::io_context context;
  asio::ip::tcp::acceptor acceptor(context, loopback(0));
  cluster_spec spec;
  spec.job_id = "rendezvous-test";
  spec.world_size = 2;
  spec.local_world_size = 1;
  spec.coordinator = network_address{"train-master-0", acceptor.local_endpoint().port()};
  rendezvous_settings coordinator{spec, token, 1, 7, {"127.0.0.1", 5000}, 10s, {}};
  std::exception_ptr failure;
  rendezvous_result at_coordinator;
  std::thread rank0([&] {
    try {
      at_coordinator = coordinate_rendezvous(acceptor, coordinator);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  spec.rank = 1;
  const late_resolver names{5, {acceptor.local_endpoint()}};
  const rendezvous_settings worker{spec, token, 1, 7, {"127.0.0.1", 5001}, 10s, names.resolver()};
  rendezvous_result joined;
  std::exception_ptr worker_failure;
  try {
    joined = join_rendezvous(context, worker);
  } catch (...) {
    worker_failure = std::current_exception();
  }
  rank0.join();
  for (const auto& error : {worker_failure, failure})
    if (error)
      std::rethrow_exception(error);
  CHECK(names.lookups->load() == 6);
  REQUIRE(joined.membership.members.size() == 2);
  CHECK(joined.membership.members[1].port == 5001);
  CHECK(at_coordinator.membership.members[1].port == 5001);
}
