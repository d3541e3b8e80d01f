// Multi-step loops (TF's MultiStepContext and run_steps_on_iterator):
// strategy_extended::experimental_run_steps_on_iterator with 1 to 4
// replicas on virtual CPU devices, against closed-form values.

#include "lockstep/lockstep.hpp"

#include "strategies/public_state.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <any>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

using namespace lockstep;

namespace {

const std::vector<int> world_sizes{1, 2, 3, 4};

/// Global batches of 2n float32 values: step g holds 2ng .. 2n(g+1) - 1,
/// so replica r's share of step g is {2ng + 2r, 2ng + 2r + 1}.
distributed_dataset<tensor> counting_steps(const strategy& s, int n, std::int64_t steps) {
  const std::int64_t batch = 2 * n;
  std::vector<float> values(static_cast<std::size_t>(steps * batch));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i);
  auto data = dataset<tensor>::from_tensor_slices(tensor::from(values)).batch(batch, true);
  return s.experimental_distribute_dataset(data);
}

/// The sum of global batch g of counting_steps: 2n values from 2ng.
double batch_sum(int n, std::int64_t g) {
  const double first = 2.0 * n * static_cast<double>(g);
  const double count = 2.0 * n;
  return count * first + count * (count - 1) / 2;
}

double scalar_of(const tensor& t) {
  REQUIRE(t.num_elements() == 1);
  return t.as_double(0);
}

double reduced(const multi_step_context& ctx, const std::string& name) {
  const auto& outputs = ctx.last_step_outputs();
  auto i = outputs.find(name);
  REQUIRE(i != outputs.end());
  REQUIRE(std::holds_alternative<tensor>(i->second));
  return scalar_of(std::get<tensor>(i->second));
}

std::uint64_t dispatches(const strategy& s) {
  return detail::strategy_access::state(s).dispatches.load();
}

/// A step function that records SUM, MEAN and MAX of each replica's share.
struct record_sum_mean_max {
  void operator()(replica_context&, multi_step_context& ctx, const tensor& mine) const {
    double sum = 0;
    double max = -1;
    for (std::int64_t i = 0; i < mine.num_elements(); ++i) {
      sum += mine.as_double(i);
      max = std::max(max, mine.as_double(i));
    }
    ctx.set_last_step_output("sum", tensor::scalar(sum), reduce_op::sum);
    ctx.set_last_step_output("mean", tensor::scalar(sum), reduce_op::mean);
    ctx.set_last_step_output("max", tensor::scalar(max), reduce_op::max);
  }
};

} // namespace

TEST_CASE("K steps: the last step's SUM, MEAN and MAX; the iterator goes on; fewer steps at the end, then 0") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto it = counting_steps(s, n, 7).make_iterator();
    std::int64_t first = 0;
    // 3 + 3 steps, then the last 1 of 7, then none.
    for (std::size_t expected : {3u, 3u, 1u}) {
      CAPTURE(first);
      auto ctx = s.extended().experimental_run_steps_on_iterator(record_sum_mean_max{}, it, 3);
      REQUIRE(ctx.steps() == expected);
      const auto last = first + static_cast<std::int64_t>(expected) - 1;
      CHECK(reduced(ctx, "sum") == batch_sum(n, last));
      CHECK(reduced(ctx, "mean") == batch_sum(n, last) / n);
      CHECK(reduced(ctx, "max") == static_cast<double>(2 * n * (last + 1) - 1));
      first += static_cast<std::int64_t>(expected);
    }
    auto done = s.extended().experimental_run_steps_on_iterator(record_sum_mean_max{}, it, 3);
    CHECK(done.steps() == 0);
    CHECK(done.last_step_outputs().empty());
  }
}

