// Dialing the coordinator by name (src/transport/tcp/dial_host.hpp) and the
// rendezvous that uses it (src/node/rendezvous.hpp): a name that resolves
// only after a while (a Kubernetes service whose pod has no address yet),
// a name with several addresses of which the first refuses, and a name
// that never resolves, which ends at the deadline naming the address and
// the last reason. Resolvers are seams here: no DNS is needed, except for
// the system resolver's own test. Then the coordinator's side: strangers
// that connect and stay silent or send garbage, a worker with another
// token, settings that differ, a world too large to list. No CAF actor
// system: suite 'unit'.

#include "node/agreed_settings.hpp"
#include "node/rendezvous.hpp"
#include "transport/tcp/dial_host.hpp"

#include "log_capture.hpp"
#include "test_support.hpp"

#include "lockstep/error.hpp"
#include "lockstep/multi_worker_mirrored_strategy.hpp"

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
  rendezvous_settings coordinator{spec, token, 1, {}, {"127.0.0.1", 5000}, 10s, {}};
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
  const rendezvous_settings worker{spec, token, 1, {}, {"127.0.0.1", 5001}, 10s, names.resolver()};
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

// -- the coordinator under strangers, bad tokens and settings that differ ----------

namespace {

/// A cluster of `world` on loopback for in-process rendezvous tests: rank
/// 0's acceptor and the settings of each rank.
struct loopback_cluster {
  asio::io_context context;
  asio::ip::tcp::acceptor acceptor{context, loopback(0)};
  std::size_t world;
  std::chrono::milliseconds join_timeout;

  loopback_cluster(std::size_t world_size, std::chrono::milliseconds timeout)
    : world(world_size), join_timeout(timeout) {}

  rendezvous_settings settings(std::size_t rank,
                               std::vector<detail::agreed_setting> agreed = {}) const {
    cluster_spec spec;
    spec.job_id = "rendezvous-test";
    spec.world_size = world;
    spec.rank = rank;
    spec.coordinator = network_address{"127.0.0.1", acceptor.local_endpoint().port()};
    return {spec, token, 1, std::move(agreed),
            {"127.0.0.1", static_cast<std::uint16_t>(6000 + rank)}, join_timeout, {}};
  }
};

/// One rank's rendezvous, run on a thread of its own; what it returned or
/// threw.
class rank_thread {
public:
  explicit rank_thread(std::function<rendezvous_result()> body)
    : thread_([this, body = std::move(body)] {
        try {
          result_ = body();
        } catch (...) {
          failure_ = std::current_exception();
        }
        done_.store(true);
      }) {}
  ~rank_thread() {
    if (thread_.joinable())
      thread_.join();
  }

  bool done() const { return done_.load(); }

