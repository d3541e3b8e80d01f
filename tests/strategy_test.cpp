// TF's MirroredStrategy scenarios, run with 1, 2, 3, 4 and 7 replicas on
// virtual CPU devices, against closed-form values.

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace lockstep;

namespace {

const std::vector<int> world_sizes{1, 2, 3, 4, 7};

int id_of(replica_context& ctx) {
  return static_cast<int>(ctx.replica_id_in_sync_group());
}

float scalar_of(const tensor& t) {
  return static_cast<float>(t.as_double(0));
}

} // namespace

TEST_CASE("each replica id is seen exactly once, on its own device and thread") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    std::mutex mutex;
    std::multiset<int> seen;
    std::set<std::thread::id> threads;
    auto devices = s.run([&](replica_context& ctx) {
      std::lock_guard<std::mutex> lock{mutex};
      seen.insert(id_of(ctx));
      threads.insert(std::this_thread::get_id());
      return current_device();
    });
    CHECK(seen.size() == static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      CHECK(seen.count(r) == 1);
      CHECK(devices[static_cast<std::size_t>(r)] == cpu_device(r));
    }
    CHECK(threads.size() == static_cast<std::size_t>(n));
    CHECK(threads.count(std::this_thread::get_id()) == 0);
  }
}

TEST_CASE("run(id + 1) gives 1..n in replica order") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto result = s.run([](replica_context& ctx) { return id_of(ctx) + 1; });
    std::vector<int> expected(static_cast<std::size_t>(n));
    std::iota(expected.begin(), expected.end(), 1);
    CHECK(s.experimental_local_results(result) == expected);
    CHECK(result.is_single() == (n == 1));
  }
}

TEST_CASE("a returned dict regroups element-wise: a + 2b + 2 gives [6, 14]") {
  mirrored_strategy s{cpu_devices(2)};
  auto result = s.run([](replica_context& ctx) {
    const float x = static_cast<float>(id_of(ctx) + 1);
    return std::map<std::string, tensor>{{"a", tensor::scalar(2 * x)},
                                         {"b", tensor::scalar(x * x)}};
  });
  auto grouped = regroup(result);
  REQUIRE(grouped.size() == 2);
  auto combined = s.run(
    [](const tensor& a, const tensor& b) {
      auto out = a.copy();
      auto twice_b = b.copy();
      scale_into(twice_b, 2.0);
      add_into(out, twice_b);
      add_into(out, tensor::scalar(2.0f));
      return out;
    },
    grouped.at("a"), grouped.at("b"));
  CHECK(scalar_of(combined[0]) == 6.0f);
  CHECK(scalar_of(combined[1]) == 14.0f);
  CHECK(combined[0].device() == cpu_device(0));
  CHECK(combined[1].device() == cpu_device(1));
}

TEST_CASE("reduce(SUM, run(replica_id)) is the sum of the ids") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto ids = s.run([](replica_context& ctx) { return id_of(ctx); });
    CHECK(s.reduce(reduce_op::sum, ids) == n * (n - 1) / 2);
    auto tensors = s.run([](replica_context& ctx) { return tensor::scalar(id_of(ctx)); });
    const auto total = s.reduce(reduce_op::sum, tensors);
    CHECK(total.dtype() == dtype::i32);
    CHECK(total.at<std::int32_t>(0) == n * (n - 1) / 2);
    CHECK(total.device() == cpu_device(0));
  }
}

