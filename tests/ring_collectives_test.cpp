// The ring's algorithm (src/collectives/ring_collectives.hpp) over the
// in-memory link (memory_link.hpp), without a socket: all-reduce for 1 to 4
// ranks, every dtype and op, sizes 0, 1, not divisible by the world, several
// segments and several chunks per segment, against closed-form results,
// with its agreement and without; all-gather and broadcast; ranks that
// issue different collectives, or pass a failure on, all throw the same
// error and the ring goes on; a rank that never comes is a timeout naming
// it, one that dies a link_closed. And the link itself: any rank to any
// rank, frames. No actor system: suite 'unit', so it runs under
// ThreadSanitizer too.

#include "collectives/ring_collectives.hpp"

#include "memory_link.hpp"
#include "ring_values.hpp"

#include "file_support.hpp"
#include "test_support.hpp"

#include "lockstep/error.hpp"
#include "lockstep/float16.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace lockstep;
using namespace lockstep::detail;
using namespace lockstep::detail::test::ring_values;
using lockstep::detail::test::memory_hub;
using lockstep::detail::test::memory_link;
using namespace std::chrono_literals;

namespace {

/// Runs `work` on `world` threads, each with its own end of one memory_hub;
/// returns what each threw (null for none). A rank that throws closes its
/// end, as a worker closes its links.
std::vector<std::exception_ptr> try_run(std::size_t world,
                                        const std::function<void(memory_link&)>& work) {
  memory_hub hub(world);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      memory_link link(hub, r);
      try {
        work(link);
      } catch (...) {
        errors[r] = std::current_exception();
        link.close();
      }
    });
  for (auto& t : threads)
    t.join();
  return errors;
}

/// try_run, failing the test if a rank threw.
void run(std::size_t world, const std::function<void(memory_link&)>& work) {
  const auto errors = try_run(world, work);
  for (std::size_t r = 0; r < world; ++r)
    if (errors[r])
      try {
        std::rethrow_exception(errors[r]);
      } catch (const std::exception& e) {
        FAIL("rank " << r << " threw: " << e.what());
      }
}

std::span<std::uint8_t> bytes_of(auto& values) {
  return {reinterpret_cast<std::uint8_t*>(values.data()), values.size() * sizeof(values[0])};
}

} // namespace

