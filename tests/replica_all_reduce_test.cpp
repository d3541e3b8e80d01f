// replica_context::all_reduce through the public API, on every path: the
// fast path (a slice_all_reduce strategy, the default on CPU devices, whose
// replicas meet at the collective on their own threads), slice_all_reduce
// from cross-replica context (batch_reduce_to / reduce_to, run by the
// device executors) and the merge_call path (reduction_to_one_device).
// Results against closed forms and bit for bit between the paths; errors of
// the same type on both replica paths, after which the strategy still
// reduces correctly.

#include "lockstep/lockstep.hpp"

#include "reduce_values.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

using namespace lockstep;
using namespace std::chrono_literals;

namespace {

const std::vector<int> world_sizes{1, 2, 3, 4, 7};
constexpr dtype all_dtypes[] = {dtype::f32, dtype::f64, dtype::i32, dtype::i64};
constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max,
                                 reduce_op::prod};

/// How a reduction runs.
enum class path {
  fast,              // ctx.all_reduce, default strategy (slice_all_reduce)
  fast_small_chunks, // the same with 24-byte chunks
  cross_replica,     // strategy.extended().batch_reduce_to / reduce_to
  merge,             // ctx.all_reduce via merge_call (reduction_to_one_device)
};

std::string name_of(path p) {
  switch (p) {
    case path::fast:
      return "fast path";
    case path::fast_small_chunks:
      return "fast path, 24-byte chunks";
    case path::cross_replica:
      return "slice_all_reduce in cross-replica context";
    case path::merge:
      return "merge_call path";
  }
  return "?";
}

mirrored_strategy slices_strategy(int n, slice_all_reduce_options options) {
  return mirrored_strategy{cpu_devices(n),
                           {.cross_device_ops = std::make_shared<slice_all_reduce>(options)}};
}

mirrored_strategy merge_strategy(int n) {
  return mirrored_strategy{cpu_devices(n),
                           {.cross_device_ops = std::make_shared<reduction_to_one_device>()}};
}

mirrored_strategy make_strategy(path p, int n) {
  switch (p) {
    case path::fast_small_chunks:
      return slices_strategy(n, {.chunk_bytes = 24});
    case path::merge:
      return merge_strategy(n);
    default:
      return mirrored_strategy{cpu_devices(n)};
  }
}

/// The two strategies whose ctx.all_reduce is compared: fast and merge.
struct both_paths {
  path which;
  mirrored_strategy strategy;
};

std::vector<both_paths> replica_paths(int n) {
  std::vector<both_paths> out;
  out.push_back({path::fast, mirrored_strategy{cpu_devices(n)}});
  out.push_back({path::merge, merge_strategy(n)});
  return out;
}

std::size_t id_of(replica_context& ctx) {
  return ctx.replica_id_in_sync_group();
}

struct sweep_case {
  reduce_op op;
  dtype type;
  std::int64_t count;
};

tensor sweep_input(const sweep_case& c, std::size_t r, const device_spec& device) {
  auto t = tensor::zeros(c.type, {c.count}, device);
  visit_dtype(c.type, [&]<class T>(T) {
    auto data = t.data<T>();
    for (std::size_t i = 0; i < data.size(); ++i)
      data[i] = static_cast<T>(input_value(c.op, r, i));
  });
  return t;
}

/// The number of elements in `t` that differ from the closed form.
std::size_t wrong_elements(const tensor& t, const sweep_case& c, std::size_t n) {
  std::size_t wrong = 0;
  visit_dtype(c.type, [&]<class T>(T) {
    const auto data = t.data<T>();
    for (std::size_t i = 0; i < data.size(); ++i)
      wrong += data[i] == expected_value<T>(c.op, n, i) ? 0 : 1;
  });
  return wrong;
}

tensor mixed_tensor(dtype type, shape_t shape, std::uint64_t seed, reduce_op op,
                    const device_spec& device = current_device()) {
  auto t = tensor::zeros(type, std::move(shape), device);
  mixed_values{seed}.fill(t, op);
  return t;
}

bool same_bytes(const tensor& a, const tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape()
         && std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// Every replica all_reduces its value r + 1 (int32[3]); checks 1 + ... + n.
void check_still_reduces(const strategy& s, int n) {
  auto out = s.run([](replica_context& ctx) {
    const auto x = static_cast<std::int32_t>(id_of(ctx) + 1);
    return ctx.all_reduce(reduce_op::sum, tensor::from<std::int32_t>({x, 2 * x, 3 * x}));
  });
  const auto total = n * (n + 1) / 2;
  for (int r = 0; r < n; ++r)
    CHECK(out[static_cast<std::size_t>(r)]
          == tensor::from<std::int32_t>({total, 2 * total, 3 * total}));
}

} // namespace

