// The point-to-point algorithms (recursive_doubling.hpp,
// halving_doubling.hpp, binomial_tree.hpp, peer_agreement.hpp) over the
// in-memory link (memory_link.hpp), which reaches any rank: worlds 1 to 9
// and 16 (powers of two and the fold of the extra ranks), sizes 0, 1, 3
// (fewer elements than ranks), 1000 and 100003, every dtype and op,
// against closed forms and bit for bit against the ring; floats of mixed
// sign give the same bits on every rank, those of each algorithm's
// documented order of combination; all-gather and broadcast from
// every root; ranks that issue different collectives, or pass a failure
// on, all throw the same error; a rank that never comes is a deadline
// error on every other rank. No actor system: suite 'unit', so it runs
// under ThreadSanitizer too.

#include "collectives/binomial_tree.hpp"
#include "collectives/halving_doubling.hpp"
#include "collectives/peer_agreement.hpp"
#include "collectives/power_of_two_core.hpp"
#include "collectives/recursive_doubling.hpp"
#include "collectives/ring_collectives.hpp"

#include "gather_broadcast_checks.hpp"
#include "memory_link.hpp"
#include "reduce_values.hpp"
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
using lockstep::detail::test::check_gather_and_broadcast;
using namespace lockstep::detail::test::ring_values;
using lockstep::detail::test::memory_hub;
using lockstep::detail::test::memory_link;
using namespace std::chrono_literals;

namespace {

/// Runs `work` on `world` threads, each with its own end of one memory_hub;
/// returns what each threw (null for none). A rank that throws closes its
/// end, as a worker closes its links, unless `close_on_error` is false.
std::vector<std::exception_ptr> try_run(std::size_t world,
                                        const std::function<void(memory_link&)>& work,
                                        bool close_on_error = true) {
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
        if (close_on_error)
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
      FAIL("rank " << r << " of " << world << " threw: " << what_of(errors[r]));
}

std::span<std::uint8_t> bytes_of(auto& values) {
  return {reinterpret_cast<std::uint8_t*>(values.data()), values.size() * sizeof(values[0])};
}

const std::vector<std::size_t> worlds{1, 2, 3, 4, 5, 6, 7, 8, 9, 16};
constexpr dtype all_types[] = {dtype::f32, dtype::f64, dtype::i32,
                               dtype::i64, dtype::f16, dtype::bf16};
constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::mean, reduce_op::min,
                                 reduce_op::max, reduce_op::prod};

/// An all-reduce with its agreement (both algorithms' signature).
using agreed_all_reduce = void (*)(detail::link&, ring_records&, const collective_fingerprint&,
                                   const std::exception_ptr&, reduce_op, dtype,
                                   std::span<std::uint8_t>, detail::link::time_point);

struct algorithm {
  const char* name;
  agreed_all_reduce agreed;
  void (*bare)(detail::link&, reduce_op, dtype, std::span<std::uint8_t>,
               detail::link::time_point);
};

const algorithm algorithms[] = {
  {"recursive doubling", recursive_doubling_all_reduce, recursive_doubling_all_reduce},
  {"halving-doubling", halving_doubling_all_reduce, halving_doubling_all_reduce}};

} // namespace