TEST_CASE("ring all-reduce over the in-memory link: 1 to 4 ranks, every dtype and op, sizes "
          "around the segments and chunks, with its agreement and without") {
  for (std::size_t world = 1; world <= 4; ++world) {
    CAPTURE(world);
    // 0, 1, not divisible by the world, the segmented path in one chunk
    // and in several (ring_chunk_bytes), one segment a chunk longer.
    const std::vector<std::size_t> sizes{0, 1, world + 1, 40'003, 200'003, world * 65'536 + 1};
    run(world, [&](memory_link& ring) {
      ring_records records;
      std::uint64_t seq = 0;
      for (const auto type : {dtype::f32, dtype::f64, dtype::i32, dtype::i64, dtype::f16,
                              dtype::bf16})
        for (const auto op : {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max,
                              reduce_op::prod})
          for (const auto elements : sizes)
            visit_dtype(type, [&]<class T>(T) {
              std::vector<T> agreed(elements);
              for (std::size_t i = 0; i < elements; ++i)
                agreed[i] = static_cast<T>(static_cast<float>(value(i, ring.rank(), op)));
              auto bare = agreed;
              const auto deadline = ring.now() + 20s;
              ring_all_reduce(ring, records, fingerprint_of(++seq, op, type, elements), nullptr,
                              op, type, bytes_of(agreed), deadline);
              ring_all_reduce(ring, op, type, bytes_of(bare), deadline);
              for (std::size_t i = 0; i < elements; ++i) {
                const auto want = expected<T>(i, ring.size(), op);
                if (!same_value(agreed[i], want) || !same_value(bare[i], want)) {
                  FAIL("rank " << ring.rank() << " of " << ring.size() << ": "
                               << to_string(type) << " " << to_string(op) << " of " << elements
                               << " elements, element " << i << " is "
                               << static_cast<float>(agreed[i]) << " (agreed) and "
                               << static_cast<float>(bare[i]) << " (bare), expected "
                               << static_cast<float>(want));
                  return;
                }
              }
            });
    });
  }
}

TEST_CASE("ring all-gather and broadcast over the in-memory link") {
  for (const std::size_t world : {2, 3, 4}) {
    CAPTURE(world);
    run(world, [&](memory_link& ring) {
      const auto rank = ring.rank();
      std::vector<std::uint8_t> blocks(world * 5, 0);
      for (std::size_t i = 0; i < 5; ++i)
        blocks[rank * 5 + i] = static_cast<std::uint8_t>(10 * rank + i);
      ring_all_gather(ring, blocks, ring.now() + 5s);
      for (std::size_t r = 0; r < world; ++r)
        for (std::size_t i = 0; i < 5; ++i)
          CHECK(blocks[r * 5 + i] == 10 * r + i);
      for (std::size_t root = 0; root < world; ++root) {
        std::vector<std::uint8_t> data(100'000, static_cast<std::uint8_t>(rank));
        ring_broadcast(ring, root, data, ring.now() + 5s);
        CHECK(data == std::vector<std::uint8_t>(100'000, static_cast<std::uint8_t>(root)));
      }
    });
  }
}

TEST_CASE("over the in-memory link, ranks that issue different collectives or pass a failure on "
          "all throw the same error before any data is used, and the ring goes on") {
  constexpr std::size_t world = 4;
  struct outcome {
    std::string type;
    std::string message;
  };
  std::vector<std::vector<outcome>> outcomes(world); // by rank, then case
  std::vector<std::vector<float>> sums(world);
  run(world, [&](memory_link& ring) {
    const auto rank = ring.rank();
    ring_records records;
    std::uint64_t seq = 0;
    // Rank `odd` issues `odd_elements` of `odd_type` (or fails), the others
    // `elements` float32s; returns what this rank threw.
    const auto attempt = [&](std::size_t odd, dtype odd_type, std::size_t odd_elements,
                             std::size_t elements, std::exception_ptr odd_failure) -> outcome {
      const auto type = rank == odd ? odd_type : dtype::f32;
      const auto count = rank == odd ? odd_elements : elements;
      std::vector<std::uint8_t> data(count * size_of(type), 1);
      try {
        if (count == 0) // an agreement alone
          ring_agree(ring, records, fingerprint_of(++seq, reduce_op::sum, type, count),
                     rank == odd ? odd_failure : nullptr, ring.now() + 5s);
        else
          ring_all_reduce(ring, records, fingerprint_of(++seq, reduce_op::sum, type, count),
                          rank == odd ? odd_failure : nullptr, reduce_op::sum, type, data,
                          ring.now() + 5s);
      } catch (const dtype_error& e) {
        return {"dtype_error", e.what()};
      } catch (const shape_error& e) {
        return {"shape_error", e.what()};
      } catch (const value_error& e) {
        return {"value_error", e.what()};
      }
      return {"none", ""};
    };
    // The small path (the agreement carries the data), the segmented ring
    // (the agreement first), an agreement alone, and a failure passed on.
    outcomes[rank].push_back(attempt(1, dtype::f64, 1, 1, nullptr));
    outcomes[rank].push_back(attempt(3, dtype::f32, 100'000, 100'001, nullptr));
    outcomes[rank].push_back(attempt(2, dtype::f32, 1, 0, nullptr));
    outcomes[rank].push_back(
      attempt(2, dtype::f32, 1, 1, std::make_exception_ptr(value_error("replica 5 failed"))));
    std::vector<float> data(3, static_cast<float>(rank + 1));
    ring_all_reduce(ring, records, fingerprint_of(++seq, reduce_op::sum, dtype::f32, 3), nullptr,
                    reduce_op::sum, dtype::f32, bytes_of(data), ring.now() + 5s);
    sums[rank] = data;
  });
  const std::vector<std::pair<std::string, std::string>> expected{
    {"dtype_error", "worker 0 has dtype float32 but worker 1 has dtype float64"},
    {"shape_error", "worker 0 has shape [100001] but worker 3 has shape [100000]"},
    {"shape_error", "worker 0 has shape [0] but worker 2 has shape [1]"},
    {"value_error", "replica 5 failed"}};
  for (std::size_t r = 0; r < world; ++r) {
    CAPTURE(r);
    REQUIRE(outcomes[r].size() == expected.size());
    for (std::size_t k = 0; k < expected.size(); ++k) {
      CAPTURE(k);
      CHECK(outcomes[r][k].type == expected[k].first);
      CHECK(contains(outcomes[r][k].message, expected[k].second));
      CHECK(outcomes[r][k].message == outcomes[0][k].message); // the same words everywhere
    }
    CHECK(sums[r] == std::vector<float>(3, 10.0f));
  }
  CHECK(contains(outcomes[0][1].message, "worker 3 issued all_reduce #2 sum float32 [100000]"));
}

TEST_CASE("over the in-memory link, a rank that never comes is a timeout naming it, one that "
          "dies a link_closed naming it") {
  SUBCASE("never comes") {
    const auto errors = try_run(3, [](memory_link& ring) {
      if (ring.rank() == 2)
        return; // never issues the collective
      ring_records records;
      std::vector<float> data(1000, 1.0f);
      ring_all_reduce(ring, records, fingerprint_of(1, reduce_op::sum, dtype::f32, 1000), nullptr,
                      reduce_op::sum, dtype::f32, bytes_of(data), ring.now() + 300ms);
    });
    // Rank 0 waits for rank 2's record; rank 1 for what rank 0 passes on.
    const auto waiting = error_of<timeout_error>([&] { std::rethrow_exception(errors[0]); });
    CHECK(contains(waiting, "no data came from rank 2 before the deadline"));
    CHECK(errors[1] != nullptr);
    CHECK(errors[2] == nullptr);
  }
  SUBCASE("dies") {
    const auto errors = try_run(3, [](memory_link& ring) {
      std::vector<float> data(300'000, 1.0f); // the segmented ring, several chunks
      if (ring.rank() == 2)
        throw std::runtime_error("killed"); // closes its end, as a process that dies
      ring_all_reduce(ring, reduce_op::sum, dtype::f32, bytes_of(data), ring.now() + 30s);
    });
    // The first survivor to fail names rank 2; the other may name it too,
    // or the survivor that closed its end before it.
    const auto zero = error_of<link_closed>([&] { std::rethrow_exception(errors[0]); });
    const auto one = error_of<link_closed>([&] { std::rethrow_exception(errors[1]); });
    CHECK((contains(zero, "rank 2 closed its link") || contains(one, "rank 2 closed its link")));
  }
}

TEST_CASE("the in-memory link reaches any rank of its group, in order, and refuses an oversized "
          "frame") {
  constexpr std::size_t world = 4;
  const auto errors = try_run(world, [](memory_link& ring) {
    const auto rank = ring.rank();
    // Every distance at once: rank r sends to r + d and receives from r - d.
    for (std::size_t d = 1; d < world; ++d) {
      std::vector<std::uint8_t> out(3, static_cast<std::uint8_t>(10 * rank + d));
      std::vector<std::uint8_t> in(3);
      ring.exchange((rank + d) % world, out, (rank + world - d) % world, in, ring.now() + 5s);
      CHECK(in == std::vector<std::uint8_t>(3, static_cast<std::uint8_t>(
                                                 10 * ((rank + world - d) % world) + d)));
    }
    CHECK_THROWS_AS(ring.send(world, std::vector<std::uint8_t>(1), ring.now() + 5s), value_error);
    // Frames: rank 0 sends rank 3 a short one, then one beyond the limit.
    if (rank == 0) {
      bytes frame(8 + 5, 'x');
      store_le(frame.data(), std::uint64_t{5});
      ring.send(3, frame, ring.now() + 5s);
      store_le(frame.data(), std::uint64_t{1} << 40);
      ring.send(3, frame, ring.now() + 5s);
    } else if (rank == 3) {
      bytes in;
      ring.exchange_frame(link::no_rank, {}, 0, in, 100, ring.now() + 5s);
      CHECK(in.size() == 13);
      CHECK(in.back() == 'x');
      ring.exchange_frame(link::no_rank, {}, 0, in, 100, ring.now() + 5s);
    }
  });
  for (std::size_t r = 0; r < 3; ++r)
    CHECK(errors[r] == nullptr);
  const auto refused = error_of<link_closed>([&] { std::rethrow_exception(errors[3]); });
  CHECK(contains(refused, "rank 0 sent a frame of 1099511627776 bytes"));
}