// -- results ----------------------------------------------------------------------

TEST_CASE("all_reduce on every path, replica count, element count, dtype and op against "
          "closed forms") {
  for (auto p : {path::fast, path::fast_small_chunks, path::cross_replica, path::merge})
    for (int n : world_sizes) {
      const auto un = static_cast<std::size_t>(n);
      // 0, 1, 7, not divisible by n, and three default (4 KiB) chunks of
      // float32 per replica's share plus a remainder.
      const std::int64_t counts[] = {0, 1, 7, 13 * n + (n > 1 ? 1 : 0), 3 * 1024 * n + 5};
      std::vector<sweep_case> cases;
      for (auto count : counts)
        for (auto type : all_dtypes)
          for (auto op : all_ops)
            cases.push_back({op, type, count});

      auto s = make_strategy(p, n);
      // results[k][r]: case k's result on replica r.
      std::vector<std::vector<tensor>> results(cases.size());
      if (p == path::cross_replica) {
        for (auto op : all_ops) {
          std::vector<std::size_t> picked;
          std::vector<reduce_pair> pairs;
          for (std::size_t k = 0; k < cases.size(); ++k) {
            if (cases[k].op != op)
              continue;
            std::vector<tensor> parts;
            for (int r = 0; r < n; ++r)
              parts.push_back(sweep_input(cases[k], static_cast<std::size_t>(r), cpu_device(r)));
            per_replica<tensor> value{std::move(parts)};
            destinations where{value};
            picked.push_back(k);
            pairs.push_back({std::move(value), std::move(where)});
          }
          const auto batch = s.extended().batch_reduce_to(op, pairs);
          REQUIRE(batch.size() == pairs.size());
          for (std::size_t j = 0; j < picked.size(); ++j) {
            results[picked[j]] = batch[j].values();
            // reduce_to of the same value agrees.
            const auto single =
                s.extended().reduce_to(op, pairs[j].value, pairs[j].destination);
            for (std::size_t r = 0; r < un; ++r)
              CHECK(same_bytes(single[r], batch[j][r]));
          }
        }
      } else {
        auto out = s.run([&](replica_context& ctx) {
          const auto r = id_of(ctx);
          std::vector<tensor> mine;
          for (const auto& c : cases)
            mine.push_back(ctx.all_reduce(c.op, sweep_input(c, r, current_device())));
          return mine;
        });
        for (std::size_t r = 0; r < un; ++r)
          for (std::size_t k = 0; k < cases.size(); ++k)
            results[k].push_back(out[r][k]);
      }

      for (std::size_t k = 0; k < cases.size(); ++k) {
        const auto& c = cases[k];
        INFO(name_of(p) << ", n=" << n << ", op=" << to_string(c.op)
                        << ", dtype=" << to_string(c.type) << ", count=" << c.count);
        REQUIRE(results[k].size() == un);
        std::size_t wrong = 0;
        for (std::size_t r = 0; r < un; ++r) {
          const auto& t = results[k][r];
          CHECK(t.device() == cpu_device(static_cast<int>(r)).canonical());
          CHECK(t.dtype() == c.type);
          CHECK(t.shape() == shape_t{c.count});
          wrong += wrong_elements(t, c, un);
        }
        CHECK(wrong == 0);
      }
    }
}

TEST_CASE("the fast path and the cross-replica path equal the merge_call path bit for bit") {
  for (int n : world_sizes) {
    const auto un = static_cast<std::size_t>(n);
    for (auto op : all_ops) {
      CAPTURE(n);
      CAPTURE(to_string(op));
      const auto fn = [op](replica_context& ctx) {
        const auto r = id_of(ctx);
        std::vector<tensor> mine;
        for (auto type : all_dtypes)
          for (std::int64_t count : {std::int64_t{1}, std::int64_t{997}, std::int64_t{20011}})
            mine.push_back(ctx.all_reduce(op, mixed_tensor(type, {count}, r, op)));
        return mine;
      };
      auto fast = mirrored_strategy{cpu_devices(n)}.run(fn);
      auto small_chunks = slices_strategy(n, {.chunk_bytes = 40}).run(fn);
      auto merged = merge_strategy(n).run(fn);
      // The same values reduced in cross-replica context.
      mirrored_strategy cross{cpu_devices(n)};
      std::vector<reduce_pair> pairs;
      for (auto type : all_dtypes)
        for (std::int64_t count : {std::int64_t{1}, std::int64_t{997}, std::int64_t{20011}}) {
          std::vector<tensor> parts;
          for (int r = 0; r < n; ++r)
            parts.push_back(
                mixed_tensor(type, {count}, static_cast<std::size_t>(r), op, cpu_device(r)));
          per_replica<tensor> value{std::move(parts)};
          destinations where{value};
          pairs.push_back({std::move(value), std::move(where)});
        }
      const auto reduced = cross.extended().batch_reduce_to(op, pairs);
      std::size_t different = 0;
      for (std::size_t r = 0; r < un; ++r)
        for (std::size_t k = 0; k < pairs.size(); ++k) {
          different += same_bytes(fast[r][k], merged[r][k]) ? 0 : 1;
          different += same_bytes(small_chunks[r][k], merged[r][k]) ? 0 : 1;
          different += same_bytes(reduced[k][r], merged[r][k]) ? 0 : 1;
        }
      CHECK(different == 0);
    }
  }
}