TEST_CASE("reduce(MEAN, axis=0) weighs replicas by their batch length: 2/3") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto parts = s.run([](replica_context& ctx) {
      const int r = id_of(ctx);
      return tensor::from(std::vector<float>(static_cast<std::size_t>(r + 1),
                                             static_cast<float>(r)));
    });
    double numerator = 0;
    double denominator = 0;
    for (int r = 0; r < n; ++r) {
      numerator += r * (r + 1);
      denominator += r + 1;
    }
    const auto mean = s.reduce(reduce_op::mean, parts, 0);
    CHECK(mean.rank() == 0);
    CHECK(mean.as_double(0) == doctest::Approx(numerator / denominator));
    const auto sum = s.reduce(reduce_op::sum, parts, 0);
    CHECK(sum.as_double(0) == doctest::Approx(numerator));
    if (n == 2)
      CHECK(mean.as_double(0) == doctest::Approx(2.0 / 3.0));
    CHECK_THROWS_WITH_AS(s.reduce(reduce_op::sum, parts, 1),
                         "`axis` = 1 out of range for `value` with rank 1", value_error);
    CHECK_THROWS_AS(s.reduce(reduce_op::sum, parts, -2), value_error);
    CHECK(s.reduce(reduce_op::sum, parts, -1).as_double(0) == doctest::Approx(numerator));
  }
}

TEST_CASE("all_reduce of a nest: [1,[39,2]] and [3,[3,41]]") {
  mirrored_strategy s{cpu_devices(2)};
  auto inputs = [](replica_context& ctx) {
    const bool first = ctx.replica_id_in_sync_group() == 0;
    return nest<tensor>{tensor::scalar(first ? 1.0f : 3.0f),
                        nest<tensor>{tensor::scalar(first ? 39.0f : 3.0f),
                                     tensor::scalar(first ? 2.0f : 41.0f)}};
  };
  auto sums = s.run([&](replica_context& ctx) { return ctx.all_reduce(reduce_op::sum, inputs(ctx)); });
  auto means = s.run([&](replica_context& ctx) { return ctx.all_reduce(reduce_op::mean, inputs(ctx)); });
  for (std::size_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(scalar_of(sums[r][0].leaf()) == 4.0f);
    CHECK(scalar_of(sums[r][1][0].leaf()) == 42.0f);
    CHECK(scalar_of(sums[r][1][1].leaf()) == 43.0f);
    CHECK(scalar_of(means[r][0].leaf()) == 2.0f);
    CHECK(scalar_of(means[r][1][0].leaf()) == 21.0f);
    CHECK(scalar_of(means[r][1][1].leaf()) == 21.5f);
    for (const auto& leaf : sums[r].flatten())
      CHECK(leaf.device() == cpu_device(static_cast<int>(r)));
  }
  CHECK_FALSE(sums[0][0].leaf().same_buffer(sums[1][0].leaf()));
}

TEST_CASE("all_reduce of a dict nest, a list and a tensor, for every world size") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto out = s.run([](replica_context& ctx) {
      const auto r = static_cast<double>(ctx.replica_id_in_sync_group());
      nest<tensor> doc(nest<tensor>::dict{
        {"a", nest<tensor>(tensor::scalar(r + 1))},
        {"b", nest<tensor>{tensor::from(std::vector<std::int64_t>{1, -3}),
                           tensor::filled(dtype::i32, {7}, r)}}});
      auto d = ctx.all_reduce(reduce_op::sum, doc);
      auto l = ctx.all_reduce(reduce_op::mean, std::vector<tensor>{tensor::scalar(r), tensor::scalar(2 * r)});
      auto t = ctx.all_reduce(reduce_op::mean, tensor::from(std::vector<std::int32_t>{-1 - static_cast<int>(r)}));
      return std::make_tuple(d, l, t);
    });
    const double sum_ids = n * (n - 1) / 2.0;
    for (std::size_t r = 0; r < static_cast<std::size_t>(n); ++r) {
      const auto& [d, l, t] = out[r];
      CHECK(d["a"].leaf().as_double(0) == sum_ids + n);
      CHECK(d["b"][0].leaf().at<std::int64_t>(0) == n);
      CHECK(d["b"][0].leaf().at<std::int64_t>(1) == -3 * n);
      CHECK(d["b"][1].leaf().num_elements() == 7);
      CHECK(d["b"][1].leaf().at<std::int32_t>(6) == static_cast<std::int32_t>(sum_ids));
      CHECK(l[0].as_double(0) == doctest::Approx(sum_ids / n));
      CHECK(l[1].as_double(0) == doctest::Approx(2 * sum_ids / n));
      // MEAN on integers truncates toward zero: -(1 + 2 + ... + n) / n.
      CHECK(t.at<std::int32_t>(0) == -(n * (n + 1) / 2) / n);
    }
  }
}