TEST_CASE("each replica's fn runs once per step with its slice, in one dispatch per call") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto it = counting_steps(s, n, 10).make_iterator();
    // Each replica thread appends only to its own vector.
    std::vector<std::vector<double>> firsts(static_cast<std::size_t>(n));
    std::vector<std::vector<std::string>> devices(static_cast<std::size_t>(n));
    auto step = [&](replica_context& rc, multi_step_context&, const tensor& mine) {
      const auto r = rc.replica_id_in_sync_group();
      REQUIRE(mine.num_elements() == 2);
      CHECK(mine.as_double(1) == mine.as_double(0) + 1);
      firsts[r].push_back(mine.as_double(0));
      devices[r].push_back(mine.device().to_string());
    };
    const auto before = dispatches(s);
    auto a = s.extended().experimental_run_steps_on_iterator(step, it, 4);
    CHECK(dispatches(s) == before + 1);
    auto b = s.extended().experimental_run_steps_on_iterator(step, it, 6);
    CHECK(dispatches(s) == before + 2);
    CHECK(a.steps() == 4);
    CHECK(b.steps() == 6);
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      std::vector<double> expected;
      for (int g = 0; g < 10; ++g)
        expected.push_back(2.0 * n * g + 2.0 * r);
      CHECK(firsts[static_cast<std::size_t>(r)] == expected);
      for (const auto& d : devices[static_cast<std::size_t>(r)])
        CHECK(d == cpu_device(r).to_string());
    }
    // No dispatch at all when no step is left.
    auto none = s.extended().experimental_run_steps_on_iterator(step, it, 6);
    CHECK(none.steps() == 0);
    CHECK(dispatches(s) == before + 2);
  }
}

TEST_CASE("initial_loop_values are the outputs when no step runs, and are replaced by set names") {
  mirrored_strategy s{cpu_devices(2)};
  auto it = counting_steps(s, 2, 1).make_iterator();
  std::map<std::string, tensor> initial{{"sum", tensor::scalar(-1.0)},
                                        {"kept", tensor::scalar(7.0)}};
  auto one = s.extended().experimental_run_steps_on_iterator(record_sum_mean_max{}, it, 5, initial);
  CHECK(one.steps() == 1);
  CHECK(reduced(one, "sum") == batch_sum(2, 0));
  CHECK(reduced(one, "kept") == 7.0);
  auto none = s.extended().experimental_run_steps_on_iterator(record_sum_mean_max{}, it, 5, initial);
  CHECK(none.steps() == 0);
  CHECK(none.last_step_outputs().size() == 2);
  CHECK(reduced(none, "sum") == -1.0);
  CHECK(reduced(none, "kept") == 7.0);
}

TEST_CASE("nest (dict) datasets give each replica its nest<tensor>") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    using tn = nest<tensor>;
    const std::int64_t steps = 3;
    const std::int64_t total = steps * n;
    std::vector<std::int64_t> labels(static_cast<std::size_t>(total));
    std::vector<float> xs(static_cast<std::size_t>(total));
    for (std::size_t i = 0; i < labels.size(); ++i) {
      labels[i] = 100 + static_cast<std::int64_t>(i);
      xs[i] = static_cast<float>(i);
    }
    auto data = dataset<tn>::from_tensor_slices(
                  tn(tn::dict{{"x", tn(tensor::from(xs))}, {"y", tn(tensor::from(labels))}}))
                  .batch(n, true);
    auto it = s.experimental_distribute_dataset(data).make_iterator();
    auto ctx = s.extended().experimental_run_steps_on_iterator(
      [](replica_context&, multi_step_context& m, const nest<tensor>& mine) {
        const auto& y = mine["y"].leaf();
        const auto& x = mine["x"].leaf();
        REQUIRE(y.num_elements() == 1);
        CHECK(y.at<std::int64_t>(0) == 100 + static_cast<std::int64_t>(x.at<float>(0)));
        m.set_last_step_output("labels", y, reduce_op::sum);
      },
      it, 10);
    CHECK(ctx.steps() == static_cast<std::size_t>(steps));
    // The last step holds labels 100 + 2n .. 100 + 3n - 1.
    const auto first = 100 + 2 * n;
    const auto expected = static_cast<std::int64_t>(n) * first + n * (n - 1) / 2;
    const auto& out = std::get<tensor>(ctx.last_step_outputs().at("labels"));
    CHECK(out.at<std::int64_t>(0) == expected);
  }
}

TEST_CASE("set_last_step_output in replica context without an op is TF's assertion") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto it = counting_steps(s, n, 2).make_iterator();
    const auto message = error_of<value_error>([&] {
      (void) s.extended().experimental_run_steps_on_iterator(
        [](multi_step_context& m, const tensor& mine) { m.set_last_step_output("loss", mine); },
        it, 2);
    });
    CHECK(message.find("assert reduce_op is not None") != std::string::npos);
    CHECK(message.find("loss") != std::string::npos);
    // The strategy stays usable.
    auto sums = s.run([](replica_context& c) { return c.replica_id_in_sync_group(); });
    CHECK(sums.size() == static_cast<std::size_t>(n));
  }
}