TEST_CASE("all_reduce of 200 tensors and of a nest equals all_reduce of each, under every "
          "packing") {
  const auto shape_of = [](std::size_t k) -> shape_t {
    const shape_t shapes[] = {{}, {1}, {3}, {0}, {2, 5}, {17}, {4, 0}, {33}};
    return shapes[k % 8];
  };
  const auto type_of = [](std::size_t k) { return all_dtypes[(k / 5 + k / 11) % 4]; };
  struct variant {
    std::string name;
    std::function<mirrored_strategy(int)> make;
  };
  const variant variants[] = {
      {"fast path", [](int n) { return mirrored_strategy{cpu_devices(n)}; }},
      {"bytes_per_pack 64",
       [](int n) { return slices_strategy(n, {.packing = {.bytes_per_pack = 64}}); }},
      {"num_packs 3, 16-byte chunks",
       [](int n) { return slices_strategy(n, {.packing = {.num_packs = 3}, .chunk_bytes = 16}); }},
      {"merge_call path", merge_strategy},
  };
  for (const auto& v : variants)
    for (int n : {1, 2, 3, 7})
      for (auto op : {reduce_op::sum, reduce_op::mean, reduce_op::max, reduce_op::prod}) {
        CAPTURE(v.name);
        CAPTURE(n);
        CAPTURE(to_string(op));
        auto s = v.make(n);
        struct results {
          std::vector<tensor> batched, one_by_one, nest_batched, nest_one_by_one;
          std::string structure, reduced_structure;
        };
        auto out = s.run([&](replica_context& ctx) {
          const auto r = id_of(ctx);
          std::vector<tensor> values;
          for (std::size_t k = 0; k < 200; ++k)
            values.push_back(mixed_tensor(type_of(k), shape_of(k), r * 1000 + k, op));
          results mine;
          mine.batched = ctx.all_reduce(op, values);
          for (const auto& x : values)
            mine.one_by_one.push_back(ctx.all_reduce(op, x));
          // {"a": [v0, v1], "b": v2, "c": {"d": v3, "e": [v4, v5, v6]}}
          const nest<tensor> structure{nest<tensor>::dict{
              {"a", nest<tensor>{values[0], values[1]}},
              {"b", nest<tensor>(values[2])},
              {"c", nest<tensor>(nest<tensor>::dict{
                        {"d", nest<tensor>(values[3])},
                        {"e", nest<tensor>{values[4], values[5], values[6]}}})}}};
          const auto reduced = ctx.all_reduce(op, structure);
          mine.structure = structure.structure_string();
          mine.reduced_structure = reduced.structure_string();
          mine.nest_batched = reduced.flatten();
          for (const auto& x : structure.flatten())
            mine.nest_one_by_one.push_back(ctx.all_reduce(op, x));
          return mine;
        });
        std::size_t different = 0;
        for (std::size_t r = 0; r < static_cast<std::size_t>(n); ++r) {
          const auto& mine = out[r];
          REQUIRE(mine.batched.size() == 200);
          REQUIRE(mine.nest_batched.size() == 7);
          CHECK(mine.reduced_structure == mine.structure);
          for (std::size_t k = 0; k < 200; ++k) {
            different += same_bytes(mine.batched[k], mine.one_by_one[k]) ? 0 : 1;
            different += same_bytes(mine.batched[k], out[0].batched[k]) ? 0 : 1;
            CHECK(mine.batched[k].device() == cpu_device(static_cast<int>(r)).canonical());
          }
          for (std::size_t k = 0; k < 7; ++k)
            different += same_bytes(mine.nest_batched[k], mine.nest_one_by_one[k]) ? 0 : 1;
        }
        CHECK(different == 0);
      }
}