TEST_CASE("merge_call sums 3 + replica_id over 4 replicas") {
  mirrored_strategy s{cpu_devices(4)};
  auto result = s.run([](replica_context& ctx) {
    return ctx.merge_call(
      [](strategy& st, const per_replica<int>& values) {
        CHECK(in_cross_replica_context());
        CHECK(get_cross_replica_context() == st);
        CHECK(values.size() == 4);
        return std::accumulate(values.values().begin(), values.values().end(), 0);
      },
      3 + id_of(ctx));
  });
  CHECK(s.experimental_local_results(result) == std::vector<int>{18, 18, 18, 18});
}

TEST_CASE("merge_call hands replica r its component of a per_replica result") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto result = s.run([](replica_context& ctx) {
      int total = 0;
      for (int round = 0; round < 3; ++round) {
        total += ctx.merge_call(
          [](const per_replica<int>& values) {
            std::vector<int> doubled;
            for (int v : values.values())
              doubled.push_back(2 * v);
            return per_replica<int>{doubled};
          },
          id_of(ctx) + round);
      }
      return total;
    });
    for (int r = 0; r < n; ++r)
      CHECK(result[static_cast<std::size_t>(r)] == 2 * (3 * r + 3));
  }
}

TEST_CASE("merge_call collapses the same tensor and keeps equal values per replica") {
  mirrored_strategy s{cpu_devices(3)};
  const auto shared = tensor::scalar(5.0f);
  auto flags = s.run(
    [](replica_context& ctx, const tensor& same) {
      return ctx.merge_call(
        [](const per_replica<tensor>& a, const per_replica<tensor>& b) {
          return std::vector<bool>{a.is_single(), b.is_single()};
        },
        same, tensor::scalar(5.0f));
    },
    shared);
  CHECK(flags[0] == std::vector<bool>{true, false});
}

TEST_CASE("merge functions may call reduce_to, broadcast_to and a nested run") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto result = s.run([](replica_context& ctx) {
      const auto local = tensor::scalar(static_cast<double>(id_of(ctx) + 1));
      return ctx.merge_call(
        [](strategy& st, const per_replica<tensor>& values) {
          auto total = st.extended().reduce_to(reduce_op::sum, values, values);
          auto nested = st.run([](replica_context& inner) { return id_of(inner) * 10; });
          auto copies = st.extended().broadcast_to(tensor::scalar(7.0), values);
          std::vector<double> out;
          for (std::size_t r = 0; r < values.size(); ++r)
            out.push_back(total[r].as_double(0) + nested[r] + copies[r].as_double(0));
          return per_replica<double>{out};
        },
        local);
    });
    const double total = n * (n + 1) / 2.0;
    for (int r = 0; r < n; ++r)
      CHECK(result[static_cast<std::size_t>(r)] == total + 10 * r + 7);
  }
}

TEST_CASE("per_replica arguments are unwrapped; plain ones are shared") {
  mirrored_strategy s{cpu_devices(3)};
  per_replica<int> offsets{std::vector<int>{100, 200, 300}};
  auto result = s.run([](replica_context& ctx, int offset, int step) { return offset + step * id_of(ctx); },
                      offsets, 5);
  CHECK(s.experimental_local_results(result) == std::vector<int>{100, 205, 310});
  auto nothing = [](replica_context&) {};
  s.run(nothing); // void functions return nothing
}

