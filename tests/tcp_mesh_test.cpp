// The mesh of TCP connections between workers (src/transport/tcp/
// mesh_links.hpp, tcp_mesh_link.hpp), with one thread per worker and
// authenticated loopback connections: meshes of 1, 2, 3, 5 and 8 workers
// connect, and the point-to-point algorithms run over them
// (recursive-doubling all-reduce with its agreement and without,
// halving-doubling, recursive-doubling all-gather, binomial-tree
// broadcast) to the closed forms of ring_values.hpp; two workers that
// send each other megabytes at once, and frames from several peers
// interleaved, never mix; a rank the link cannot reach is a value_error.
// Connecting: strangers, a ring's hello and a rank that is not lower are
// dropped and the mesh still forms; a dial that a peer's listener refuses
// (a peer still awaiting its ring connection) is tried again; a worker
// with another token fails to authenticate and its peer times out naming
// it. Failures: a peer that closes (link_closed naming it), a peer that
// never sends (the deadline, naming it), shut_down from another thread; a
// tcp_ring_communicator that holds the mesh breaks it with its ring, and
// runs each collective by the algorithm each call chooses over it, paced
// by the link costs off a power of two, each a "collective" span on the
// timeline's "between workers" track naming its algorithm.
// No actor system: suite 'unit', so it runs under ThreadSanitizer too.

#include "collectives/binomial_tree.hpp"
#include "collectives/halving_doubling.hpp"
#include "collectives/peer_agreement.hpp"
#include "collectives/recursive_doubling.hpp"
#include "communicators/tcp_ring_communicator.hpp"
#include "transport/tcp/tcp_link.hpp"
#include "transport/tcp/tcp_mesh_link.hpp"

#include "gather_broadcast_checks.hpp"
#include "loopback_ring.hpp"
#include "ring_values.hpp"
#include "file_support.hpp"
#include "test_support.hpp"
#include "timeline_support.hpp"
#include "runtime/little_endian.hpp"
#include "runtime/timeline.hpp"

#include "lockstep/error.hpp"
#include "lockstep/float16.hpp"

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace lockstep;
using namespace lockstep::detail;
using lockstep::detail::test::check_gather_and_broadcast;
using lockstep::detail::test::token; // the loopback ring's, for the mesh too
using namespace lockstep::detail::test::ring_values;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

/// Runs `work(r)` on `world` threads; returns what each threw (null for none).
std::vector<std::exception_ptr> on_threads(std::size_t world,
                                           const std::function<void(std::size_t)>& work) {
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        work(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads)
    t.join();
  return errors;
}

/// Fails the test for each worker that threw.
void require_none(const std::vector<std::exception_ptr>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r)
    if (errors[r])
      FAIL("worker " << r << " threw: " << what_of(errors[r]));
}

/// `world` workers' mesh ends over loopback, each with its listener;
/// connected by connect().
class loopback_mesh {
public:
  explicit loopback_mesh(std::size_t world) {
    for (std::size_t r = 0; r < world; ++r) {
      acceptors_.push_back(std::make_unique<asio::ip::tcp::acceptor>(
        context_, asio::ip::tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}));
      addresses_.push_back(acceptors_.back()->local_endpoint());
      links_.push_back(std::make_unique<tcp_mesh_link>(mesh_links{r, world, context_}));
    }
  }

  std::size_t size() const { return links_.size(); }
  tcp_mesh_link& link(std::size_t r) { return *links_[r]; }
  asio::ip::tcp::acceptor& acceptor(std::size_t r) { return *acceptors_[r]; }
  asio::io_context& context() { return context_; }

  /// Worker `r`'s connect_mesh, with `its_token`.
  void connect_one(std::size_t r, io_clock::time_point deadline,
                   std::span<const std::uint8_t> its_token = token) {
    connect_mesh(links_[r]->connections(), *acceptors_[r], addresses_, its_token,
                 {"mesh-test", 0, static_cast<std::uint32_t>(r)}, deadline);
  }

  /// Connects every worker, each on a thread of its own.
  void connect() {
    require_none(on_threads(size(), [&](std::size_t r) { connect_one(r, io_clock::now() + 20s); }));
  }

  /// Runs `work` on every worker's thread; returns what each threw. A
  /// worker that throws closes its links, as a node does.
  std::vector<std::exception_ptr> try_run(const std::function<void(tcp_mesh_link&)>& work) {
    return on_threads(size(), [&](std::size_t r) {
      try {
        work(*links_[r]);
      } catch (...) {
        links_[r]->close();
        throw;
      }
    });
  }

  void run(const std::function<void(tcp_mesh_link&)>& work) { require_none(try_run(work)); }

  /// Worker `r`'s connections, for a communicator to own.
  mesh_links take(std::size_t r) { return std::move(links_[r]->connections()); }