TEST_CASE("the in-place overloads give the copying forms' results; the fast path reuses a "
          "buffer nobody else holds") {
  for (int n : world_sizes)
    for (auto& [which, s] : replica_paths(n)) {
      CAPTURE(name_of(which));
      CAPTURE(n);
      struct seen {
        tensor copied, moved, kept;
        std::vector<tensor> moved_batch;
        bool reused = false;
      };
      auto out = s.run([](replica_context& ctx) {
        const auto r = id_of(ctx);
        seen mine;
        const auto input = mixed_tensor(dtype::f32, {101}, r, reduce_op::sum);
        mine.copied = ctx.all_reduce(reduce_op::sum, input);
        auto sole = input.copy();
        const void* buffer = sole.raw_data();
        mine.moved = ctx.all_reduce(reduce_op::sum, std::move(sole));
        mine.reused = mine.moved.raw_data() == buffer;
        // A moved tensor whose buffer another handle shares keeps its values.
        mine.kept = input.copy();
        auto shared = mine.kept;
        (void) ctx.all_reduce(reduce_op::sum, std::move(shared));
        std::vector<tensor> batch{input.copy(), tensor::from<std::int64_t>({1, 2})};
        mine.moved_batch = ctx.all_reduce(reduce_op::sum, std::move(batch));
        return mine;
      });
      const auto un = static_cast<std::size_t>(n);
      for (std::size_t r = 0; r < un; ++r) {
        CHECK(same_bytes(out[r].moved, out[r].copied));
        CHECK(same_bytes(out[r].moved_batch[0], out[r].copied));
        CHECK(out[r].moved_batch[1]
              == tensor::from<std::int64_t>({n, 2 * static_cast<std::int64_t>(n)}));
        CHECK(same_bytes(out[r].kept, mixed_tensor(dtype::f32, {101}, r, reduce_op::sum)));
        if (which == path::fast)
          CHECK(out[r].reused);
      }
    }
}

TEST_CASE("the flight recorder of the replica collectives") {
  for (auto& [which, s] : replica_paths(3)) {
    CAPTURE(name_of(which));
    s.run([](replica_context& ctx) {
      (void) ctx.all_reduce(reduce_op::max, tensor::from<double>({1, 2, 3, 4}));
      return ctx.collective_flight_record();
    });
    const auto record = s.extended().collective_flight_record();
    if (which == path::fast)
      CHECK(contains(record, " all_reduce max float64 [4] 32 B: completed, started at +"));
    else
      CHECK(record.empty());
  }
}