TEST_CASE("structures that differ across replicas are an error naming the replica") {
  mirrored_strategy s{cpu_devices(2)};
  CHECK_THROWS_WITH_AS(s.run([](replica_context& ctx) { return std::vector<int>(ctx.replica_id_in_sync_group() + 1); }),
                       "regroup: replica 1 returned a list of 2 but replica 0 returned a list of 1",
                       value_error);
  CHECK_THROWS_AS(s.run([](replica_context& ctx) {
                    return ctx.all_reduce(reduce_op::sum, std::vector<tensor>(ctx.replica_id_in_sync_group() + 1,
                                                                              tensor::scalar(1.0f)));
                  }),
                  value_error);
  CHECK_THROWS_WITH_AS(s.run([](replica_context& ctx) {
                         return ctx.all_reduce(reduce_op::sum,
                                               tensor::zeros(dtype::f32, {static_cast<std::int64_t>(ctx.replica_id_in_sync_group()) + 2}));
                       }),
                       doctest::Contains("cannot reduce across replicas: replica 0 has shape [2] but replica 1 has shape [3]"),
                       shape_error);
  CHECK_THROWS_AS(s.run([](replica_context& ctx) {
                    return ctx.all_reduce(reduce_op::sum, ctx.replica_id_in_sync_group() == 0 ? tensor::scalar(1.0f)
                                                                                              : tensor::scalar(1.0));
                  }),
                  dtype_error);
  CHECK(s.run([](replica_context& ctx) { return id_of(ctx); })[1] == 1);
}

TEST_CASE("reduce_to, batch_reduce_to and broadcast_to place one copy per device") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto values = s.run([](replica_context& ctx) { return tensor::filled(dtype::f64, {3}, id_of(ctx) + 1); });
    auto mean = s.extended().reduce_to(reduce_op::mean, values, values);
    REQUIRE(mean.size() == static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      const auto& part = mean[static_cast<std::size_t>(r)];
      CHECK(part.device() == cpu_device(r));
      CHECK(part.as_double(2) == doctest::Approx((n + 1) / 2.0));
      if (r > 0)
        CHECK_FALSE(part.same_buffer(mean[0]));
    }
    auto to_one = s.extended().reduce_to(reduce_op::sum, values, "/cpu:0");
    CHECK(to_one.size() == 1);
    CHECK(to_one[0].as_double(0) == n * (n + 1) / 2.0);
    auto batch = s.extended().batch_reduce_to(reduce_op::sum, {{values, values}, {values, "/cpu:0"}});
    CHECK(batch.size() == 2);
    CHECK(batch[0][static_cast<std::size_t>(n - 1)] == to_one[0]);
    auto copies = s.extended().broadcast_to(tensor::scalar(3), values);
    CHECK(copies.size() == static_cast<std::size_t>(n));
    CHECK(copies[static_cast<std::size_t>(n - 1)].device() == cpu_device(n - 1));
    CHECK(s.extended().broadcast_to(2.5, values) == 2.5);
  }
}

TEST_CASE("non-distributed values follow reduce_non_distributed_value") {
  mirrored_strategy two{cpu_devices(2)};
  const auto five = tensor::scalar(5.0f);
  CHECK_THROWS_WITH_AS(two.reduce(reduce_op::sum, five),
                       doctest::Contains("cannot be reduced with the given reduce op sum"), value_error);
  CHECK(two.reduce(reduce_op::mean, five).as_double(0) == 5.0);
  CHECK(two.reduce(reduce_op::sum, 0) == 0);
  CHECK(two.reduce(reduce_op::mean, 4.5) == 4.5);
  CHECK_THROWS_AS(two.reduce(reduce_op::sum, 3), value_error);
  // The same tensor returned by every replica is a non-distributed value.
  auto same = two.run([&] { return five; });
  CHECK(same.is_single());
  CHECK_THROWS_AS(two.reduce(reduce_op::sum, same), value_error);
  CHECK(two.extended().reduce_to(reduce_op::mean, five, "/cpu:1")[0].device() == cpu_device(1));
  CHECK_THROWS_WITH_AS(two.extended().reduce_to(reduce_op::mean, five, ""), "destinations can not be empty",
                       value_error);
  mirrored_strategy one{cpu_devices(1)};
  CHECK(one.reduce(reduce_op::sum, five).as_double(0) == 5.0);
  CHECK(one.reduce(reduce_op::sum, 3) == 3);
}

