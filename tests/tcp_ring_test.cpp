// The ring collectives (src/collectives/ring_*.hpp) between workers over
// their TCP link (src/transport/tcp/tcp_link.hpp, ring_links.hpp), with
// one thread per worker and authenticated loopback connections: all-reduce
// for 1 to 4 workers, sizes 0, 1, not divisible by the world, several
// segments and several chunks per segment, every dtype and op, against
// closed-form results, with its agreement (in the data's pass on the
// small path) and without, the same bits either way; all-gather and
// broadcast; workers that issue different collectives, also on the small
// path, and a failure passed on, the same error on every worker; a worker
// that dies mid-collective and one that never comes; the ring's connection
// past strangers at a worker's port, and ended by what it watches. No
// actor system: suite 'unit', so it runs under ThreadSanitizer too.

#include "collectives/ring_collectives.hpp"

#include "loopback_ring.hpp"
#include "ring_values.hpp"
#include "transport/tcp/authenticate.hpp"
#include "runtime/little_endian.hpp"

#include "test_support.hpp"
#include "file_support.hpp"

#include "lockstep/error.hpp"
#include "lockstep/float16.hpp"

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace lockstep;
using namespace lockstep::detail;
using lockstep::detail::test::loopback_ring;
using namespace lockstep::detail::test::ring_values;
using namespace std::chrono_literals;
namespace asio = boost::asio;