TEST_CASE("recursive doubling and halving-doubling all-reduce: worlds 1 to 9 and 16, every dtype "
          "and op, sizes 0 to 100003, the closed forms and the ring's bits") {
  for (const auto world : worlds) {
    CAPTURE(world);
    run(world, [&](memory_link& group) {
      ring_records records;
      std::uint64_t seq = 0;
      for (const auto type : all_types)
        for (const auto op : all_ops)
          for (const std::size_t elements : {0, 1, 3, 1000, 100'003})
            visit_dtype(type, [&]<class T>(T) {
              // The large size (many elements in every segment, in every
              // world; the layout does not depend on the op) with SUM and
              // its agreement only, to fit the unit suite's time under
              // ThreadSanitizer.
              const bool large = elements > 1000;
              if ((large || elements == 0) && op != reduce_op::sum) // 0: the agreement alone
                return;
              std::vector<T> input(elements);
              for (std::size_t i = 0; i < elements; ++i)
                input[i] = static_cast<T>(static_cast<float>(value(i, group.rank(), op)));
              const auto deadline = group.now() + 60s;
              // The ring's bits, for integers (floats of small integers are
              // exact: the closed form holds them to the ring's bits too).
              const bool integer = type == dtype::i32 || type == dtype::i64;
              auto ring = input;
              if (integer)
                ring_all_reduce(group, op, type, bytes_of(ring), deadline);
              for (const auto& a : algorithms) {
                auto agreed = input;
                auto bare = input;
                a.agreed(group, records, fingerprint_of(++seq, op, type, elements), nullptr, op,
                         type, bytes_of(agreed), deadline);
                // Without the agreement: the same data path, for SUM.
                if (op == reduce_op::sum && !large)
                  a.bare(group, op, type, bytes_of(bare), deadline);
                else
                  bare = agreed;
                for (std::size_t i = 0; i < elements; ++i) {
                  const auto want = expected<T>(i, world, op);
                  if (!same_value(agreed[i], want) || !same_value(bare[i], want)) {
                    FAIL(a.name << ", rank " << group.rank() << " of " << world << ": "
                                << to_string(type) << " " << to_string(op) << " of " << elements
                                << " elements, element " << i << " is "
                                << static_cast<float>(agreed[i]) << " (agreed) and "
                                << static_cast<float>(bare[i]) << " (bare), expected "
                                << static_cast<float>(want));
                    return;
                  }
                }
                if (integer && elements > 0 && (std::memcmp(agreed.data(), ring.data(),
                                                 elements * sizeof(T)) != 0
                                     || std::memcmp(bare.data(), ring.data(),
                                                    elements * sizeof(T)) != 0)) {
                  FAIL(a.name << ", rank " << group.rank() << " of " << world << ": "
                              << to_string(type) << " " << to_string(op) << " of " << elements
                              << " elements differs from the ring's bits");
                  return;
                }
              }
            });
    });
  }
}

TEST_CASE("recursive doubling and halving-doubling give every rank the same bits of floats of "
          "mixed sign and magnitude, paced or not, and integers the ring's bits") {
  for (const std::size_t world : {3, 5, 7, 8, 16}) {
    CAPTURE(world);
    for (const auto& a : algorithms) {
      CAPTURE(std::string(a.name));
      for (const auto type : all_types)
        for (const auto op : {reduce_op::sum, reduce_op::prod}) {
          CAPTURE(to_string(type));
          CAPTURE(to_string(op));
          constexpr std::int64_t elements = 3001;
          std::vector<std::vector<std::uint8_t>> results(world); // by rank
          std::vector<std::vector<std::uint8_t>> rings(world);
          run(world, [&](memory_link& group) {
            auto input = make_input(type, elements, [](std::size_t) { return 0.0; });
            mixed_values(group.rank()).fill(input, op);
            std::vector<std::uint8_t> mine(elements * size_of(type));
            visit_dtype(type, [&]<class T>(T) {
              std::memcpy(mine.data(), input.data<T>().data(), mine.size());
            });
            auto ring = mine;
            auto paced = mine;
            a.bare(group, op, type, mine, group.now() + 60s);
            ring_all_reduce(group, op, type, ring, group.now() + 60s);
            group.pace_from(1); // every call paced (core_pacing.hpp): the same bits
            a.bare(group, op, type, paced, group.now() + 60s);
            group.pace_from(SIZE_MAX);
            CHECK(paced == mine);
            results[group.rank()] = std::move(mine);
            rings[group.rank()] = std::move(ring);
          });
          for (std::size_t r = 1; r < world; ++r)
            CHECK(results[r] == results[0]);
          if (type == dtype::i32 || type == dtype::i64)
            CHECK(results[0] == rings[0]);
        }
    }
  }
}

TEST_CASE("recursive-doubling all-gather and binomial-tree broadcast: worlds 1 to 9 and 16, "
          "blocks of 0 to 1000 bytes, every root") {
  for (const auto world : worlds) {
    CAPTURE(world);
    run(world, [&](memory_link& group) {
      for (const std::size_t block : {0, 1, 3, 1000})
        check_gather_and_broadcast(group, block, block * 100);
      std::vector<std::uint8_t> odd(world + 1);
      if (world > 1)
        CHECK_THROWS_AS(recursive_doubling_all_gather(group, odd, group.now() + 1s), value_error);
      CHECK_THROWS_AS(binomial_tree_broadcast(group, world, odd, group.now() + 1s), value_error);
    });
  }
}

TEST_CASE("over recursive doubling, ranks that issue different collectives or pass a failure on "
          "all throw the same error before any data is used, and the group goes on") {
  for (const std::size_t world : {2, 5, 8}) {
    for (const auto& a : algorithms) {
      CAPTURE(world);
      CAPTURE(std::string(a.name));
      std::vector<std::vector<std::string>> outcomes(world); // by rank, then case
      std::vector<std::vector<float>> sums(world);
      run(world, [&](memory_link& group) {
        const auto rank = group.rank();
        ring_records records;
        std::uint64_t seq = 0;
        // Rank `odd` issues `odd_elements` of `odd_type` (or fails), the
        // others `elements` float32s; returns the type and words it threw.
        const auto attempt = [&](std::size_t odd, dtype odd_type, std::size_t odd_elements,
                                 std::size_t elements, std::exception_ptr odd_failure) {
          const auto type = rank == odd ? odd_type : dtype::f32;
          const auto count = rank == odd ? odd_elements : elements;
          std::vector<std::uint8_t> data(count * size_of(type), 1);
          try {
            if (count == 0) // an agreement alone
              peer_agree(group, records, fingerprint_of(++seq, reduce_op::sum, type, count),
                         rank == odd ? odd_failure : nullptr, group.now() + 10s);
            else
              a.agreed(group, records, fingerprint_of(++seq, reduce_op::sum, type, count),
                       rank == odd ? odd_failure : nullptr, reduce_op::sum, type, data,
                       group.now() + 10s);
          } catch (const dtype_error& e) {
            return "dtype_error: " + std::string(e.what());
          } catch (const shape_error& e) {
            return "shape_error: " + std::string(e.what());
          } catch (const value_error& e) {
            return "value_error: " + std::string(e.what());
          }
          return std::string("none");
        };
        const auto last = world - 1;
        outcomes[rank].push_back(attempt(1, dtype::f64, 1, 1, nullptr));
        outcomes[rank].push_back(attempt(last, dtype::f32, 100'000, 100'001, nullptr));
        outcomes[rank].push_back(attempt(0, dtype::f32, 1, 0, nullptr));
        outcomes[rank].push_back(attempt(
          last, dtype::f32, 1, 1, std::make_exception_ptr(value_error("replica 5 failed"))));
        std::vector<float> data(3, static_cast<float>(rank + 1));
        a.agreed(group, records, fingerprint_of(++seq, reduce_op::sum, dtype::f32, 3), nullptr,
                 reduce_op::sum, dtype::f32, bytes_of(data), group.now() + 10s);
        sums[rank] = data;
      });
      const std::vector<std::pair<std::string, std::string>> expected{
        {"dtype_error: ", "worker 0 has dtype float32 but worker 1 has dtype float64"},
        {"shape_error: ", "worker 0 has shape [100001] but worker " + std::to_string(world - 1)
                            + " has shape [100000]"},
        {"shape_error: ", "worker 0 has shape [1] but worker 1 has shape [0]"},
        {"value_error: ", "replica 5 failed"}};
      for (std::size_t r = 0; r < world; ++r) {
        CAPTURE(r);
        REQUIRE(outcomes[r].size() == expected.size());
        for (std::size_t k = 0; k < expected.size(); ++k) {
          CAPTURE(k);
          CAPTURE(outcomes[r][k]);
          CHECK(outcomes[r][k].starts_with(expected[k].first));
          CHECK(contains(outcomes[r][k], expected[k].second));
          CHECK(outcomes[r][k] == outcomes[0][k]); // the same words everywhere
        }
        CHECK(sums[r] == std::vector<float>(3, static_cast<float>(world * (world + 1) / 2)));
      }
    }
  }
}

TEST_CASE("a rank that never comes is a deadline error on every other rank, naming it where a "
          "rank waits for it") {
  using collective = std::function<void(memory_link&)>;
  const std::vector<std::pair<std::string, collective>> collectives{
    {"recursive doubling",
     [](memory_link& group) {
       ring_records records;
       std::vector<float> data(1000, 1.0f);
       recursive_doubling_all_reduce(group, records,
                                     fingerprint_of(1, reduce_op::sum, dtype::f32, 1000), nullptr,
                                     reduce_op::sum, dtype::f32, bytes_of(data),
                                     group.now() + 300ms);
     }},
    {"halving-doubling",
     [](memory_link& group) {
       std::vector<float> data(1000, 1.0f);
       halving_doubling_all_reduce(group, reduce_op::sum, dtype::f32, bytes_of(data),
                                   group.now() + 300ms);
     }},
    {"all-gather",
     [](memory_link& group) {
       std::vector<std::uint8_t> data(group.size() * 10);
       recursive_doubling_all_gather(group, data, group.now() + 300ms);
     }},
    {"broadcast from the rank that never comes", [](memory_link& group) {
       std::vector<std::uint8_t> data(10);
       binomial_tree_broadcast(group, 2, data, group.now() + 300ms);
     }}};
  for (const std::size_t world : {5, 8}) {
    for (const auto& [name, work] : collectives) {
      CAPTURE(world);
      CAPTURE(name);
      // Rank 2 never issues the collective; the others keep their links
      // open, so each fails at its own deadline.
      const auto errors = try_run(
        world,
        [&](memory_link& group) {
          if (group.rank() != 2)
            work(group);
        },
        false);
      CHECK(errors[2] == nullptr);
      bool named = false;
      for (std::size_t r = 0; r < world; ++r) {
        if (r == 2)
          continue;
        CAPTURE(r);
        const auto what = error_of<link_deadline_passed>([&] {
          if (errors[r])
            std::rethrow_exception(errors[r]);
        });
        named = named || contains(what, "no data came from rank 2 before the deadline");
      }
      CHECK(named);
    }
  }
}

namespace {

/// The leaves of the power-of-two core (power_of_two_core.hpp) of
/// `inputs` (one per rank): the fold's pairs x_{2i} op x_{2i+1}, then the
/// ranks beyond them.
template <class T, class Op>
std::vector<T> core_leaves(const std::vector<T>& inputs, Op op) {
  const power_of_two_core layout(inputs.size());
  std::vector<T> leaves;
  for (std::size_t v = 0; v < layout.core; ++v)
    leaves.push_back(v < layout.extra ? op(inputs[2 * v], inputs[2 * v + 1])
                                      : inputs[v + layout.extra]);
  return leaves;
}

/// Recursive doubling's documented order: a balanced tree in rank order.
template <class T, class Op>
T balanced_tree(const std::vector<T>& leaves, std::size_t first, std::size_t count, Op op) {
  if (count == 1)
    return leaves[first];
  return op(balanced_tree(leaves, first, count / 2, op),
            balanced_tree(leaves, first + count / 2, count / 2, op));
}

/// Halving-doubling's documented order: the first level joins leaves
/// count/2 apart, the next count/4 apart, .. the last neighbours.
template <class T, class Op>
T halving_tree(std::vector<T> leaves, Op op) {
  while (leaves.size() > 1) {
    const auto half = leaves.size() / 2;
    std::vector<T> next;
    for (std::size_t j = 0; j < half; ++j)
      next.push_back(op(leaves[j], leaves[j + half]));
    leaves = std::move(next);
  }
  return leaves[0];
}

} // namespace

TEST_CASE("recursive doubling and halving-doubling combine floats in their documented orders") {
  for (const std::size_t world : {2, 3, 5, 6, 8, 9, 16}) {
    CAPTURE(world);
    constexpr std::size_t elements = 1001;
    std::vector<std::vector<double>> inputs(world);
    for (std::size_t r = 0; r < world; ++r) {
      auto t = make_input(dtype::f64, elements, [](std::size_t) { return 0.0; });
      mixed_values(r + 100).fill(t, reduce_op::sum);
      const auto values = t.data<double>();
      inputs[r].assign(values.begin(), values.end());
    }
    std::vector<std::vector<double>> doubling(world);
    std::vector<std::vector<double>> halving(world);
    run(world, [&](memory_link& group) {
      auto a = inputs[group.rank()];
      auto b = a;
      recursive_doubling_all_reduce(group, reduce_op::sum, dtype::f64, bytes_of(a),
                                    group.now() + 30s);
      halving_doubling_all_reduce(group, reduce_op::sum, dtype::f64, bytes_of(b),
                                  group.now() + 30s);
      doubling[group.rank()] = std::move(a);
      halving[group.rank()] = std::move(b);
    });
    const auto plus = [](double x, double y) { return x + y; };
    bool orders_differ = false; // the two orders give different bits somewhere
    for (std::size_t i = 0; i < elements; ++i) {
      std::vector<double> column(world);
      for (std::size_t r = 0; r < world; ++r)
        column[r] = inputs[r][i];
      const auto leaves = core_leaves(column, plus);
      const auto tree = balanced_tree(leaves, 0, leaves.size(), plus);
      const auto halves = halving_tree(leaves, plus);
      orders_differ = orders_differ || tree != halves;
      for (std::size_t r = 0; r < world; ++r)
        if (std::memcmp(&doubling[r][i], &tree, sizeof(double)) != 0
            || std::memcmp(&halving[r][i], &halves, sizeof(double)) != 0) {
          FAIL("rank " << r << ", element " << i << ": " << doubling[r][i] << " and "
                       << halving[r][i] << ", documented " << tree << " and " << halves);
          return;
        }
    }
    if (world >= 4) // three or more leaves: the orders are not the same
      CHECK(orders_differ);
  }
}

TEST_CASE("the agreed recursive-doubling all-reduce of a small buffer carries it in the records: "
          "rank order, the ring's bits") {
  for (const std::size_t world : {2, 3, 5, 8}) {
    CAPTURE(world);
    constexpr std::size_t elements = 9; // (world - 1) * 72 bytes: the all-gather path
    std::vector<std::vector<double>> inputs(world);
    for (std::size_t r = 0; r < world; ++r) {
      auto t = make_input(dtype::f64, elements, [](std::size_t) { return 0.0; });
      mixed_values(r + 7).fill(t, reduce_op::sum);
      const auto values = t.data<double>();
      inputs[r].assign(values.begin(), values.end());
    }
    std::vector<std::vector<double>> doubling(world);
    std::vector<std::vector<double>> ring(world);
    run(world, [&](memory_link& group) {
      ring_records records;
      auto a = inputs[group.rank()];
      auto b = a;
      const auto deadline = group.now() + 30s;
      recursive_doubling_all_reduce(group, records,
                                    fingerprint_of(1, reduce_op::sum, dtype::f64, elements),
                                    nullptr, reduce_op::sum, dtype::f64, bytes_of(a), deadline);
      ring_all_reduce(group, records, fingerprint_of(2, reduce_op::sum, dtype::f64, elements),
                      nullptr, reduce_op::sum, dtype::f64, bytes_of(b), deadline);
      doubling[group.rank()] = std::move(a);
      ring[group.rank()] = std::move(b);
    });
    for (std::size_t i = 0; i < elements; ++i) {
      double in_rank_order = inputs[0][i];
      for (std::size_t r = 1; r < world; ++r)
        in_rank_order += inputs[r][i];
      for (std::size_t r = 0; r < world; ++r)
        if (std::memcmp(&doubling[r][i], &in_rank_order, sizeof(double)) != 0
            || std::memcmp(&ring[r][i], &in_rank_order, sizeof(double)) != 0) {
          FAIL("rank " << r << ", element " << i << ": " << doubling[r][i] << " and "
                       << ring[r][i] << ", in rank order " << in_rank_order);
          return;
        }
    }
  }
}

TEST_CASE("a rank that dies mid-collective fails every other rank's all-reduce with link_closed, "
          "naming it") {
  for (const std::size_t world : {5, 8}) {
    for (const auto& a : algorithms) {
      CAPTURE(world);
      const std::string name = a.name;
      CAPTURE(name);
      const auto errors = try_run(world, [&](memory_link& group) {
        std::vector<float> data(300'000, 1.0f);
        if (group.rank() == 2)
          throw std::runtime_error("killed"); // closes its end, as a process that dies
        a.bare(group, reduce_op::sum, dtype::f32, bytes_of(data), group.now() + 30s);
      });
      bool named = false;
      for (std::size_t r = 0; r < world; ++r) {
        if (r == 2)
          continue;
        CAPTURE(r);
        const auto what = error_of<link_closed>([&] {
          if (errors[r])
            std::rethrow_exception(errors[r]);
        });
        named = named || contains(what, "rank 2 closed its link");
      }
      CHECK(named);
    }
  }
}

TEST_CASE("ranks that disagree on pacing fail with link_closed where the word should be, not with "
          "wrong sums") {
  // World 3: rank 1 folds rank 0 in and is behind, rank 2 is ahead and
  // waits for rank 1's word, which an unpaced rank 1 does not send.
  for (const auto& a : algorithms) {
    const std::string name = a.name;
    CAPTURE(name);
    const auto errors = try_run(3, [&](memory_link& group) {
      if (group.rank() != 1)
        group.pace_from(1);
      std::vector<float> data(1000, 1.0f); // first byte 0, not the word
      a.bare(group, reduce_op::sum, dtype::f32, bytes_of(data), group.now() + 30s);
    });
    const auto what = error_of<link_closed>([&] {
      if (errors[2])
        std::rethrow_exception(errors[2]);
    });
    CHECK(contains(what, "rank 1 sent byte 0 where its pacing word belongs"));
  }
}