TEST_CASE("plain values with MIN and MAX broadcast; PROD, like SUM, needs one replica") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    const auto five = tensor::scalar(5.0f);
    for (auto op : {reduce_op::mean, reduce_op::min, reduce_op::max}) {
      CAPTURE(to_string(op));
      CHECK(s.reduce(op, five) == five);
      const auto placed = s.extended().reduce_to(op, five, "/cpu:1");
      REQUIRE(placed.size() == 1);
      CHECK(placed[0].device() == cpu_device(1));
      CHECK(placed[0] == five);
      CHECK(s.reduce(op, 3) == 3);
      CHECK(s.reduce(op, -2.5) == -2.5);
    }
    for (auto op : {reduce_op::sum, reduce_op::prod}) {
      CAPTURE(to_string(op));
      const std::string text = "A non-distributed value tensor<float32>[]{5} @" + cpu_device(0).to_string()
                               + " cannot be reduced with the given reduce op " + std::string{to_string(op)}
                               + ".";
      if (n == 1) {
        CHECK(s.reduce(op, five) == five);
        CHECK(s.reduce(op, 3) == 3);
      } else {
        CHECK_THROWS_WITH_AS(s.reduce(op, five), text.c_str(), value_error);
        CHECK_THROWS_WITH_AS(s.extended().reduce_to(op, five, "/cpu:0"), text.c_str(), value_error);
        CHECK_THROWS_AS(s.reduce(op, 3), value_error);
        CHECK_THROWS_AS(s.reduce(op, -1), value_error);
      }
      // Numbers that n copies reduce to whatever n is.
      CHECK(s.reduce(op, 0) == 0);
      CHECK(s.reduce(op, 0.0) == 0.0);
    }
    CHECK(s.reduce(reduce_op::prod, 1) == 1);
    CHECK(s.reduce(reduce_op::prod, std::int64_t{1}) == 1);
    CHECK(s.reduce(reduce_op::prod, 1.0f) == 1.0f);
    if (n > 1) {
      CHECK_THROWS_AS(s.reduce(reduce_op::sum, 1), value_error);
      CHECK_THROWS_WITH_AS(s.reduce(reduce_op::prod, 2),
                           "A non-distributed value 2 cannot be reduced with the given reduce op prod.",
                           value_error);
    }
    // The same tensor returned by every replica follows the same rules.
    auto same = s.run([&] { return five; });
    CHECK(same.is_single());
    CHECK(s.reduce(reduce_op::max, same) == five);
    CHECK(s.extended().batch_reduce_to(reduce_op::min, {{same, "/cpu:0"}})[0][0] == five);
    if (n > 1)
      CHECK_THROWS_AS(s.reduce(reduce_op::prod, same), value_error);
  }
  // One replica: every op returns the value.
  one_device_strategy one{"/cpu:0"};
  for (auto op : {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max, reduce_op::prod})
    CHECK(one.reduce(op, 7) == 7);
}