TEST_CASE("communication_options: bytes_per_pack keeps the results, the tag names the "
          "collective, the timeout bounds the wait") {
  for (int n : {1, 2, 3, 7})
    for (auto& [which, s] : replica_paths(n)) {
      CAPTURE(n);
      CAPTURE(name_of(which));
      if (which == path::merge) { // it refuses what it cannot honour (test below)
        CHECK_THROWS_AS(s.run([](replica_context& ctx) {
                          (void) ctx.all_reduce(reduce_op::sum, {tensor::from<float>({1})},
                                                {.bytes_per_pack = 64, .tag = "grads"});
                        }),
                        value_error);
        continue;
      }
      struct seen {
        std::vector<tensor> packed, one_by_one;
      };
      auto out = s.run([](replica_context& ctx) {
        const auto r = id_of(ctx);
        std::vector<tensor> values;
        for (std::size_t k = 0; k < 50; ++k)
          values.push_back(mixed_tensor(k % 3 == 0 ? dtype::f64 : dtype::f32,
                                        {static_cast<std::int64_t>(k % 9)}, r * 100 + k,
                                        reduce_op::sum));
        seen mine;
        mine.packed =
            ctx.all_reduce(reduce_op::sum, values, {.bytes_per_pack = 64, .tag = "grads"});
        for (const auto& v : values)
          mine.one_by_one.push_back(ctx.all_reduce(reduce_op::sum, v));
        return mine;
      });
      std::size_t different = 0;
      for (std::size_t r = 0; r < static_cast<std::size_t>(n); ++r)
        for (std::size_t k = 0; k < 50; ++k)
          different += same_bytes(out[r].packed[k], out[r].one_by_one[k]) ? 0 : 1;
      CHECK(different == 0);
      CHECK(contains(s.extended().collective_flight_record(), " tag 'grads': completed"));

      if (n == 1)
        continue;
      // Replicas that pass different tags issued different collectives.
      auto message = error_of<value_error>([&] {
        s.run([](replica_context& ctx) {
          return ctx.all_reduce(reduce_op::sum, tensor::from<float>({1}),
                                {.tag = id_of(ctx) == 0 ? "a" : "b"});
        });
      });
      CHECK_MESSAGE(message.starts_with("replicas issued different collectives (collective "
                                        "mismatch in group 'mirrored_strategy("),
                    message);
      CHECK_NOTHROW(check_still_reduces(s, n));

      // A replica's own timeout ends its wait long before the run's.
      const auto late = static_cast<std::size_t>(n - 1);
      std::atomic<bool> release{false};
      message = error_of<timeout_error>([&] {
        s.run(run_options{.timeout = 60s}, [&](replica_context& ctx) {
          if (id_of(ctx) == late) {
            while (!release.load())
              std::this_thread::sleep_for(1ms);
            return;
          }
          try {
            (void) ctx.all_reduce(reduce_op::sum, tensor::from<float>({1}), {.timeout = 50ms});
          } catch (...) {
            release.store(true); // a replica that timed out lets the late one go
            throw;
          }
        });
      });
      release.store(true);
      CHECK_MESSAGE(contains(message, "collective timed out in group 'mirrored_strategy("),
                    message);
      CHECK_MESSAGE(contains(message, "replica " + std::to_string(late) + " did not reach "
                                      "all_reduce #"),
                    message);
      CHECK_NOTHROW(check_still_reduces(s, n));

      // An invalid timeout.
      message = error_of<value_error>([&] {
        s.run([](replica_context& ctx) {
          return ctx.all_reduce(reduce_op::sum, tensor::from<float>({1}), {.timeout = 0ms});
        });
      });
      CHECK(message
            == "communication_options: the timeout must be greater than 0 and at most 1e9 s, "
               "got 0 ms");
      CHECK_NOTHROW(check_still_reduces(s, n));

      // An algorithm that no all-reduce runs; a real one is taken (within
      // one process the replicas' shared memory ignores it).
      message = error_of<value_error>([&] {
        s.run([](replica_context& ctx) {
          return ctx.all_reduce(reduce_op::sum, tensor::from<float>({1}),
                                {.algorithm = "binomial_tree"});
        });
      });
      CHECK(message
            == "all_reduce: communication_options::algorithm 'binomial_tree' is no all-reduce "
               "algorithm (ring, recursive_doubling, halving_doubling; empty for lockstep's "
               "choice)");
      const auto reduced = s.run([](replica_context& ctx) {
        return ctx.all_reduce(reduce_op::sum, tensor::from<float>({2}),
                              {.algorithm = "recursive_doubling"});
      });
      CHECK(reduced.values()[0].data<float>()[0] == static_cast<float>(2 * n));
      CHECK_NOTHROW(check_still_reduces(s, n));
    }
}

// -- errors -------------------------------------------------------------------------

TEST_CASE("communication_options that the merge_call path cannot honour are refused") {
  auto s = merge_strategy(2);
  for (const auto& options : {communication_options{.bytes_per_pack = 64},
                              communication_options{.timeout = 1s},
                              communication_options{.tag = "grads"},
                              communication_options{.algorithm = "ring"}}) {
    CHECK_THROWS_WITH_AS(
      s.run([&](replica_context& ctx) {
        (void) ctx.all_reduce(reduce_op::sum, tensor::from<float>({1}), options);
      }),
      doctest::Contains("all_reduce: communication_options (bytes_per_pack, timeout, tag, "
                        "algorithm) apply where the replicas reduce among themselves (slice_all_reduce); "
                        "mirrored_strategy("),
      value_error);
    CHECK_THROWS_AS(s.run([&](replica_context& ctx) {
                      (void) ctx.all_reduce(reduce_op::sum, nest<tensor>{tensor::from<float>({1})},
                                            options);
                    }),
                    value_error);
  }
  // Without options the merge_call path reduces as before.
  auto results = s.run([](replica_context& ctx) {
    return ctx.all_reduce(reduce_op::sum, tensor::from<float>({2}));
  });
  CHECK(results.values()[1] == tensor::from<float>({4}));
}