TEST_CASE("set in cross-replica context via merge_call: per_replica without an op, reduced with one") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto it = counting_steps(s, n, 4).make_iterator();
    auto ctx = s.extended().experimental_run_steps_on_iterator(
      [](replica_context& rc, multi_step_context& m, const tensor& mine) {
        rc.merge_call(
          [&m](strategy&, const per_replica<tensor>& firsts) {
            CHECK(in_cross_replica_context());
            m.set_last_step_output("firsts", firsts);
            m.set_last_step_output("total", firsts, reduce_op::sum);
            m.set_last_step_output("plain", tensor::scalar(std::int32_t{5}));
            m.set_non_tensor_output("step_of_replica_0",
                                    static_cast<int>(firsts[0].as_double(0)));
          },
          tensor::scalar(mine.as_double(0)));
      },
      it, 4);
    REQUIRE(ctx.steps() == 4);
    const auto& outputs = ctx.last_step_outputs();
    REQUIRE(std::holds_alternative<per_replica<tensor>>(outputs.at("firsts")));
    const auto& firsts = std::get<per_replica<tensor>>(outputs.at("firsts"));
    REQUIRE(firsts.size() == static_cast<std::size_t>(n));
    double total = 0;
    for (int r = 0; r < n; ++r) {
      const double expected = 2.0 * n * 3 + 2.0 * r;
      CHECK(scalar_of(firsts[static_cast<std::size_t>(r)]) == expected);
      total += expected;
    }
    CHECK(reduced(ctx, "total") == total);
    CHECK(reduced(ctx, "plain") == 5.0);
    const auto& non_tensor = ctx.non_tensor_outputs().at("step_of_replica_0");
    REQUIRE(non_tensor.size() == 1);
    CHECK(std::any_cast<int>(non_tensor[0]) == 2 * n * 3);
  }
}

TEST_CASE("non-tensor outputs in replica context: one value per replica, from the last step") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto it = counting_steps(s, n, 3).make_iterator();
    auto ctx = s.extended().experimental_run_steps_on_iterator(
      [](replica_context& rc, multi_step_context& m, const tensor& mine) {
        m.set_non_tensor_output("tag", "replica " + std::to_string(rc.replica_id_in_sync_group())
                                         + " at " + std::to_string(int(mine.as_double(0))));
      },
      it, 3);
    const auto& tags = ctx.non_tensor_outputs().at("tag");
    REQUIRE(tags.size() == static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r)
      CHECK(std::any_cast<std::string>(tags[static_cast<std::size_t>(r)])
            == "replica " + std::to_string(r) + " at " + std::to_string(4 * n + 2 * r));
  }
}

TEST_CASE("a name set by only some replicas, or with different ops, is an error naming the replica") {
  mirrored_strategy s{cpu_devices(3)};
  auto it = counting_steps(s, 3, 4).make_iterator();
  std::optional<multi_step_context> seen; // a handle: shares the loop's context
  auto missing = error_of<value_error>([&] {
    (void) s.extended().experimental_run_steps_on_iterator(
      [&seen](replica_context& rc, multi_step_context& m, const tensor& mine) {
        if (rc.replica_id_in_sync_group() != 1)
          m.set_last_step_output("x", mine, reduce_op::sum);
        else
          seen = m;
      },
      it, 1);
  });
  CHECK(missing.find("replica 1") != std::string::npos);
  CHECK(missing.find("'x'") != std::string::npos);
  REQUIRE(seen.has_value());
  CHECK_THROWS_AS((void) seen->non_tensor_outputs(), context_error);
  auto ops = error_of<value_error>([&] {
    (void) s.extended().experimental_run_steps_on_iterator(
      [](replica_context& rc, multi_step_context& m, const tensor& mine) {
        m.set_last_step_output("x", mine,
                               rc.replica_id_in_sync_group() == 2 ? reduce_op::max : reduce_op::sum);
      },
      it, 1);
  });
  CHECK(ops.find("replica 2") != std::string::npos);
  CHECK(ops.find("reduce op max") != std::string::npos);
  auto non_tensor = error_of<value_error>([&] {
    (void) s.extended().experimental_run_steps_on_iterator(
      [](replica_context& rc, multi_step_context& m, const tensor&) {
        if (rc.replica_id_in_sync_group() == 0)
          m.set_non_tensor_output("only_0", 1);
      },
      it, 1);
  });
  CHECK(non_tensor.find("replica 1") != std::string::npos);
}