TEST_CASE("MIN, MAX and PROD across replicas: reduce, reduce_to and all_reduce") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    // Replica r holds [r + 1, -(r + 1), 1 or -1].
    auto values = s.run([](replica_context& ctx) {
      const auto x = static_cast<std::int64_t>(id_of(ctx) + 1);
      return tensor::from(std::vector<std::int64_t>{x, -x, x % 2 == 0 ? -1 : 1});
    });
    std::int64_t factorial = 1;
    for (std::int64_t k = 2; k <= n; ++k)
      factorial *= k;
    const std::int64_t negatives = n / 2; // replicas with an even r + 1
    const std::int64_t sign = negatives % 2 == 0 ? 1 : -1;
    CHECK(s.reduce(reduce_op::min, values) == tensor::from(std::vector<std::int64_t>{1, -n, n > 1 ? -1 : 1}));
    CHECK(s.reduce(reduce_op::max, values) == tensor::from(std::vector<std::int64_t>{n, -1, 1}));
    CHECK(s.reduce(reduce_op::prod, values)
          == tensor::from(std::vector<std::int64_t>{factorial, (n % 2 == 0 ? 1 : -1) * factorial, sign}));
    const auto everywhere = s.extended().reduce_to(reduce_op::max, values, values);
    REQUIRE(everywhere.size() == static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      CHECK(everywhere[static_cast<std::size_t>(r)].device() == cpu_device(r));
      CHECK(everywhere[static_cast<std::size_t>(r)].at<std::int64_t>(0) == n);
    }
    // Numbers per replica.
    auto ids = s.run([](replica_context& ctx) { return id_of(ctx) + 1; });
    CHECK(s.reduce(reduce_op::min, ids) == 1);
    CHECK(s.reduce(reduce_op::max, ids) == n);
    CHECK(s.reduce(reduce_op::prod, ids) == factorial);
    // all_reduce in the replicas.
    auto reduced = s.run([](replica_context& ctx) {
      const auto mine = tensor::scalar(static_cast<double>(id_of(ctx) + 1));
      return std::vector<double>{ctx.all_reduce(reduce_op::min, mine).as_double(0),
                                 ctx.all_reduce(reduce_op::max, mine).as_double(0),
                                 ctx.all_reduce(reduce_op::prod, mine).as_double(0)};
    });
    for (int r = 0; r < n; ++r)
      CHECK(reduced[static_cast<std::size_t>(r)]
            == std::vector<double>{1.0, static_cast<double>(n), static_cast<double>(factorial)});
  }
}

TEST_CASE("reduce along an axis supports SUM and MEAN only, and says so") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto values = s.run([](replica_context& ctx) { return tensor::filled(dtype::f32, {2, 3}, id_of(ctx) + 1); });
    for (auto op : {reduce_op::min, reduce_op::max, reduce_op::prod}) {
      const std::string text = "reduce along an axis supports sum and mean, not " + std::string{to_string(op)};
      CHECK_THROWS_WITH_AS(s.reduce(op, values, 0), text.c_str(), value_error);
      CHECK_THROWS_WITH_AS(s.reduce(op, values, -1), text.c_str(), value_error);
    }
    CHECK(s.reduce(reduce_op::sum, values, 0) == tensor::filled(dtype::f32, {3}, n * (n + 1)));
  }
}

TEST_CASE("per_replica<bool> components come by value") {
  mirrored_strategy s{cpu_devices(3)};
  auto is_last = s.run([](replica_context& ctx) { return id_of(ctx) == 2; });
  CHECK_FALSE(is_last[0]);
  CHECK(is_last[2]);
  CHECK_FALSE(is_last.primary());
}

TEST_CASE("reduce_to of the same tensor on every replica follows the non-distributed rules") {
  mirrored_strategy s{cpu_devices(2)};
  const auto five = tensor::scalar(5.0);
  const auto same = per_replica<tensor>::single(five, 2);
  CHECK_THROWS_WITH_AS(s.extended().reduce_to(reduce_op::sum, same, "/cpu:0"),
                       doctest::Contains("A non-distributed value"), value_error);
  CHECK_THROWS_AS(s.extended().batch_reduce_to(reduce_op::sum, {{same, "/cpu:0"}}), value_error);
  CHECK(s.extended().reduce_to(reduce_op::mean, same, "/cpu:1")[0].as_double(0) == 5.0);
}

TEST_CASE("strategy queries") {
  mirrored_strategy s{{"/cpu:0", "CPU:1", "/job:localhost/replica:0/task:0/device:CPU:2"}};
  CHECK(s.num_replicas_in_sync() == 3);
  CHECK(s.extended().worker_devices() == cpu_devices(3));
  CHECK(s.extended().parameter_devices() == cpu_devices(3));
  CHECK_FALSE(s.extended().experimental_between_graph());
  CHECK(s.extended().experimental_should_init());
  CHECK(s.extended().should_checkpoint());
  CHECK(s.extended().should_save_summary());
  CHECK(s.extended().cross_device_ops().name() == "slice_all_reduce"); // choose_the_best on CPUs
  CHECK(get_loss_reduction() == reduce_op::sum);
  const auto t = tensor::scalar(1.0f);
  CHECK(s.extended().value_container(t).same_buffer(t));
  CHECK(s.experimental_local_results(7) == std::vector<int>{7});
  CHECK(s.to_string().find("mirrored_strategy(/job:localhost/replica:0/task:0/device:CPU:0") == 0);
  auto copy = s;
  CHECK(copy == s);
  CHECK_FALSE(mirrored_strategy{cpu_devices(3)} == s);
}