TEST_CASE("replicas that pass different shapes, dtypes or numbers of tensors: the same error "
          "type on both paths, then the strategy still reduces") {
  for (int n : {2, 3, 4, 7})
    for (auto& [which, s] : replica_paths(n)) {
      CAPTURE(n);
      CAPTURE(name_of(which));
      const auto odd = static_cast<std::size_t>(n - 1);
      const auto odd_name = "replica " + std::to_string(odd);

      // Shapes [4] and [5].
      auto message = error_of<shape_error>([&] {
        s.run([&](replica_context& ctx) {
          const std::int64_t count = id_of(ctx) == odd ? 5 : 4;
          return ctx.all_reduce(reduce_op::sum, tensor::zeros(dtype::f32, {count}));
        });
      });
      CHECK(message.starts_with("cannot reduce across replicas: replica 0 has shape [4] but "
                                + odd_name + " has shape [5]"));
      check_still_reduces(s, n);

      // Shapes [2, 3] and [3, 2]: the same number of elements.
      message = error_of<shape_error>([&] {
        s.run([&](replica_context& ctx) {
          const shape_t shape = id_of(ctx) == odd ? shape_t{3, 2} : shape_t{2, 3};
          return ctx.all_reduce(reduce_op::mean, tensor::zeros(dtype::f64, shape));
        });
      });
      CHECK(message.starts_with("cannot reduce across replicas: replica 0 has shape [2, 3] but "
                                + odd_name + " has shape [3, 2]"));
      check_still_reduces(s, n);

      // float32 and int64.
      message = error_of<dtype_error>([&] {
        s.run([&](replica_context& ctx) {
          const auto type = id_of(ctx) == odd ? dtype::i64 : dtype::f32;
          return ctx.all_reduce(reduce_op::max, tensor::zeros(type, {3}));
        });
      });
      CHECK(message.starts_with("cannot reduce across replicas: replica 0 has dtype float32 but "
                                + odd_name + " has dtype int64"));
      check_still_reduces(s, n);

      // Two tensors, or three.
      (void) error_of<value_error>([&] {
        s.run([&](replica_context& ctx) {
          std::vector<tensor> values(id_of(ctx) == odd ? 3 : 2, tensor::zeros(dtype::f32, {2}));
          for (auto& v : values)
            v = v.copy();
          return ctx.all_reduce(reduce_op::sum, values);
        });
      });
      check_still_reduces(s, n);

      // Nests of different structures.
      (void) error_of<value_error>([&] {
        s.run([&](replica_context& ctx) {
          const auto x = tensor::zeros(dtype::f32, {2});
          const nest<tensor> value = id_of(ctx) == odd
                                         ? nest<tensor>(nest<tensor>::dict{{"a", x.copy()}})
                                         : nest<tensor>{x.copy()};
          return ctx.all_reduce(reduce_op::sum, value).flatten();
        });
      });
      check_still_reduces(s, n);
    }
}

TEST_CASE("a batch in which one replica's tensor has another dtype or shape: dtype_error or "
          "shape_error on both paths") {
  // The merge_call path checks each column of the batch: dtype_error or
  // shape_error. On the fast path the difference can change how the replicas
  // pack the batch, and then their first collectives differ in the number of
  // tensors: "replicas issued different collectives", a value_error.
  struct scenario {
    std::string name;
    pack_options packing;
    std::function<std::vector<tensor>(bool odd)> batch;
    std::string kind;
  };
  const scenario scenarios[] = {
      {"float64 instead of float32 in a run", {},
       [](bool odd) {
         return std::vector<tensor>{tensor::zeros(odd ? dtype::f64 : dtype::f32, {2}),
                                    tensor::zeros(dtype::f32, {2})};
       },
       "dtype_error"},
      {"float32[1] instead of float32[2], bytes_per_pack 8", {.bytes_per_pack = 8},
       [](bool odd) {
         return std::vector<tensor>{tensor::zeros(dtype::f32, {odd ? 1 : 2}),
                                    tensor::zeros(dtype::f32, {2})};
       },
       "shape_error"},
  };
  for (const auto& sc : scenarios)
    for (int n : {2, 3})
      for (path which : {path::fast, path::merge}) {
        CAPTURE(sc.name);
        CAPTURE(n);
        CAPTURE(name_of(which));
        auto s = which == path::merge ? merge_strategy(n) : slices_strategy(n, {.packing = sc.packing});
        const auto odd = static_cast<std::size_t>(n - 1);
        std::string kind;
        try {
          s.run([&](replica_context& ctx) {
            return ctx.all_reduce(reduce_op::sum, sc.batch(id_of(ctx) == odd));
          });
          kind = "nothing";
        } catch (const dtype_error&) {
          kind = "dtype_error";
        } catch (const shape_error&) {
          kind = "shape_error";
        } catch (const std::exception& e) {
          kind = std::string{"another error: "} + e.what();
        }
        CHECK(kind == sc.kind);
        check_still_reduces(s, n);
      }
}