TEST_CASE("an exception in fn propagates with its type and the strategy stays usable") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto it = counting_steps(s, n, 6).make_iterator();
    std::optional<multi_step_context> seen; // a handle: shares the loop's context
    CHECK_THROWS_AS(s.extended().experimental_run_steps_on_iterator(
                      [&](replica_context& rc, multi_step_context& m, const tensor& mine) {
                        if (rc.replica_id_in_sync_group() == 0)
                          seen = m;
                        if (mine.as_double(0) >= 2.0 * n * 1 && rc.replica_id_in_sync_group() + 1 == std::size_t(n))
                          throw std::out_of_range("step 1 failed");
                      },
                      it, 3),
                    std::out_of_range);
    // The context the step saw is unusable now; the steps taken are gone.
    REQUIRE(seen.has_value());
    CHECK_THROWS_AS((void) seen->last_step_outputs(), context_error);
    auto ctx = s.extended().experimental_run_steps_on_iterator(record_sum_mean_max{}, it, 3);
    CHECK(ctx.steps() == 3);
    CHECK(reduced(ctx, "sum") == batch_sum(n, 5));
  }
}

TEST_CASE("called from replica context: context_error; iterations 0: value_error") {
  mirrored_strategy s{cpu_devices(2)};
  auto it = counting_steps(s, 2, 2).make_iterator();
  auto inner = s.run([&](replica_context&) {
    try {
      (void) s.extended().experimental_run_steps_on_iterator(record_sum_mean_max{}, it, 1);
    } catch (const context_error&) {
      return 1;
    }
    return 0;
  });
  for (auto x : inner.values())
    CHECK(x == 1);
  CHECK_THROWS_AS(s.extended().experimental_run_steps_on_iterator(record_sum_mean_max{}, it, 0),
                  value_error);
  // Neither took a step.
  auto ctx = s.extended().experimental_run_steps_on_iterator(record_sum_mean_max{}, it, 5);
  CHECK(ctx.steps() == 2);
}

TEST_CASE("a mirrored counter incremented each step via merge_call + update ends at the step count") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto scope = s.scope();
    variable counter{tensor::scalar(0.0f)};
    variable total{tensor::scalar(0.0f)};
    auto it = counting_steps(s, n, 5).make_iterator();
    auto step = [&](replica_context& rc, multi_step_context&, const tensor& mine) {
      rc.merge_call(
        [&](strategy& st, const per_replica<tensor>& sums) {
          const auto sum = st.reduce(reduce_op::sum, sums).at<float>(0);
          st.extended().update(counter, [](tensor& v) { v.data<float>()[0] += 1.0f; });
          st.extended().update(total, [sum](tensor& v) { v.data<float>()[0] += sum; });
        },
        tensor::scalar(static_cast<float>(mine.as_double(0) + mine.as_double(1))));
    };
    auto a = s.extended().experimental_run_steps_on_iterator(step, it, 3);
    auto b = s.extended().experimental_run_steps_on_iterator(step, it, 3);
    CHECK(a.steps() + b.steps() == 5);
    double expected_total = 0;
    for (int g = 0; g < 5; ++g)
      expected_total += batch_sum(n, g);
    for (const auto& copy : counter.values())
      CHECK(scalar_of(copy.read_value()) == 5.0);
    for (const auto& copy : total.values())
      CHECK(scalar_of(copy.read_value()) == expected_total);
  }
}

TEST_CASE("the default and one-device strategies run the loop on the calling thread") {
  auto check = [](const strategy& s) {
    auto it = counting_steps(s, 1, 4).make_iterator();
    auto ctx = s.extended().experimental_run_steps_on_iterator(record_sum_mean_max{}, it, 4);
    CHECK(ctx.steps() == 4);
    CHECK(reduced(ctx, "sum") == batch_sum(1, 3));
    CHECK(reduced(ctx, "max") == 7.0);
  };
  check(get_strategy());
  check(one_device_strategy{cpu_device(0)});
}