TEST_CASE("mirrored_strategy validates its devices with TF's rules") {
  CHECK_THROWS_WITH_AS(mirrored_strategy({"/cpu:0", "/device:CPU:0"}),
                       doctest::Contains("after canonicalization: [/job:localhost/replica:0/task:0/device:CPU:0, "
                                         "/job:localhost/replica:0/task:0/device:CPU:0]"),
                       value_error);
  CHECK_THROWS_WITH_AS(mirrored_strategy({"/cpu:0", "/job:worker/task:0/cpu:0"}),
                       "Local device string cannot have job specified other than 'localhost'", value_error);
  CHECK_THROWS_WITH_AS(mirrored_strategy({"/job:worker/task:0/cpu:0", "/cpu:1"}),
                       "Remote device string must have job specified.", value_error);
  CHECK_THROWS_WITH_AS(mirrored_strategy({"/job:worker/cpu:0"}), "Remote device string must have task specified.",
                       value_error);
  CHECK_THROWS_WITH_AS(mirrored_strategy({"/job:worker/task:0/gpu:0", "/job:worker/task:1/gpu:0",
                                          "/job:worker/task:1/gpu:1"}),
                       "All workers should have the same number of GPUs.", value_error);
  CHECK_THROWS_WITH_AS(mirrored_strategy({"/job:worker/task:0/gpu:1"}),
                       "GPU `device_index` on a worker should be consecutive and start from 0.", value_error);
  CHECK_THROWS_WITH_AS(mirrored_strategy({"/job:worker/task:0/cpu:0", "/job:worker/task:1/cpu:0"}),
                       "In-graph multi-worker training with `mirrored_strategy` is not supported.", value_error);
  CHECK_THROWS_WITH_AS(mirrored_strategy({"/cpu:x"}), doctest::Contains("/cpu:x"), value_error);
  CHECK_THROWS_AS(mirrored_strategy(cpu_devices(2), {nullptr, std::chrono::milliseconds{0}}), value_error);
  mirrored_strategy remote{{"/job:worker/task:0/cpu:0", "/job:worker/task:0/cpu:1"}};
  CHECK(remote.run([](replica_context& ctx) { return id_of(ctx); })[1] == 1);
  // Default devices: every GPU (with CUDA and a GPU present), else /cpu:0.
  mirrored_strategy fallback;
  const auto& defaults = fallback.extended().worker_devices();
  const bool all_gpus = !defaults.empty()
                        && std::all_of(defaults.begin(), defaults.end(),
                                       [](const device_spec& d) { return d.is_gpu(); });
  CHECK((all_gpus || defaults == std::vector<device_spec>{cpu_device(0)}));
  if (!LOCKSTEP_HAVE_CUDA)
    CHECK(defaults == std::vector<device_spec>{cpu_device(0)});
}