  /// The result, once the rendezvous ended; rethrows its failure.
  rendezvous_result& get() {
    if (thread_.joinable())
      thread_.join();
    if (failure_)
      std::rethrow_exception(failure_);
    return result_;
  }

private:
  rendezvous_result result_;
  std::exception_ptr failure_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

rank_thread coordinator_of(loopback_cluster& cluster,
                           std::vector<detail::agreed_setting> agreed = {}) {
  return rank_thread([&cluster, agreed = std::move(agreed)] {
    return coordinate_rendezvous(cluster.acceptor, cluster.settings(0, agreed));
  });
}

rank_thread worker_of(loopback_cluster& cluster, std::size_t rank,
                      std::vector<detail::agreed_setting> agreed = {}, bytes with_token = token) {
  return rank_thread([&cluster, rank, agreed = std::move(agreed), with_token] {
    auto settings = cluster.settings(rank, agreed);
    settings.token = with_token;
    // The sockets stay tied to the cluster's context, which outlives them.
    return join_rendezvous(cluster.context, settings);
  });
}

/// A connection to the coordinator that sends `bytes` and then nothing.
tcp_socket stranger(asio::io_context& context, const asio::ip::tcp::endpoint& at,
                    const std::string& bytes) {
  tcp_socket socket(context);
  socket.connect(at);
  if (!bytes.empty())
    asio::write(socket, asio::buffer(bytes));
  return socket;
}

} // namespace

TEST_CASE("coordinate_rendezvous: 16 idle and 16 garbage connections do not stall the join") {
  loopback_cluster cluster(3, 30s);
  const auto at = cluster.acceptor.local_endpoint();
  asio::io_context strangers_context;
  std::vector<tcp_socket> strangers;
  // Silent ones; garbage too short for a hello (waits for more); garbage
  // long enough to be refused at once; a hello that stops half way.
  for (int i = 0; i < 16; ++i)
    strangers.push_back(stranger(strangers_context, at, ""));
  for (int i = 0; i < 8; ++i)
    strangers.push_back(stranger(strangers_context, at, "GET / HTTP/1.0"));
  for (int i = 0; i < 7; ++i)
    strangers.push_back(stranger(strangers_context, at, std::string(200, 'x')));
  strangers.push_back(stranger(strangers_context, at, "LKST\x01"));
  log_capture log;
  auto rank0 = coordinator_of(cluster);
  auto rank1 = worker_of(cluster, 1);
  auto rank2 = worker_of(cluster, 2);
  const auto& joined = rank1.get().membership;
  CHECK(joined.members.size() == 3);
  CHECK(rank2.get().membership == joined);
  CHECK(rank0.get().membership == joined);
  // Each handshake took its own slot: no worker had to try again.
  CHECK_FALSE(contains(log.text(), "trying again"));
}

TEST_CASE("coordinate_rendezvous: past max_pending_joins strangers the oldest is dropped") {
  loopback_cluster cluster(2, 30s);
  const auto at = cluster.acceptor.local_endpoint();
  asio::io_context strangers_context;
  std::vector<tcp_socket> strangers;
  for (std::size_t i = 0; i < max_pending_joins + 6; ++i)
    strangers.push_back(stranger(strangers_context, at, ""));
  log_capture log;
  auto rank0 = coordinator_of(cluster);
  auto rank1 = worker_of(cluster, 1);
  CHECK(rank1.get().membership.members.size() == 2);
  CHECK(rank0.get().membership.members.size() == 2);
  CHECK(contains(log.text(), "connections in their handshake; dropped the oldest"));
  // The first stranger was dropped: its connection reads end of file.
  boost::system::error_code error;
  char byte = 0;
  strangers.front().read_some(asio::buffer(&byte, 1), error);
  CHECK(error == asio::error::eof);
}

TEST_CASE("coordinate_rendezvous: a worker with another token is logged at once and named by "
          "every worker's join error") {
  loopback_cluster cluster(3, 3s);
  log_capture log;
  auto rank0 = coordinator_of(cluster);
  auto rank1 = worker_of(cluster, 1);
  bytes other_token = token;
  other_token.back() = 'g';
  auto rank2 = worker_of(cluster, 2, {}, other_token);
  const auto refused = error_of<authentication_error>([&] { rank2.get(); });
  CHECK(contains(refused, "did not prove the cluster token"));
  // Logged while the coordinator still waits, with the address and the
  // reason.
  const auto logged_at_once = [&] {
    return contains(log.text(), "(another cluster token)");
  };
  while (!logged_at_once() && !rank0.done())
    std::this_thread::sleep_for(1ms);
  CHECK(logged_at_once());
  CHECK_FALSE(rank0.done());
  const auto logged = log.text();
  CHECK_MESSAGE(contains(logged, "rendezvous: 127.0.0.1:"), logged);
  CHECK_MESSAGE(contains(logged, "it did not accept this cluster's proof of the token (another "
                                 "cluster token)"),
                logged);
  const auto at_coordinator = error_of<timeout_error>([&] { rank0.get(); });
  CHECK(contains(at_coordinator, "worker(s) 2 of 3 did not join within 3000 ms; refused "
                                 "meanwhile: 127.0.0.1:"));
  CHECK(contains(at_coordinator, "(another cluster token)"));
  // The worker that joined hears the same error, not a closed connection.
  const auto at_worker = error_of<timeout_error>([&] { rank1.get(); });
  CHECK_MESSAGE(at_worker == at_coordinator, at_worker);
}

TEST_CASE("coordinate_rendezvous: settings that differ fail every worker, naming each value and "
          "rank") {
  loopback_cluster cluster(3, 30s);
  const std::vector<detail::agreed_setting> agreed{{"--lr", "0.1"}, {"--seed", "42"}};
  auto rank0 = coordinator_of(cluster, agreed);
  auto rank1 = worker_of(cluster, 1, {{"--lr", "0.1"}, {"--seed", "7"}});
  auto rank2 = worker_of(cluster, 2, {{"--lr", "0.05"}, {"--seed", "42"}, {"--epochs", "3"}});
  const auto expected =
    "rendezvous of job 'rendezvous-test': the workers' settings differ (every worker must run "
    "with the same): --lr is \"0.1\" on workers 0, 1; \"0.05\" on worker 2. --seed is \"42\" on "
    "workers 0, 2; \"7\" on worker 1. --epochs is not declared on workers 0, 1; \"3\" on worker 2";
  CHECK(error_of<value_error>([&] { rank0.get(); }) == expected);
  CHECK(error_of<value_error>([&] { rank1.get(); }) == expected);
  CHECK(error_of<value_error>([&] { rank2.get(); }) == expected);
}

TEST_CASE("coordinate_rendezvous: equal settings join; a world of 2000 lists its missing ranks "
          "cut") {
  loopback_cluster agreeing(2, 30s);
  auto rank0 = coordinator_of(agreeing, {{"--lr", "0.1"}});
  auto rank1 = worker_of(agreeing, 1, {{"--lr", "0.1"}});
  CHECK(rank1.get().membership.members.size() == 2);
  CHECK(rank0.get().membership.members.size() == 2);

  loopback_cluster large(2000, 200ms);
  const auto why =
    error_of<timeout_error>([&] { coordinate_rendezvous(large.acceptor, large.settings(0)); });
  CHECK(contains(why, "worker(s) 1, 2, 3, 4, 5, 6, 7, 8, ... and 1991 more of 2000 did not join"));
  CHECK(why.size() < 200);
}

TEST_CASE("check_agreed_settings: the limits, and lockstep's own names") {
  CHECK_NOTHROW(check_agreed_settings({{"--lr", "0.1"}, {"seed", ""}}));
  CHECK(contains(error_of<value_error>([] { check_agreed_settings({{"", "1"}}); }),
                 "a setting's name must have 1 to 128 bytes"));
  CHECK(contains(error_of<value_error>([] { check_agreed_settings({{"a", "1"}, {"a", "2"}}); }),
                 "\"a\" is declared twice"));
  CHECK(contains(error_of<value_error>([] {
                   check_agreed_settings({{"a", std::string(max_setting_value_bytes + 1, 'v')}});
                 }),
                 "the value of \"a\" has 1025 bytes, at most 1024"));
  std::vector<detail::agreed_setting> many;
  for (std::size_t i = 0; i <= max_agreed_settings; ++i)
    many.push_back({"s" + std::to_string(i), "1"});
  CHECK(contains(error_of<value_error>([&] { check_agreed_settings(many); }),
                 "65 settings, at most 64"));
}

TEST_CASE("dial_host: a failure that lasts is logged, then at most a line per interval") {
  log_capture log;
  asio::io_context context;
  tcp_socket socket(context);
  const late_resolver never{1 << 30, {}};
  error_of<timeout_error>([&] {
    dial_host(socket, {"master-0.train.svc", 23456}, "the coordinator", io_clock::now() + 1500ms,
              never.resolver(), {.first_report = 100ms, .report_interval = 200ms});
  });
  const auto text = log.text();
  CHECK_MESSAGE(contains(text, "dialing the coordinator at master-0.train.svc:23456: failing for "),
                text);
  CHECK(contains(text, " s (last: cannot resolve 'master-0.train.svc': Host not found); "
                       "retrying for up to "));
  std::size_t lines = 0;
  for (std::size_t at = 0; (at = text.find("dialing the coordinator", at)) != std::string::npos;
       ++at)
    ++lines;
  CHECK(lines >= 2); // the first, and progress
  CHECK(lines <= 4); // not one per attempt
  CHECK(never.lookups->load() > 4);
}

TEST_CASE("multi_worker_mirrored_strategy: a program's setting may not take lockstep's own name") {
  // Refused before any socket opens: no coordinator listens at port 1.
  const cluster_resolver two({.world_size = 2, .rank = 1, .coordinator = "127.0.0.1:1"}, {});
  multi_worker_options options;
  options.agreed_settings = {{"--lr", "0.1"}, {"replicas per worker", "4"}};
  CHECK(contains(error_of<value_error>([&] { multi_worker_mirrored_strategy s(two, options); }),
                 "\"replicas per worker\" is lockstep's own setting"));
  options.agreed_settings = {{"--lr", "0.1"}, {"--lr", "0.2"}};
  CHECK(contains(error_of<value_error>([&] { multi_worker_mirrored_strategy s(two, options); }),
                 "\"--lr\" is declared twice"));
}

TEST_CASE("threaded_resolver: lookups that hang hold at most max_lookup_threads threads") {
  std::mutex mutex;
  std::condition_variable released;
  bool release = false;
  std::atomic<std::size_t> started{0};
  const auto hangs = [&](const std::string&, std::uint16_t port) {
    ++started;
    std::unique_lock<std::mutex> lock{mutex};
    released.wait(lock, [&] { return release; });
    return host_addresses{{loopback(port)}, {}};
  };
  // Lookups of other tests may still run: fill what is left.
  const auto room = max_lookup_threads - std::min(max_lookup_threads, lookup_threads_running());
  std::vector<host_resolver> resolvers;
  for (std::size_t i = 0; i <= room; ++i)
    resolvers.push_back(threaded_resolver(hangs));
  for (std::size_t i = 0; i < room; ++i) {
    const auto found = resolvers[i]("hangs.example", 80, io_clock::now() + 50ms);
    CHECK(found.endpoints.empty());
    CHECK(contains(found.error, "did not finish"));
  }
  const auto refused = resolvers[room]("hangs.example", 80, io_clock::now() + 50ms);
  CHECK(refused.endpoints.empty());
  CHECK(contains(refused.error, std::to_string(max_lookup_threads)
                                  + " lookups of this process are still running"));
  CHECK(lookup_threads_running() == max_lookup_threads);
  CHECK(started == room); // no thread for the refused one
  {
    std::lock_guard<std::mutex> lock{mutex};
    release = true;
  }
  released.notify_all();
  // Each pending lookup answers its resolver's next call; the refused one
  // starts its lookup now.
  for (auto& resolve : resolvers) {
    const auto found = resolve("hangs.example", 80, io_clock::now() + 10s);
    REQUIRE(found.endpoints.size() == 1);
    CHECK(found.endpoints[0] == loopback(80));
  }
  CHECK(started == room + 1);
}
