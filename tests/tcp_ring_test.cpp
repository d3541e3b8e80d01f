// The ring collectives between workers (src/transport/tcp/ring_*.hpp), with
// one thread per worker and authenticated loopback connections: all-reduce
// for 1 to 4 workers, sizes 0, 1, not divisible by the world, several
// segments and several chunks per segment, every dtype and op, against
// closed-form results; all-gather and broadcast; workers that issue different collectives; a worker that dies
// mid-collective and one that never comes. No actor system: suite 'unit',
// so it runs under ThreadSanitizer too.

#include "transport/tcp/ring_collectives.hpp"

#include "loopback_ring.hpp"

#include "test_support.hpp"
#include "file_support.hpp"

#include "lockstep/error.hpp"
#include "lockstep/float16.hpp"

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

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
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

/// Worker r's element i: small integers, so every dtype holds every sum,
/// min, max and product exactly.
long long value(std::size_t i, std::size_t r, reduce_op op) {
  if (op == reduce_op::prod)
    return static_cast<long long>((i + r) % 3 + 1);
  return static_cast<long long>((i * 7 + r * 3) % 11) - 5;
}

/// The expected element, computed exactly and converted once, as the ring
/// does (MEAN: the sum divided in T, halves in float).
template <class T>
T expected(std::size_t i, std::size_t world, reduce_op op) {
  long long acc = value(i, 0, op);
  for (std::size_t r = 1; r < world; ++r) {
    const auto x = value(i, r, op);
    switch (op) {
      case reduce_op::sum:
      case reduce_op::mean:
        acc += x;
        break;
      case reduce_op::min:
        acc = std::min(acc, x);
        break;
      case reduce_op::max:
        acc = std::max(acc, x);
        break;
      case reduce_op::prod:
        acc *= x;
        break;
    }
  }
  if (op != reduce_op::mean)
    return static_cast<T>(static_cast<float>(acc));
  if constexpr (is_half_v<T>)
    return T(static_cast<float>(acc) / static_cast<float>(world));
  else if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(static_cast<T>(acc) / static_cast<T>(world));
  else
    return static_cast<T>(acc / static_cast<long long>(world));
}

template <class T>
bool same_value(T a, T b) {
  if constexpr (is_half_v<T>)
    return static_cast<float>(a) == static_cast<float>(b);
  else
    return a == b;
}

collective_fingerprint fingerprint_of(std::uint64_t seq, reduce_op op, dtype type,
                                      std::size_t elements) {
  collective_fingerprint f;
  f.seq = seq;
  f.op = "all_reduce";
  f.reduction = std::string(to_string(op));
  f.dtype = type;
  f.shape = {static_cast<std::int64_t>(elements)};
  return f;
}

} // namespace

TEST_CASE("ring all-reduce: 1 to 4 workers, every dtype and op, sizes around the segments") {
  for (std::size_t world = 1; world <= 4; ++world) {
    CAPTURE(world);
    loopback_ring workers(world);
    // 0, 1, not divisible by the world, and (for more than one worker) the
    // segmented path with uneven segments, in one chunk and in several
    // (ring_chunk_bytes).
    const std::vector<std::size_t> sizes{0, 1, world + 1, 40'003, 200'003};
    workers.run([&](ring_links& links) {
      std::uint64_t seq = 0;
      for (const auto type : {dtype::f32, dtype::f64, dtype::i32, dtype::i64, dtype::f16,
                              dtype::bf16})
        for (const auto op : {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max,
                              reduce_op::prod})
          for (const auto elements : sizes)
            visit_dtype(type, [&]<class T>(T) {
              std::vector<T> data(elements);
              for (std::size_t i = 0; i < elements; ++i)
                data[i] = static_cast<T>(static_cast<float>(value(i, links.rank, op)));
              const auto deadline = io_clock::now() + 20s;
              ring_agree(links, fingerprint_of(++seq, op, type, elements), deadline);
              ring_all_reduce(links, op, type,
                              {reinterpret_cast<std::uint8_t*>(data.data()), elements * sizeof(T)},
                              deadline);
              for (std::size_t i = 0; i < elements; ++i)
                if (!same_value(data[i], expected<T>(i, links.world, op))) {
                  FAIL("worker " << links.rank << " of " << links.world << ": "
                                 << to_string(type) << " " << to_string(op) << " of "
                                 << elements << " elements, element " << i << " is "
                                 << static_cast<float>(data[i]) << ", expected "
                                 << static_cast<float>(expected<T>(i, links.world, op)));
                  return;
                }
            });
    });
  }
}

TEST_CASE("ring all-gather and broadcast") {
  loopback_ring workers(3);
  workers.run([](ring_links& links) {
    std::vector<std::uint8_t> blocks(3 * 5, 0);
    for (std::size_t i = 0; i < 5; ++i)
      blocks[links.rank * 5 + i] = static_cast<std::uint8_t>(10 * links.rank + i);
    ring_all_gather(links, blocks, io_clock::now() + 5s);
    for (std::size_t r = 0; r < 3; ++r)
      for (std::size_t i = 0; i < 5; ++i)
        CHECK(blocks[r * 5 + i] == 10 * r + i);
    for (std::size_t root = 0; root < 3; ++root) {
      std::vector<std::uint8_t> data(100'000, static_cast<std::uint8_t>(links.rank));
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
      [&](ring_links& links) { ring_agree(links, f(links.rank), io_clock::now() + 5s); });
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
  const auto errors = again.try_run([](ring_links& links) {
    ring_agree(links, fingerprint_of(1, reduce_op::sum, dtype::f32, links.rank == 2 ? 8 : 4),
               io_clock::now() + 5s);
  });
  for (const auto& error : errors) {
    const auto message = error_of<shape_error>([&] { std::rethrow_exception(error); });
    CHECK(contains(message, "worker 0 has shape [4] but worker 2 has shape [8]"));
    CHECK(contains(message, "worker 2 issued all_reduce #1 sum float32 [8]"));
  }
}

TEST_CASE("a worker that dies mid-collective fails the others at once; a frozen one at the deadline") {
  SUBCASE("killed") {
    loopback_ring workers(3);
    const auto start = io_clock::now();
    const auto errors = workers.try_run([](ring_links& links) {
      std::vector<float> data(2'000'000, 1.0f); // several MiB: beyond the socket buffers
      if (links.rank == 2) {
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
    const auto errors = workers.try_run([](ring_links& links) {
      if (links.rank == 2) {
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