TEST_CASE("one_device_strategy runs its replica on the calling thread") {
  one_device_strategy s{"/cpu:3"};
  CHECK(s.num_replicas_in_sync() == 1);
  const auto caller = std::this_thread::get_id();
  auto where = s.run([&](replica_context& ctx) {
    CHECK(std::this_thread::get_id() == caller);
    CHECK(ctx.devices() == std::vector<device_spec>{cpu_device(3)});
    return ctx.merge_call([](strategy&, const per_replica<int>& v) {
      CHECK(v.is_single());
      return v[0] + 1;
    }, 41);
  });
  CHECK(where[0] == 42);
  auto range = tensor::from(std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(s.reduce(reduce_op::sum, per_replica<tensor>{{range}}, 0).at<std::int64_t>(0) == 45);
  auto result = s.run([] { return tensor::scalar(2.0f); });
  CHECK(result[0].device() == cpu_device(3));
  auto reduced = s.extended().reduce_to(reduce_op::sum, result, "/cpu:0");
  CHECK(reduced[0].same_buffer(result[0])); // TF: one device reduces to itself
  CHECK(s.extended().worker_devices() == std::vector<device_spec>{cpu_device(3)});
}

TEST_CASE("a mirrored strategy with slice_all_reduce gives reduction_to_one_device's results bit for bit") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    mirrored_strategy slices{cpu_devices(n), {.cross_device_ops = std::make_shared<slice_all_reduce>()}};
    mirrored_strategy plain{cpu_devices(n), {.cross_device_ops = std::make_shared<reduction_to_one_device>()}};
    CHECK(slices.extended().cross_device_ops().name() == "slice_all_reduce");
    CHECK(plain.extended().cross_device_ops().name() == "reduction_to_one_device");
    auto step = [](replica_context& ctx) {
      const auto r = static_cast<double>(ctx.replica_id_in_sync_group());
      std::vector<float> values(1000);
      for (std::size_t i = 0; i < values.size(); ++i)
        values[i] = static_cast<float>((r + 1.0) * (static_cast<double>(i % 11) - 5.0) / 7.0);
      auto mine = tensor::from(values, {10, 100});
      return ctx.all_reduce(reduce_op::mean, mine);
    };
    const auto got = slices.run(step);
    const auto want = plain.run(step);
    for (int r = 0; r < n; ++r) {
      CHECK(got[static_cast<std::size_t>(r)] == want[static_cast<std::size_t>(r)]);
      CHECK(got[static_cast<std::size_t>(r)].device() == cpu_device(r).canonical());
    }
  }
}

TEST_CASE("a mirrored strategy with hierarchical_copy: all_reduce of several tensors, packed") {
  for (int n : world_sizes)
    for (std::size_t packs : {0, 1, 3}) {
      INFO("n ", n, ", num_packs ", packs);
      mirrored_strategy s{cpu_devices(n), {.cross_device_ops = std::make_shared<hierarchical_copy>(packs)}};
      CHECK(s.extended().cross_device_ops().name() == "hierarchical_copy");
      auto reduced = s.run([](replica_context& ctx) {
        const auto x = id_of(ctx) + 1;
        return ctx.all_reduce(reduce_op::max, std::vector<tensor>{tensor::filled(dtype::f32, {2, 3}, x),
                                                                  tensor::filled(dtype::i64, {5}, -x),
                                                                  tensor::filled(dtype::f32, {7}, x % 3)});
      });
      for (int r = 0; r < n; ++r) {
        const auto& mine = reduced[static_cast<std::size_t>(r)];
        REQUIRE(mine.size() == 3);
        CHECK(mine[0] == tensor::filled(dtype::f32, {2, 3}, n));
        CHECK(mine[1] == tensor::filled(dtype::i64, {5}, -1));
        CHECK(mine[2] == tensor::filled(dtype::f32, {7}, n == 1 ? 1 : 2));
        for (const auto& x : mine)
          CHECK(x.device() == cpu_device(r));
      }
      auto values = s.run([](replica_context& ctx) { return tensor::filled(dtype::i32, {4}, id_of(ctx) + 1); });
      CHECK(s.reduce(reduce_op::sum, values) == tensor::filled(dtype::i32, {4}, n * (n + 1) / 2));
    }
}

TEST_CASE("errors about thousands of devices name a few and count the rest") {
  auto devices = cpu_devices(5000);
  devices.push_back(devices[7]);
  try {
    mirrored_strategy s{devices};
    FAIL("constructed");
  } catch (const value_error& e) {
    const std::string what = e.what();
    CHECK(what.size() < 1200);
    CHECK(what.find("... and 4993 more") != std::string::npos);
  }
  try {
    mirrored_strategy s{cpu_devices(max_mirrored_replicas + 1)};
    FAIL("constructed");
  } catch (const value_error& e) {
    CHECK(std::string(e.what()).find("at most 4095 replicas") != std::string::npos);
  }
}