TEST_CASE("all_reduce outside replica context is a context_error on both paths") {
  for (int n : {1, 3})
    for (auto& [which, s] : replica_paths(n)) {
      CAPTURE(n);
      CAPTURE(name_of(which));
      // A replica's context, used from the main thread after its run.
      replica_context* saved = nullptr;
      s.run([&](replica_context& ctx) {
        if (id_of(ctx) == 0)
          saved = &ctx;
      });
      REQUIRE(saved != nullptr);
      const auto outside = error_of<context_error>(
          [&] { (void) saved->all_reduce(reduce_op::sum, tensor::from<float>({1})); });
      CHECK(outside.starts_with("Mismatching lockstep::strategy objects: "));
      check_still_reduces(s, n);

      // From a merge function, in cross-replica context.
      const auto in_merge = error_of<context_error>([&] {
        s.run([](replica_context& ctx) {
          ctx.merge_call([&ctx](const per_replica<int>&) {
            (void) ctx.all_reduce(reduce_op::sum, tensor::from<float>({1}));
          }, 1);
        });
      });
      CHECK(in_merge == "Need to be inside `call_for_each_replica()`");
      check_still_reduces(s, n);
    }
}

TEST_CASE("a replica that skips the all_reduce: context_error naming it on both paths, then "
          "the strategy still reduces") {
  // As TF's merge_call check: a replica returns while the others wait for it.
  for (int n : {2, 3, 4, 7})
    for (auto& [which, s] : replica_paths(n)) {
      CAPTURE(n);
      CAPTURE(name_of(which));
      const auto skipper = static_cast<std::size_t>(n / 2);
      const auto skipper_name = "replica " + std::to_string(skipper);
      for (int attempt = 0; attempt < 2; ++attempt) {
        // A long timeout: the error must not wait for it.
        const auto message = error_of<context_error>([&] {
          s.run(run_options{.timeout = 60s}, [&](replica_context& ctx) {
            if (id_of(ctx) != skipper)
              (void) ctx.all_reduce(reduce_op::sum, tensor::from<float>({1, 2}));
          });
        });
        if (which == path::fast)
          CHECK_MESSAGE(message.starts_with("Some replicas made a different number of collective "
                                            "calls: " + skipper_name
                                            + " returned from its function without reaching "
                                              "all_reduce #"),
                        message);
        else
          CHECK_MESSAGE(message.starts_with("Some replicas made a different number of "
                                            "replica_context().merge_call() calls. Returned: "
                                            + skipper_name + " ("),
                        message);
        CHECK_NOTHROW(check_still_reduces(s, n));
      }
    }
}

TEST_CASE("a replica that does not reach the all_reduce in time: timeout_error naming it, then "
          "the strategy reduces again once it returns") {
  for (int n : {2, 3, 7})
    for (auto& [which, s] : replica_paths(n)) {
      CAPTURE(n);
      CAPTURE(name_of(which));
      const auto late = static_cast<std::size_t>(n / 2);
      const auto late_name = "replica " + std::to_string(late);
      // The second time, the late replica has taken part in a collective before.
      for (const std::string where : {" has issued no collective yet", " last issued #"}) {
        std::atomic<bool> release{false};
        const auto message = error_of<timeout_error>([&] {
          s.run(run_options{.timeout = 300ms}, [&](replica_context& ctx) {
            if (id_of(ctx) == late)
              while (!release.load())
                std::this_thread::sleep_for(1ms);
            (void) ctx.all_reduce(reduce_op::sum, tensor::from<float>({1, 2}));
          });
        });
        release.store(true);
        if (which == path::fast) {
          CHECK_MESSAGE(message.starts_with("run timed out after 300 ms: " + late_name
                                            + " did not reach all_reduce #"),
                        message);
          CHECK_MESSAGE(contains(message, "; " + late_name + where), message);
          CHECK_MESSAGE(contains(message, "\nrecent collectives in group 'mirrored_strategy("),
                        message);
        } else {
          CHECK_MESSAGE(message.starts_with("run timed out after 300 ms: " + late_name + " ("),
                        message);
        }
        // The late replica is busy until its function returns (it then
        // unwinds from the cancelled all_reduce); the strategy says so.
        for (;;) {
          try {
            check_still_reduces(s, n);
            break;
          } catch (const timeout_error& e) {
            REQUIRE_MESSAGE(contains(e.what(), "still runs a replica function from a call that "
                                               "timed out"),
                            std::string{e.what()});
            std::this_thread::sleep_for(1ms);
          }
        }
      }
    }
}

