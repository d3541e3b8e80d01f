// control_links: the one thread that reads and writes the control
// connections (src/node/control_links.hpp), over real loopback sockets: what
// one side posts arrives at the other, decoded and in order, and a closed
// connection arrives as a failure. No CAF: also run under ThreadSanitizer.

#include "node/control_links.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

using namespace lockstep;
using namespace lockstep::detail;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

/// The events one side's links delivered, in order.
struct inbox {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<control_event> events;

  std::function<void(control_event)> deliver() {
    return [this](control_event e) {
      std::lock_guard lock{mutex};
      events.push_back(std::move(e));
      arrived.notify_all();
    };
  }

  /// Waits (at most 10 s) for `n` events; a copy of them.
  std::vector<control_event> await(std::size_t n) {
    std::unique_lock lock{mutex};
    arrived.wait_for(lock, 10s, [&] { return events.size() >= n; });
    return events;
  }
};

/// A coordinator's links (rank 0, one worker) and the worker's (rank 1),
/// connected over loopback.
struct star {
  asio::io_context context;
  std::unique_ptr<control_links> coordinator;
  std::unique_ptr<control_links> worker;

  star() {
    asio::ip::tcp::acceptor acceptor(context, {asio::ip::make_address("127.0.0.1"), 0});
    tcp_socket dialled(context), accepted(context);
    dialled.connect(acceptor.local_endpoint());
    acceptor.accept(accepted);
    std::vector<tcp_socket> at_coordinator;
    at_coordinator.emplace_back(context); // its own slot, unconnected
    at_coordinator.push_back(std::move(accepted));
    std::vector<tcp_socket> at_worker;
    at_worker.push_back(std::move(dialled));
    coordinator = std::make_unique<control_links>(0, std::move(at_coordinator), 1s);
    worker = std::make_unique<control_links>(1, std::move(at_worker), 1s);
  }
};

} // namespace

// The inboxes outlive the links, whose threads deliver into them.

TEST_CASE("posts arrive decoded, in order, naming the peer they came from") {
  inbox at_coordinator, at_worker;
  star s;
  CHECK(s.coordinator->peers() == std::vector<std::uint32_t>{1});
  CHECK(s.worker->peers() == std::vector<std::uint32_t>{0});
  s.coordinator->start(at_coordinator.deliver());
  s.worker->start(at_worker.deliver());

  for (std::uint64_t seq = 1; seq <= 3; ++seq)
    s.coordinator->post(1, detail::heartbeat{0, 0, seq, 42});
  detail::collective_abort abort;
  abort.error.message = "worker 2 was lost";
  s.worker->post(0, abort);

  const auto worker_got = at_worker.await(3);
  REQUIRE(worker_got.size() == 3);
  for (std::uint64_t i = 0; i < 3; ++i) {
    CHECK(worker_got[i].peer == 0);
    REQUIRE(std::holds_alternative<detail::heartbeat>(worker_got[i].what));
    CHECK(std::get<detail::heartbeat>(worker_got[i].what).sequence == i + 1);
  }
  const auto coordinator_got = at_coordinator.await(1);
  REQUIRE(coordinator_got.size() == 1);
  CHECK(coordinator_got[0].peer == 1);
  REQUIRE(std::holds_alternative<detail::collective_abort>(coordinator_got[0].what));
  CHECK(std::get<detail::collective_abort>(coordinator_got[0].what).error.message
        == "worker 2 was lost");
}

TEST_CASE("a connection that closes arrives as a failure; what was posted first is written") {
  inbox at_coordinator;
  star s;
  s.coordinator->start(at_coordinator.deliver());
  s.worker->start([](control_event) {});
  s.worker->post(0, detail::heartbeat{1, 0, 0, 0}); // a goodbye, written before the stop
  s.worker.reset(); // stops its thread, closes the connection
  const auto got = at_coordinator.await(2);
  REQUIRE(got.size() == 2);
  REQUIRE(std::holds_alternative<detail::heartbeat>(got[0].what));
  CHECK(std::get<detail::heartbeat>(got[0].what).sequence == 0);
  REQUIRE(std::holds_alternative<std::string>(got[1].what));
  CHECK(got[1].peer == 1);
  CHECK(std::get<std::string>(got[1].what).find("its control connection closed")
        != std::string::npos);
  // A closed connection is a peer that ended, or a cut on the path between
  // the hosts (tests/netns): the text names both.
  CHECK(std::get<std::string>(got[1].what).find("the process exited or was killed, or something "
                                                "on the network path")
        != std::string::npos);
}

TEST_CASE("links that never started stop and close cleanly") {
  star s;
  s.coordinator->post(1, detail::heartbeat{0, 0, 1, 0}); // queued, never written
  s.coordinator.reset();
  s.worker.reset();
}