TEST_CASE("ring all-reduce: 1 to 4 workers, every dtype and op, sizes around the segments") {
  for (std::size_t world = 1; world <= 4; ++world) {
    CAPTURE(world);
    loopback_ring workers(world);
    // 0, 1, not divisible by the world, and (for more than one worker) the
    // segmented path with uneven segments, in one chunk and in several
    // (ring_chunk_bytes); world * 65'536 + 1 four-byte elements give one
    // segment a chunk more than the others, so the interleaved last step
    // meets segments of different chunk counts.
    const std::vector<std::size_t> sizes{0, 1, world + 1, 40'003, 200'003, world * 65'536 + 1};
    workers.run([&](tcp_link& links) {
      ring_records records; // as a communicator keeps them, across collectives
      std::uint64_t seq = 0;
      for (const auto type : {dtype::f32, dtype::f64, dtype::i32, dtype::i64, dtype::f16,
                              dtype::bf16})
        for (const auto op : {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max,
                              reduce_op::prod})
          for (const auto elements : sizes)
            visit_dtype(type, [&]<class T>(T) {
              std::vector<T> data(elements);
              for (std::size_t i = 0; i < elements; ++i)
                data[i] = static_cast<T>(static_cast<float>(value(i, links.rank(), op)));
              const auto deadline = io_clock::now() + 20s;
              ring_all_reduce(links, records, fingerprint_of(++seq, op, type, elements), nullptr,
                              op, type,
                              {reinterpret_cast<std::uint8_t*>(data.data()), elements * sizeof(T)},
                              deadline);
              for (std::size_t i = 0; i < elements; ++i)
                if (!same_value(data[i], expected<T>(i, links.size(), op))) {
                  FAIL("worker " << links.rank() << " of " << links.size() << ": "
                                 << to_string(type) << " " << to_string(op) << " of "
                                 << elements << " elements, element " << i << " is "
                                 << static_cast<float>(data[i]) << ", expected "
                                 << static_cast<float>(expected<T>(i, links.size(), op)));
                  return;
                }
            });
    });
  }
}

TEST_CASE("ring all-reduce: the agreement's own pass and the bare ring give the same bits") {
  // Floating sums that round, on both paths (all-gather below 64 KiB,
  // the segmented ring above): every worker gets the same bits, with the
  // agreement folded into the data's pass or without one.
  for (std::size_t world = 2; world <= 4; ++world) {
    CAPTURE(world);
    loopback_ring workers(world);
    std::vector<std::vector<std::vector<float>>> results(world); // by worker, size, path
    workers.run([&](tcp_link& links) {
      ring_records records;
      std::uint64_t seq = 0;
      for (const std::size_t elements : {1, 3, 1000, 40'003}) {
        std::vector<float> data(elements);
        for (std::size_t i = 0; i < elements; ++i)
          data[i] = 0.1f * static_cast<float>(links.rank() + 1) + 1e-3f * static_cast<float>(i);
        auto bare = data;
        const auto deadline = io_clock::now() + 20s;
        ring_all_reduce(links, records, fingerprint_of(++seq, reduce_op::sum, dtype::f32, elements),
                        nullptr, reduce_op::sum, dtype::f32,
                        {reinterpret_cast<std::uint8_t*>(data.data()), elements * 4}, deadline);
        ring_all_reduce(links, reduce_op::sum, dtype::f32,
                        {reinterpret_cast<std::uint8_t*>(bare.data()), elements * 4}, deadline);
        results[links.rank()].push_back(std::move(data));
        results[links.rank()].push_back(std::move(bare));
      }
    });
    for (std::size_t r = 0; r < world; ++r)
      for (std::size_t k = 0; k < results[r].size(); ++k)
        CHECK(std::memcmp(results[r][k].data(), results[0][k % 2 == 0 ? k : k - 1].data(),
                          results[r][k].size() * 4)
              == 0);
  }
}

TEST_CASE("frames arrive whole and in order, however far a read reaches; an oversized one is "
          "refused") {
  const auto frame_of = [](const std::string& text) {
    bytes frame(8);
    store_le(frame.data(), std::uint64_t{text.size()});
    frame.insert(frame.end(), text.begin(), text.end());
    return frame;
  };
  const auto first = frame_of("short");
  const auto second = frame_of("the next frame, longer than the first");
  const auto theirs = frame_of(std::string(100, 'x'));
  loopback_ring workers(2);
  const auto errors = workers.try_run([&](tcp_link& links) {
    const auto deadline = io_clock::now() + 5s;
    bytes in;
    if (links.rank() == 0) {
      auto both = first;
      both.insert(both.end(), second.begin(), second.end());
      links.connections().exchange(both, {}, deadline);
      for (int i = 0; i < 2; ++i) {
        links.connections().exchange_frame({}, in, 1000, deadline);
        CHECK(in == theirs);
      }
      bytes huge(8);
      store_le(huge.data(), std::uint64_t{1} << 40);
      links.connections().exchange(huge, {}, deadline);
      return;
    }
    std::this_thread::sleep_for(100ms); // both frames wait in the socket
    // Each read reaches as far as the 108 bytes this worker sends: the
    // first takes the whole first frame and the start of the second.
    links.connections().exchange_frame(theirs, in, 1000, deadline);
    CHECK(in == first);
    links.connections().exchange_frame(theirs, in, 1000, deadline);
    CHECK(in == second);
    links.connections().exchange_frame({}, in, 1000, deadline);
  });
  CHECK(errors[0] == nullptr);
  const auto refused = error_of<connection_closed>([&] { std::rethrow_exception(errors[1]); });
  CHECK(contains(refused, "worker 0 sent a record of 1099511627776 bytes"));
}

TEST_CASE("ring all-gather and broadcast") {
  loopback_ring workers(3);
  workers.run([](tcp_link& links) {
    std::vector<std::uint8_t> blocks(3 * 5, 0);
    for (std::size_t i = 0; i < 5; ++i)
      blocks[links.rank() * 5 + i] = static_cast<std::uint8_t>(10 * links.rank() + i);
    ring_all_gather(links, blocks, io_clock::now() + 5s);
    for (std::size_t r = 0; r < 3; ++r)
      for (std::size_t i = 0; i < 5; ++i)
        CHECK(blocks[r * 5 + i] == 10 * r + i);
    for (std::size_t root = 0; root < 3; ++root) {
      std::vector<std::uint8_t> data(100'000, static_cast<std::uint8_t>(links.rank()));
      ring_broadcast(links, root, data, io_clock::now() + 5s);
      CHECK(data == std::vector<std::uint8_t>(100'000, static_cast<std::uint8_t>(root)));
    }
  });
}

TEST_CASE("workers that issue different collectives all get the same error, before any data") {
  loopback_ring workers(3);
  const auto expect_everywhere = [&](const std::function<collective_fingerprint(std::size_t)>& f,
                                     const std::string& part, auto error_type) {
    const auto errors = workers.try_run(
      [&](tcp_link& links) { ring_agree(links, f(links.rank()), io_clock::now() + 5s); });
    std::string first;
    for (std::size_t r = 0; r < 3; ++r) {
      const auto message = error_of<decltype(error_type)>([&] { std::rethrow_exception(errors[r]); });
      CHECK(contains(message, part));
      if (r == 0)
        first = message;
      CHECK(message == first); // the same words on every worker
    }
  };
  expect_everywhere(
    [](std::size_t r) {
      return fingerprint_of(1, reduce_op::sum, r == 1 ? dtype::f64 : dtype::f32, 4);
    },
    "worker 0 has dtype float32 but worker 1 has dtype float64", dtype_error(""));
  loopback_ring again(3); // the first ring's workers closed their links
  const auto errors = again.try_run([](tcp_link& links) {
    ring_agree(links, fingerprint_of(1, reduce_op::sum, dtype::f32, links.rank() == 2 ? 8 : 4),
               io_clock::now() + 5s);
  });
  for (const auto& error : errors) {
    const auto message = error_of<shape_error>([&] { std::rethrow_exception(error); });
    CHECK(contains(message, "worker 0 has shape [4] but worker 2 has shape [8]"));
    CHECK(contains(message, "worker 2 issued all_reduce #1 sum float32 [8]"));
  }
}

TEST_CASE("small all-reduces carry the fingerprint with the data: a mismatch or a failure is the "
          "same error on every worker before any data is used, and the ring goes on") {
  constexpr std::size_t world = 3;
  loopback_ring workers(world);
  struct outcome {
    std::string type;
    std::string message;
  };
  std::vector<std::vector<outcome>> outcomes(world); // by worker, then case
  std::vector<std::vector<float>> sums(world);
  workers.run([&](tcp_link& links) {
    const auto rank = links.rank();
    ring_records records;
    std::uint64_t seq = 0;
    // Worker `odd` issues `odd_elements` of `odd_type` (or fails), the others
    // one float32; returns what this worker threw.
    const auto attempt = [&](std::size_t odd, dtype odd_type, std::size_t odd_elements,
                             std::exception_ptr odd_failure) -> outcome {
      const auto type = rank == odd ? odd_type : dtype::f32;
      const auto elements = rank == odd ? odd_elements : 1;
      std::vector<std::uint8_t> data(elements * size_of(type), 1);
      try {
        ring_all_reduce(links, records, fingerprint_of(++seq, reduce_op::sum, type, elements),
                        rank == odd ? odd_failure : nullptr, reduce_op::sum, type, data,
                        io_clock::now() + 5s);
      } catch (const dtype_error& e) {
        return {"dtype_error", e.what()};
      } catch (const shape_error& e) {
        return {"shape_error", e.what()};
      } catch (const value_error& e) {
        return {"value_error", e.what()};
      }
      return {"none", ""};
    };
    outcomes[rank].push_back(attempt(1, dtype::f64, 1, nullptr));
    outcomes[rank].push_back(attempt(2, dtype::f32, 2, nullptr));
    // Worker 0's buffer takes the segmented ring, the others' the all-gather.
    outcomes[rank].push_back(attempt(0, dtype::f32, 40'003, nullptr));
    outcomes[rank].push_back(
      attempt(1, dtype::f32, 1, std::make_exception_ptr(value_error("replica 3 failed"))));
    std::vector<float> data(3, static_cast<float>(rank + 1));
    ring_all_reduce(links, records, fingerprint_of(++seq, reduce_op::sum, dtype::f32, 3), nullptr,
                    reduce_op::sum, dtype::f32,
                    {reinterpret_cast<std::uint8_t*>(data.data()), data.size() * 4},
                    io_clock::now() + 5s);
    sums[rank] = data;
  });
  const std::vector<std::pair<std::string, std::string>> expected{
    {"dtype_error", "worker 0 has dtype float32 but worker 1 has dtype float64"},
    {"shape_error", "worker 0 has shape [1] but worker 2 has shape [2]"},
    {"shape_error", "worker 0 has shape [40003] but worker 1 has shape [1]"},
    {"value_error", "replica 3 failed"}};
  for (std::size_t r = 0; r < world; ++r) {
    CAPTURE(r);
    REQUIRE(outcomes[r].size() == expected.size());
    for (std::size_t k = 0; k < expected.size(); ++k) {
      CAPTURE(k);
      CHECK(outcomes[r][k].type == expected[k].first);
      CHECK(contains(outcomes[r][k].message, expected[k].second));
      CHECK(outcomes[r][k].message == outcomes[0][k].message); // the same words everywhere
    }
    CHECK(sums[r] == std::vector<float>(3, 6.0f));
  }
  CHECK(contains(outcomes[0][1].message, "worker 2 issued all_reduce #2 sum float32 [2]"));
}

TEST_CASE("a worker that dies mid-collective fails the others at once; a frozen one at the deadline") {
  SUBCASE("killed") {
    loopback_ring workers(3);
    const auto start = io_clock::now();
    const auto errors = workers.try_run([](tcp_link& links) {
      std::vector<float> data(2'000'000, 1.0f); // several MiB: beyond the socket buffers
      if (links.rank() == 2) {
        links.close(); // as if the process died
        throw std::runtime_error("killed");
      }
      ring_all_reduce(links, reduce_op::sum, dtype::f32,
                      {reinterpret_cast<std::uint8_t*>(data.data()), data.size() * 4},
                      io_clock::now() + 30s);
    });
    CHECK(io_clock::now() - start < 20s); // not the 30 s deadline
    for (std::size_t r = 0; r < 2; ++r)
      CHECK_THROWS_AS(std::rethrow_exception(errors[r]), connection_closed);
  }
  SUBCASE("frozen") {
    loopback_ring workers(3);
    const auto errors = workers.try_run([](tcp_link& links) {
      if (links.rank() == 2) {
        std::this_thread::sleep_for(1500ms); // never comes
        return;
      }
      ring_agree(links, fingerprint_of(1, reduce_op::sum, dtype::f32, 1),
                 io_clock::now() + 500ms);
    });
    // Worker 0 waits for worker 2's data and times out naming it; worker 1
    // learns from worker 0 closing its links.
    const auto waiting = error_of<timeout_error>([&] { std::rethrow_exception(errors[0]); });
    CHECK(contains(waiting, "no data came from worker 2 before the deadline"));
    CHECK(errors[1] != nullptr);
  }
}

namespace {

/// One worker of a ring that is yet to connect: its ring port on loopback
/// and its unconnected links.
struct unconnected_worker {
  unconnected_worker(boost::asio::io_context& context, std::size_t rank, std::size_t world)
    : acceptor(context, {boost::asio::ip::make_address("127.0.0.1"), 0}),
      links(ring_links{rank, world, tcp_socket(context), tcp_socket(context)}) {}

  void connect(boost::asio::ip::tcp::endpoint next, io_clock::time_point deadline,
               ring_watch watch = {}) {
    connect_ring(links.connections(), acceptor, next, lockstep::detail::test::token,
                 {"ring-test", 0, static_cast<std::uint32_t>(links.rank())}, deadline,
                 std::move(watch));
  }

  boost::asio::ip::tcp::acceptor acceptor;
  tcp_link links;
};

} // namespace

TEST_CASE("a ring connects past strangers at a worker's port, each holding it for a handshake's "
          "time at most") {
  boost::asio::io_context context;
  constexpr std::size_t world = 3;
  std::vector<std::unique_ptr<unconnected_worker>> workers;
  for (std::size_t r = 0; r < world; ++r)
    workers.push_back(std::make_unique<unconnected_worker>(context, r, world));
  // Before any worker dials, at worker 1's port (queued ahead of worker 0,
  // its previous rank): a connection that sends nothing, one that sends
  // garbage, and a worker of this job that claims rank 2.
  const auto port_of_1 = workers[1]->acceptor.local_endpoint();
  tcp_socket silent(context), garbage(context), other_rank(context);
  for (auto* stranger : {&silent, &garbage, &other_rank})
    stranger->connect(port_of_1);
  const std::string junk = "GET / HTTP/1.1\r\nHost: ring\r\n\r\n";
  boost::asio::write(garbage, boost::asio::buffer(junk));
  client_handshake claims_2{lockstep::detail::test::token,
                            {"ring-test", 0, 2, connection_purpose::ring}};
  boost::asio::write(other_rank, boost::asio::buffer(claims_2.hello()));
  // The silent one holds worker 1 for handshake_timeout (5 s); with a
  // deadline well past that, the ring forms and works.
  const auto deadline = io_clock::now() + handshake_timeout + 20s;
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        workers[r]->connect(workers[(r + 1) % world]->acceptor.local_endpoint(), deadline);
        std::vector<float> data(5, static_cast<float>(r + 1));
        ring_all_reduce(workers[r]->links, reduce_op::sum, dtype::f32,
                        {reinterpret_cast<std::uint8_t*>(data.data()), data.size() * 4},
                        io_clock::now() + 10s);
        CHECK(data == std::vector<float>(5, 6.0f));
      } catch (...) {
        errors[r] = std::current_exception();
        workers[r]->links.close();
      }
    });
  for (auto& t : threads)
    t.join();
  for (std::size_t r = 0; r < world; ++r) {
    INFO("worker " << r);
    if (errors[r])
      CHECK_NOTHROW(std::rethrow_exception(errors[r]));
  }
}

TEST_CASE("connect_ring ends at once when a watched connection ends, and goes on past one that "
          "only talks") {
  boost::asio::io_context context;
  // Worker 1 listens (so worker 0's dial and hello land in its queue) but
  // never runs its side: worker 0 waits for the ring until its deadline,
  // unless the watch ends the wait.
  unconnected_worker zero(context, 0, 2);
  unconnected_worker one(context, 1, 2);
  int talking[2];
  int closing[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, talking) == 0);
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, closing) == 0);
  ring_watch watch;
  watch.entries = {{talking[0], POLLIN, 0}, {closing[0], POLLIN, 0}};
  int talks_seen = 0;
  watch.ready = [&](std::size_t index) {
    if (index == 0) {
      ++talks_seen;
      return false; // alive: no longer watched
    }
    throw std::runtime_error("the watched peer left");
  };
  std::thread peers([&] {
    std::this_thread::sleep_for(100ms);
    CHECK(::write(talking[1], "x", 1) == 1);
    std::this_thread::sleep_for(200ms);
    ::close(closing[1]);
  });
  const auto error = error_of<std::runtime_error>(
    [&] { zero.connect(one.acceptor.local_endpoint(), io_clock::now() + 60s, watch); });
  peers.join();
  CHECK(error == "the watched peer left"); // not the deadline's timeout
  CHECK(talks_seen == 1);
  for (const int fd : {talking[0], talking[1], closing[0]})
    ::close(fd);
}

TEST_CASE("a tcp_link reaches only the ring's neighbours: another rank is a value_error naming it, "
          "before any byte moves") {
  boost::asio::io_context context;
  // Unconnected sockets: the check comes before any of them is touched.
  tcp_link ring(ring_links{0, 4, tcp_socket(context), tcp_socket(context)});
  std::vector<std::uint8_t> data(4);
  const auto deadline = ring.now() + 1s;
  const auto to_2 = error_of<value_error>([&] { ring.send(2, data, deadline); });
  CHECK(contains(to_2, "tcp_link of worker 0 of 4 cannot send to rank 2"));
  CHECK(contains(to_2, "it sends to rank 1 and receives from rank 3"));
  CHECK(contains(error_of<value_error>([&] { ring.receive(1, data, deadline); }),
                 "cannot receive from rank 1"));
  CHECK(contains(error_of<value_error>([&] { ring.exchange(1, data, 2, data, deadline); }),
                 "cannot receive from rank 2"));
  bytes frame;
  CHECK(contains(error_of<value_error>(
                   [&] { ring.exchange_frame(3, data, 3, frame, 100, deadline); }),
                 "cannot send to rank 3"));
  CHECK(contains(error_of<value_error>(
                   [&] { ring.exchange(link::no_rank, data, 3, {}, deadline); }),
                 "cannot send to no rank"));
}