TEST_CASE("after a run times out in all_reduce, replicas that unwind from the cancelled "
          "collective do not keep the strategy busy") {
  // The replicas waiting in the all_reduce unwind when the run times out
  // (the strategy actor cancels the collectives), and take 100 ms to do so; the
  // merge_call path waits for its replicas to unwind before the run
  // returns, so the next run finds every replica free.
  for (int n : {2, 3})
    for (auto& [which, s] : replica_paths(n)) {
      CAPTURE(n);
      CAPTURE(name_of(which));
      const auto skipper = static_cast<std::size_t>(n - 1);
      CHECK_THROWS(s.run(run_options{.timeout = 300ms}, [&](replica_context& ctx) {
        if (id_of(ctx) == skipper)
          return;
        try {
          (void) ctx.all_reduce(reduce_op::sum, tensor::from<float>({1, 2}));
        } catch (...) {
          std::this_thread::sleep_for(100ms); // cleaning up
          throw;
        }
      }));
      CHECK_NOTHROW(check_still_reduces(s, n));
      CHECK_NOTHROW(check_still_reduces(s, n));
    }
}

TEST_CASE("a replica that throws while the others wait in all_reduce: run rethrows it, and the "
          "strategy stays usable") {
  // Repeated, since the replicas race to report: the thrower's exception
  // must win over anything the waiting replicas raise as they unwind.
  for (int n : {2, 3, 4, 7})
    for (auto& [which, s] : replica_paths(n))
      for (int round = 0; round < 100; ++round) {
        CAPTURE(n);
        CAPTURE(name_of(which));
        CAPTURE(round);
        const auto thrower = static_cast<std::size_t>(n - 1);
        // A hang would end in the 60 s timeout's timeout_error, or in the
        // meson test timeout; the replica's own error must come back instead.
        const auto outcome = [&](const std::function<void(replica_context&)>& fn) {
          try {
            s.run(run_options{.timeout = 60s}, fn);
          } catch (const std::invalid_argument& e) {
            return std::string{"invalid_argument: "} + e.what();
          } catch (const std::exception& e) {
            return std::string{"another error: "} + e.what();
          }
          return std::string{"nothing"};
        };
        CHECK(outcome([&](replica_context& ctx) {
                if (id_of(ctx) == thrower)
                  throw std::invalid_argument("replica gave up");
                (void) ctx.all_reduce(reduce_op::sum, tensor::from<float>({1, 2}));
              })
              == "invalid_argument: replica gave up");
        CHECK_NOTHROW(check_still_reduces(s, n));

        // The same after a first all_reduce that all replicas took part in.
        CHECK(outcome([&](replica_context& ctx) {
                (void) ctx.all_reduce(reduce_op::sum, tensor::from<float>({1}));
                if (id_of(ctx) == 0)
                  throw std::invalid_argument("second");
                (void) ctx.all_reduce(reduce_op::sum, tensor::from<float>({1, 2}));
              })
              == "invalid_argument: second");
        CHECK_NOTHROW(check_still_reduces(s, n));
      }
}

namespace {

/// A cross-device op written outside the library: reduces by gathering
/// onto the first destination, as reduction_to_one_device does, and counts
/// its calls.
class counting_reduction final : public cross_device_ops {
public:
  std::string name() const override { return "counting_reduction"; }
  std::atomic<int> calls{0};

protected:
  mirrored<tensor> reduce_implementation(reduce_op op, const per_replica<tensor>& value,
                                         const destinations& destination) override {
    ++calls;
    return inner_.reduce(op, value, destination);
  }

private:
  reduction_to_one_device inner_;
};

} // namespace

TEST_CASE("ctx.all_reduce under a cross_device_ops written outside the library goes through "
          "merge_call and its reduce, with the same results") {
  auto ops = std::make_shared<counting_reduction>();
  mirrored_strategy strategy{cpu_devices(3), {.cross_device_ops = ops}};
  const auto results = strategy.run([](replica_context& ctx) {
    const auto r = static_cast<float>(ctx.replica_id_in_sync_group());
    return ctx.all_reduce(reduce_op::sum,
                          std::vector<tensor>{tensor::from(std::vector<float>{r, 10 * r}),
                                              tensor::from(std::vector<float>{1})});
  });
  for (const auto& per_replica_result : results.values()) {
    REQUIRE(per_replica_result.size() == 2);
    CHECK(per_replica_result[0].data<float>()[0] == 3.0f);
    CHECK(per_replica_result[0].data<float>()[1] == 30.0f);
    CHECK(per_replica_result[1].data<float>()[0] == 3.0f);
  }
  CHECK(ops->calls == 2); // one reduce per tensor: batch_reduce's default
}