private:
  asio::io_context context_;
  std::vector<std::unique_ptr<asio::ip::tcp::acceptor>> acceptors_;
  std::vector<asio::ip::tcp::endpoint> addresses_;
  std::vector<std::unique_ptr<tcp_mesh_link>> links_;
};

/// Connects `mesh` and gives each worker a tcp_ring_communicator over its
/// end of `ring` and of the mesh.
std::vector<std::unique_ptr<tcp_ring_communicator>>
communicators(lockstep::detail::test::loopback_ring& ring, loopback_mesh& mesh) {
  mesh.connect();
  std::vector<std::unique_ptr<tcp_ring_communicator>> workers;
  for (std::size_t r = 0; r < mesh.size(); ++r)
    workers.push_back(std::make_unique<tcp_ring_communicator>(
      ring.take(r), nullptr, std::make_unique<tcp_mesh_link>(mesh.take(r))));
  return workers;
}

std::span<std::uint8_t> bytes_of(auto& values) {
  return {reinterpret_cast<std::uint8_t*>(values.data()), values.size() * sizeof(values[0])};
}

} // namespace

TEST_CASE("meshes of 1, 2, 3, 5 and 8 workers connect, and the point-to-point algorithms run over "
          "them to the closed forms, paced from 4000 bytes") {
  for (const std::size_t world : {1, 2, 3, 5, 8}) {
    CAPTURE(world);
    loopback_mesh mesh(world);
    mesh.connect();
    mesh.run([&](tcp_mesh_link& group) {
      const auto rank = group.rank();
      ring_records records;
      std::uint64_t seq = 0;
      group.pace_from(4000); // from 1000 float32 on, paced off a power of two (core_pacing.hpp)
      // 1 and 3 elements (fewer than the ranks), 1000, and 300'003 (beyond
      // the socket buffers: both partners of a step send at once).
      for (const auto type : {dtype::f32, dtype::i64, dtype::f16})
        for (const auto op : {reduce_op::sum, reduce_op::mean, reduce_op::max, reduce_op::prod})
          for (const std::size_t elements : {1, 3, 1000, 300'003})
            visit_dtype(type, [&]<class T>(T) {
              if (elements > 1000 && op != reduce_op::sum)
                return;
              std::vector<T> input(elements);
              for (std::size_t i = 0; i < elements; ++i)
                input[i] = static_cast<T>(static_cast<float>(value(i, rank, op)));
              auto agreed = input;
              auto bare = input;
              auto halving = input;
              const auto deadline = group.now() + 30s;
              recursive_doubling_all_reduce(group, records,
                                            fingerprint_of(++seq, op, type, elements), nullptr, op,
                                            type, bytes_of(agreed), deadline);
              recursive_doubling_all_reduce(group, op, type, bytes_of(bare), deadline);
              halving_doubling_all_reduce(group, records, fingerprint_of(++seq, op, type, elements),
                                          nullptr, op, type, bytes_of(halving), deadline);
              for (std::size_t i = 0; i < elements; ++i) {
                const auto want = expected<T>(i, world, op);
                if (!same_value(agreed[i], want) || !same_value(bare[i], want)
                    || !same_value(halving[i], want)) {
                  FAIL("worker " << rank << " of " << world << ": " << to_string(type) << " "
                                 << to_string(op) << " of " << elements << " elements, element "
                                 << i << " is " << static_cast<float>(agreed[i]) << ", "
                                 << static_cast<float>(bare[i]) << " and "
                                 << static_cast<float>(halving[i]) << ", expected "
                                 << static_cast<float>(want));
                  return;
                }
              }
            });
      for (const std::size_t block : {0, 1, 1000, 200'000})
        check_gather_and_broadcast(group, block, block);
    });
  }
}

TEST_CASE("over the mesh, workers that issue different collectives all throw the same error, and "
          "the mesh goes on") {
  constexpr std::size_t world = 5;
  loopback_mesh mesh(world);
  mesh.connect();
  std::vector<std::string> outcomes(world);
  std::vector<std::vector<float>> sums(world);
  mesh.run([&](tcp_mesh_link& group) {
    const auto rank = group.rank();
    ring_records records;
    std::vector<std::uint8_t> data(rank == 3 ? 8 : 4, 1);
    try {
      halving_doubling_all_reduce(
        group, records, fingerprint_of(1, reduce_op::sum, dtype::f32, rank == 3 ? 2 : 1), nullptr,
        reduce_op::sum, dtype::f32, data, group.now() + 10s);
      outcomes[rank] = "none";
    } catch (const shape_error& e) {
      outcomes[rank] = e.what();
    }
    std::vector<float> after(3, static_cast<float>(rank + 1));
    recursive_doubling_all_reduce(group, records, fingerprint_of(2, reduce_op::sum, dtype::f32, 3),
                                  nullptr, reduce_op::sum, dtype::f32, bytes_of(after),
                                  group.now() + 10s);
    sums[rank] = after;
  });
  for (std::size_t r = 0; r < world; ++r) {
    CAPTURE(r);
    CHECK(contains(outcomes[r], "worker 0 has shape [1] but worker 3 has shape [2]"));
    CHECK(outcomes[r] == outcomes[0]);
    CHECK(sums[r] == std::vector<float>(3, 15.0f));
  }
}

TEST_CASE("two workers that send each other megabytes at once never wait on each other, and frames "
          "from several peers, read past their ends, stay apart") {
  loopback_mesh mesh(3);
  mesh.connect();
  const auto frame_of = [](std::size_t from, std::size_t k) {
    const std::string text = "frame " + std::to_string(k) + " from worker " + std::to_string(from)
                             + std::string(10 * k, '.');
    bytes frame(8 + text.size());
    store_le(frame.data(), std::uint64_t{text.size()});
    std::memcpy(frame.data() + 8, text.data(), text.size());
    return frame;
  };
  mesh.run([&](tcp_mesh_link& group) {
    const auto rank = group.rank();
    const auto deadline = group.now() + 20s;
    // Workers 0 and 1 swap 8 MiB on one connection, both directions at once.
    if (rank < 2) {
      const auto peer = 1 - rank;
      std::vector<std::uint8_t> out(8 << 20, static_cast<std::uint8_t>(rank + 1));
      std::vector<std::uint8_t> in(out.size());
      group.exchange(peer, out, peer, in, deadline);
      CHECK(in == std::vector<std::uint8_t>(out.size(), static_cast<std::uint8_t>(peer + 1)));
    }
    // Each worker sends three frames, all at once, to each other worker;
    // then receives them one by one, alternating between its peers.
    bytes all_out;
    for (std::size_t k = 0; k < 3; ++k) {
      const auto frame = frame_of(rank, k);
      all_out.insert(all_out.end(), frame.begin(), frame.end());
    }
    for (std::size_t peer = 0; peer < 3; ++peer)
      if (peer != rank)
        group.send(peer, all_out, deadline);
    const auto long_frame = frame_of(rank, 9);
    bytes in;
    for (std::size_t k = 0; k < 3; ++k)
      for (std::size_t peer = 0; peer < 3; ++peer) {
        if (peer == rank)
          continue;
        group.exchange_frame(link::no_rank, {}, peer, in, 1000, deadline);
        CHECK(in == frame_of(peer, k));
      }
    // exchange_frame's reads reach as far as what it sends: with a long
    // frame out (to the next worker), the first read from the previous
    // one takes its three short frames at once; the two beyond the first
    // wait for the next receives from that worker.
    const auto next = (rank + 1) % 3;
    const auto prev = (rank + 2) % 3;
    group.send(next, all_out, deadline);
    for (std::size_t k = 0; k < 3; ++k) {
      group.exchange_frame(next, long_frame, prev, in, 1000, deadline);
      CHECK(in == frame_of(prev, k));
    }
    for (std::size_t k = 0; k < 3; ++k) {
      group.exchange_frame(link::no_rank, {}, prev, in, 1000, deadline);
      CHECK(in == frame_of(prev, 9));
    }
  });
}

TEST_CASE("a tcp_mesh_link reaches every other rank: itself, a rank outside the group and no_rank "
          "with bytes are value_errors naming them") {
  asio::io_context context;
  // Unconnected sockets: the checks come before any of them is touched.
  tcp_mesh_link mesh(mesh_links{1, 4, context});
  std::vector<std::uint8_t> data(4);
  const auto deadline = mesh.now() + 1s;
  CHECK(contains(error_of<value_error>([&] { mesh.send(1, data, deadline); }),
                 "tcp_mesh_link of rank 1 of 4 cannot send to itself (it has no connection to "
                 "itself)"));
  CHECK(contains(error_of<value_error>([&] { mesh.receive(4, data, deadline); }),
                 "cannot receive from rank 4 (its ranks are 0 to 3)"));
  CHECK(contains(error_of<value_error>(
                   [&] { mesh.exchange(link::no_rank, data, 0, data, deadline); }),
                 "cannot send to no rank"));
  bytes frame;
  CHECK(contains(error_of<value_error>(
                   [&] { mesh.exchange_frame(0, data, link::no_rank, frame, 100, deadline); }),
                 "cannot receive from no rank"));
  CHECK(contains(error_of<value_error>([] {
                   asio::io_context other;
                   mesh_links{4, 4, other};
                 }),
                 "position 4 of a mesh of 4"));
}

TEST_CASE("a mesh connects past strangers, a ring's hello and a worker that is no lower rank; a "
          "dial its peer refuses is tried again") {
  constexpr std::size_t world = 3;
  loopback_mesh mesh(world);
  // At worker 2's port before anyone dials: a connection that stays silent
  // for a while, then closes; one that sends garbage; a genuine worker's
  // hello for a ring connection; one for the mesh from worker 2 itself (no
  // lower rank).
  auto& context = mesh.context();
  const auto port_of_2 = mesh.acceptor(2).local_endpoint();
  tcp_socket silent(context), garbage(context), ring_hello(context), not_lower(context);
  for (auto* stranger : {&silent, &garbage, &ring_hello, &not_lower})
    stranger->connect(port_of_2);
  // Longer than a hello's fixed part, so that it is read and refused at once.
  const std::string junk = "GET / HTTP/1.1\r\nHost: mesh\r\nUser-Agent: curl/8.0\r\nAccept: */*\r\n\r\n";
  asio::write(garbage, asio::buffer(junk));
  client_handshake ring_client{token, {"mesh-test", 0, 0, connection_purpose::ring}};
  asio::write(ring_hello, asio::buffer(ring_client.hello()));
  client_handshake mesh_client{token, {"mesh-test", 0, 2, connection_purpose::mesh}};
  asio::write(not_lower, asio::buffer(mesh_client.hello()));
  // Worker 1's listener refuses the first connection there (as a worker
  // still awaiting its ring connection does: it closes after the hello),
  // then worker 1 connects the mesh: worker 0 dials it again.
  std::atomic<bool> refused{false};
  const auto errors = on_threads(world + 1, [&](std::size_t r) {
    if (r == world) { // the stranger that closes after 300 ms
      std::this_thread::sleep_for(300ms);
      silent.close();
      return;
    }
    if (r == 1) {
      tcp_socket first(context);
      mesh.acceptor(1).accept(first);
      bytes hello(hello_head_size + std::string("mesh-test").size());
      asio::read(first, asio::buffer(hello));
      first.close();
      refused = true;
    }
    mesh.connect_one(r, io_clock::now() + 20s);
  });
  require_none(errors);
  CHECK(refused);
  mesh.run([](tcp_mesh_link& group) {
    std::vector<float> data(5, static_cast<float>(group.rank() + 1));
    recursive_doubling_all_reduce(group, reduce_op::sum, dtype::f32, bytes_of(data),
                                  group.now() + 10s);
    CHECK(data == std::vector<float>(5, 6.0f));
  });
  // The others were refused: their connections closed (or were reset,
  // where the server left bytes unread), with no challenge.
  for (auto* stranger : {&garbage, &ring_hello, &not_lower}) {
    std::uint8_t byte = 0;
    boost::system::error_code error;
    stranger->read_some(asio::buffer(&byte, 1), error);
    CHECK(error);
  }
}

TEST_CASE("a worker with another token fails to authenticate, and its peer times out naming it") {
  loopback_mesh mesh(2);
  const std::string other_text = "another-token-9876543210";
  const bytes other(other_text.begin(), other_text.end());
  const auto errors = on_threads(2, [&](std::size_t r) {
    if (r == 0)
      mesh.connect_one(0, io_clock::now() + 10s, other);
    else
      mesh.connect_one(1, io_clock::now() + 1500ms);
  });
  CHECK(contains(error_of<authentication_error>([&] { std::rethrow_exception(errors[0]); }),
                 "failed: it did not prove the cluster token"));
  CHECK(contains(error_of<timeout_error>([&] { std::rethrow_exception(errors[1]); }),
                 "worker 0 did not connect the mesh before the deadline"));
}

TEST_CASE("a peer that closes fails its peers with link_closed naming it; one that never sends, "
          "at the deadline naming it") {
  SUBCASE("closed") {
    loopback_mesh mesh(3);
    mesh.connect();
    const auto errors = mesh.try_run([](tcp_mesh_link& group) {
      if (group.rank() == 2) {
        group.close(); // as if the process died
        return;
      }
      std::vector<std::uint8_t> data(1 << 20);
      group.receive(2, data, group.now() + 30s);
    });
    CHECK(errors[2] == nullptr);
    for (std::size_t r = 0; r < 2; ++r)
      CHECK(contains(error_of<link_closed>([&] { std::rethrow_exception(errors[r]); }),
                     "worker 2 closed its connection"));
  }
  SUBCASE("silent") {
    loopback_mesh mesh(3);
    mesh.connect();
    const auto errors = mesh.try_run([](tcp_mesh_link& group) {
      if (group.rank() == 1) {
        std::this_thread::sleep_for(800ms); // sends nothing, keeps its links open
        return;
      }
      std::vector<std::uint8_t> data(10);
      group.exchange(group.rank() == 0 ? 2 : 0, data, 1, data, group.now() + 300ms);
    });
    for (const std::size_t r : {0, 2})
      CHECK(contains(error_of<link_deadline_passed>([&] { std::rethrow_exception(errors[r]); }),
                     "no data came from worker 1 before the deadline"));
  }
}

TEST_CASE("shut_down from another thread ends an exchange at once, here and at the peers") {
  loopback_mesh mesh(3);
  mesh.connect();
  std::thread breaker([&] {
    std::this_thread::sleep_for(200ms);
    mesh.link(0).shut_down();
  });
  // No worker closes its links when it fails (close() is for the link's
  // own thread, as in a node): only the shut_down ends the waits. Worker 0
  // waits for worker 1, which waits for worker 0, and worker 2 for worker 0.
  const auto errors = on_threads(3, [&](std::size_t r) {
    auto& group = mesh.link(r);
    std::vector<std::uint8_t> data(10);
    group.receive(r == 0 ? 1 : 0, data, group.now() + 30s);
  });
  breaker.join();
  for (std::size_t r = 0; r < 3; ++r) // not link_deadline_passed: at once
    CHECK_THROWS_AS(std::rethrow_exception(errors[r]), link_closed);
  for (const std::size_t r : {1, 2})
    CHECK(contains(error_of<link_closed>([&] { std::rethrow_exception(errors[r]); }),
                   "worker 0"));
}

TEST_CASE("a tcp_ring_communicator holds the workers' mesh beside its ring, and breaks both "
          "together") {
  constexpr std::size_t world = 3;
  lockstep::detail::test::loopback_ring ring(world);
  loopback_mesh mesh(world);
  auto workers = communicators(ring, mesh);
  require_none(on_threads(world, [&](std::size_t r) {
    auto* group = workers[r]->mesh();
    REQUIRE(group != nullptr);
    CHECK(group->rank() == r);
    std::vector<float> data(4, static_cast<float>(r + 1));
    recursive_doubling_all_reduce(*group, reduce_op::sum, dtype::f32, bytes_of(data),
                                  group->now() + 10s);
    CHECK(data == std::vector<float>(4, 6.0f));
  }));
  // The node breaks worker 1's ring (a peer was lost): its mesh is shut
  // down too, so the others' mesh exchanges with it fail at once.
  workers[1]->break_ring({error_kind::peer_lost_error, "worker 7 was lost",
                          "lockstep::peer_lost_error"});
  const auto errors = on_threads(world, [&](std::size_t r) {
    std::vector<std::uint8_t> data(10);
    auto& group = *workers[r]->mesh();
    if (r == 1)
      group.send(0, data, group.now() + 10s);
    else
      group.receive(1, data, group.now() + 10s);
  });
  for (std::size_t r = 0; r < world; ++r) // not link_deadline_passed: at once
    CHECK_THROWS_AS(std::rethrow_exception(errors[r]), link_closed);
  CHECK(contains(what_of(errors[0]), "worker 1"));
  // Without a mesh: none; a mesh of other positions: refused.
  lockstep::detail::test::loopback_ring alone(2);
  CHECK(tcp_ring_communicator(alone.take(0)).mesh() == nullptr);
  asio::io_context context;
  CHECK(contains(error_of<value_error>([&] {
                   tcp_ring_communicator(alone.take(1), nullptr,
                                         std::make_unique<tcp_mesh_link>(
                                           mesh_links{0, 3, context}));
                 }),
                 "a mesh of rank 0 of 3 beside the ring's rank 1 of 2"));
}

TEST_CASE("a tcp_ring_communicator with a mesh runs each call by the algorithm it chooses: "
          "measured link costs (and the pacing they give the mesh), forced per call, and workers "
          "that choose differently told") {
  constexpr std::size_t world = 5; // off a power of two: the fold, paced from α·β
  lockstep::detail::test::loopback_ring ring(world);
  loopback_mesh mesh(world);
  auto workers = communicators(ring, mesh);
  std::vector<link_costs> costs(world);
  require_none(on_threads(world, [&](std::size_t r) {
    auto& comm = *workers[r];
    // No costs yet: the ring.
    CHECK(comm.algorithm_for(collective_kind::all_reduce, 4, {}) == algorithm::ring);
    costs[r] = comm.probe_links(10s);
    CHECK(comm.mesh()->paced_from() == paced_from_bytes(costs[r]));
    // Measured by worker 0, the same everywhere: small buffers take
    // recursive doubling, the broadcast the tree.
    CHECK(comm.algorithm_for(collective_kind::all_reduce, 4, {}) ==
          algorithm::recursive_doubling);
    CHECK(comm.algorithm_for(collective_kind::broadcast, 1 << 20, {}) ==
          algorithm::binomial_tree);
    const auto integers = [&](std::size_t elements) {
      auto t = tensor::uninitialized(dtype::i32, {static_cast<std::int64_t>(elements)});
      for (std::size_t i = 0; i < elements; ++i)
        t.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 7 + 100 * r);
      return t;
    };
    for (const auto forced : {std::optional<algorithm>{}, std::optional{algorithm::ring},
                              std::optional{algorithm::recursive_doubling},
                              std::optional{algorithm::halving_doubling}})
      for (const std::size_t elements : {1, 1000, 300'001}) {
        collective_options options;
        options.algorithm = forced;
        std::vector<tensor> data{integers(elements)};
        comm.all_reduce(r, reduce_op::sum, data, data, options);
        const auto values = data[0].data<std::int32_t>();
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < elements; ++i)
          wrong += values[i] != static_cast<std::int32_t>(5 * (i % 7) + 100 * 10);
        CHECK_MESSAGE(wrong == 0, (forced ? to_string(*forced) : "auto") << ", " << elements);
      }
    auto mine = integers(3);
    auto all = tensor::uninitialized(dtype::i32, {15});
    comm.all_gather(r, mine, all, {});
    for (std::size_t w = 0; w < world; ++w)
      CHECK(all.data<std::int32_t>()[w * 3 + 2] == static_cast<std::int32_t>(2 + 100 * w));
    std::vector<tensor> message{integers(5)};
    comm.broadcast(r, 2, message, {});
    CHECK(message[0].data<std::int32_t>()[4] == 204);
    // Worker 3 asks for another algorithm: every worker is told, in the
    // agreement, and the mesh goes on.
    collective_options odd;
    if (r == 3)
      odd.algorithm = algorithm::halving_doubling;
    std::vector<tensor> data{integers(8)};
    CHECK_THROWS_WITH_AS(comm.all_reduce(r, reduce_op::sum, data, data, odd),
                         doctest::Contains("workers chose different algorithms: worker 0 "
                                           "recursive_doubling, worker 3 halving_doubling"),
                         value_error);
    comm.all_reduce(r, reduce_op::sum, data, data, {});
    CHECK(data[0].data<std::int32_t>()[1] == 5 * 1 + 1000);
  }));
  for (std::size_t r = 1; r < world; ++r) {
    CHECK(costs[r].alpha_s == costs[0].alpha_s);
    CHECK(costs[r].beta_bytes_per_s == costs[0].beta_bytes_per_s);
  }
  CHECK(costs[0].alpha_s > 0);
}

TEST_CASE("the timeline shows each collective between workers on its track, with the algorithm "
          "it ran") {
  temporary_directory dir{"lockstep-mesh-timeline"};
  const auto path = dir.path() / "trace.json";
  constexpr std::size_t world = 3;
  constexpr algorithm ran[] = {algorithm::ring, algorithm::recursive_doubling,
                               algorithm::halving_doubling};
  {
    timeline_options on{path.string(), "0-0"};
    auto recording = timeline_hold();
    REQUIRE(recording);
    REQUIRE(timeline_begin_steps(1) == 0);
    lockstep::detail::test::loopback_ring ring(world);
    loopback_mesh mesh(world);
    auto workers = communicators(ring, mesh);
    require_none(on_threads(world, [&](std::size_t r) {
      timeline_set_thread_step(0);
      for (const auto a : ran) {
        collective_options options;
        options.algorithm = a;
        std::vector<tensor> data{tensor::scalar(1.0f)};
        workers[r]->all_reduce(r, reduce_op::sum, data, data, options);
        CHECK(data[0].as_double(0) == world);
      }
    }));
  } // the recording ends: the file is complete
  const auto trace = read_trace(path);
  std::map<int, std::string> tracks;
  for (const auto& e : trace)
    if (e["ph"] == "M" && e["name"] == "thread_name")
      tracks[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
  std::map<std::string, std::size_t> spans; // by algorithm
  for (const auto& e : trace)
    if (e["ph"] == "X" && e["name"] == "collective") {
      CHECK(tracks[e["tid"].get<int>()] == "between workers");
      CHECK(e["args"]["bytes"] == 4);
      ++spans[e["args"]["algorithm"].get<std::string>()];
    }
  for (const auto a : ran) {
    CAPTURE(to_string(a));
    CHECK(spans[std::string{to_string(a)}] == world); // one a worker
  }
}
