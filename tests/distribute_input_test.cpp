// Distributed input (TF's input_lib): experimental_distribute_dataset,
// experimental_distribute_datasets_from_function, make_input_fn_iterator and
// experimental_distribute_values_from_function, with 1 to 4 replicas on
// virtual CPU devices, against closed-form values.

#include "lockstep/lockstep.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace lockstep;

namespace {

const std::vector<int> world_sizes{1, 2, 3, 4};

/// `rows` rows of two float32 columns: row i is {2i, 2i + 1}.
tensor two_column_rows(std::int64_t rows) {
  std::vector<float> values(static_cast<std::size_t>(2 * rows));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i);
  return tensor::from(values, {rows, 2});
}

/// Checks that `part` holds rows [first, first + count) of two_column_rows.
void check_rows(const tensor& part, std::int64_t first, std::int64_t count) {
  REQUIRE(part.dtype() == dtype::f32);
  REQUIRE(part.shape() == shape_t{count, 2});
  for (std::int64_t i = 0; i < count; ++i)
    for (std::int64_t j = 0; j < 2; ++j)
      CHECK(part.at<float>(2 * i + j) == static_cast<float>(2 * (first + i) + j));
}

/// Rows of replica r in a global batch of `rows` split `n` ways: the first
/// `rows % n` replicas get one more.
std::int64_t share(std::int64_t rows, std::int64_t n, std::int64_t r) {
  return rows / n + (r < rows % n ? 1 : 0);
}

std::int64_t offset(std::int64_t rows, std::int64_t n, std::int64_t r) {
  std::int64_t begin = 0;
  for (std::int64_t q = 0; q < r; ++q)
    begin += share(rows, n, q);
  return begin;
}

/// Checks every step of `data` (two_column_rows(total) batched by `batch`
/// without dropping the remainder) split over the devices of `n` replicas.
void check_split(const distributed_dataset<tensor>& data, std::int64_t total,
                 std::int64_t batch, int n) {
  const std::int64_t steps = (total + batch - 1) / batch;
  std::int64_t step = 0;
  auto it = data.make_iterator();
  while (auto x = it.next()) {
    CAPTURE(step);
    REQUIRE(step < steps);
    REQUIRE(x->size() == static_cast<std::size_t>(n));
    const auto rows = std::min(batch, total - step * batch);
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      const auto& part = (*x)[static_cast<std::size_t>(r)];
      check_rows(part, step * batch + offset(rows, n, r), share(rows, n, r));
      CHECK(part.device() == cpu_device(r));
    }
    ++step;
  }
  CHECK(step == steps);
  CHECK_FALSE(it.next());
}

/// Waits (at most 10 s) until `it` has `count` steps prefetched.
template <class T>
bool wait_prefetched(const distributed_iterator<T>& it, std::size_t count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  while (it.prefetched() != count) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  return true;
}

} // namespace

// -- experimental_distribute_dataset ----------------------------------------------

TEST_CASE("divisible global batches split into consecutive per-replica batches on each device") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    const std::int64_t batch = 2 * n;
    const std::int64_t total = 5 * batch;
    auto data = dataset<tensor>::from_tensor_slices(two_column_rows(total)).batch(batch, true);
    auto dist = s.experimental_distribute_dataset(data);
    CHECK(dist.num_replicas_in_sync() == static_cast<std::size_t>(n));
    check_split(dist, total, batch, n);
  }
}

TEST_CASE("batches that do not divide split as evenly as possible, first replicas one row more") {
  // (total rows, global batch): full batches that do not divide, partial
  // last batches, and last batches with fewer rows than replicas.
  const std::vector<std::pair<std::int64_t, std::int64_t>> cases{
    {10, 4}, {7, 5}, {3, 3}, {1, 4}, {9, 7}, {12, 6}};
  for (int n : world_sizes)
    for (auto [total, batch] : cases) {
      CAPTURE(n);
      CAPTURE(total);
      CAPTURE(batch);
      mirrored_strategy s{cpu_devices(n)};
      auto data = dataset<tensor>::from_tensor_slices(two_column_rows(total)).batch(batch);
      check_split(s.experimental_distribute_dataset(data), total, batch, n);
    }
}

TEST_CASE("replicas without rows get empty batches of the right shape, dtype and device") {
  mirrored_strategy s{cpu_devices(4)};
  auto data = dataset<tensor>::from_tensor_slices(tensor::zeros(dtype::i32, {5, 3, 2}))
                .batch(4);
  std::vector<std::vector<std::int64_t>> dim0;
  for (const auto& step : s.experimental_distribute_dataset(data)) {
    std::vector<std::int64_t> d;
    for (std::size_t r = 0; r < 4; ++r) {
      CHECK(step[r].dtype() == dtype::i32);
      CHECK(step[r].shape().size() == 3);
      CHECK(step[r].shape()[1] == 3);
      CHECK(step[r].shape()[2] == 2);
      CHECK(step[r].device() == cpu_device(static_cast<int>(r)));
      d.push_back(step[r].shape()[0]);
    }
    dim0.push_back(d);
  }
  CHECK(dim0 == std::vector<std::vector<std::int64_t>>{{1, 1, 1, 1}, {1, 0, 0, 0}});
}

// -- several workers: TF's rebatch, then auto-shard by data -----------------------

namespace {

using replica_elements = std::vector<std::vector<std::int64_t>>; // one list per replica

/// The steps that `workers` workers of `local` replicas each take from
/// range(total).batch(batch): each worker's distributed_dataset (the one
/// a multi-worker strategy makes, here without the workers' agreement on
/// the end) is read to its end, and step k lists every replica's elements
/// in global replica order (worker-major, as replica_id_in_sync_group).
std::vector<replica_elements> steps_of_workers(std::int64_t total, std::int64_t batch,
                                               std::size_t workers, std::size_t local) {
  std::vector<std::int64_t> values(static_cast<std::size_t>(total));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<std::int64_t>(i);
  const auto data = dataset<tensor>::from_tensor_slices(tensor::from(values)).batch(batch);
  std::vector<replica_elements> steps;
  for (std::size_t w = 0; w < workers; ++w) {
    const distributed_dataset<tensor> mine{
      data, distributed_dataset<tensor>::mode::split_global_batches,
      cpu_devices(static_cast<int>(local)), input_options{}, input_context{workers, w, workers * local}};
    CHECK(mine.num_replicas_in_sync() == workers * local);
    std::size_t k = 0;
    for (const auto& step : mine) {
      if (steps.size() <= k)
        steps.emplace_back(workers * local);
      for (std::size_t r = 0; r < local; ++r) {
        CHECK(step[r].device() == cpu_device(static_cast<int>(r)));
        const auto elements = step[r].data<std::int64_t>();
        steps[k][w * local + r].assign(elements.begin(), elements.end());
      }
      ++k;
    }
    CHECK(k == steps.size()); // every worker reads every global batch
  }
  return steps;
}

} // namespace

TEST_CASE("several workers: replicas take TF's order (rebatch, shard among workers, in turn)") {
  // The two examples of issue 26: worker 0 holds elements 0 and 2.
  CHECK(steps_of_workers(4, 4, 2, 2) == std::vector<replica_elements>{{{0}, {2}, {1}, {3}}});
  CHECK(steps_of_workers(9, 8, 2, 2)
        == std::vector<replica_elements>{{{0, 1}, {4, 5}, {2, 3}, {6, 7}}, {{8}, {}, {}, {}}});
  // One worker of two replicas: consecutive halves, as before.
  CHECK(steps_of_workers(6, 4, 1, 2)
        == std::vector<replica_elements>{{{0, 1}, {2, 3}}, {{4}, {5}}});
  CHECK(steps_of_workers(5, 5, 1, 2) == std::vector<replica_elements>{{{0, 1, 2}, {3, 4}}});
  // Three workers of one replica: slices of ceil(rows / 3) rows.
  CHECK(steps_of_workers(7, 6, 3, 1)
        == std::vector<replica_elements>{{{0, 1}, {2, 3}, {4, 5}}, {{6}, {}, {}}});
  CHECK(steps_of_workers(4, 4, 3, 1) == std::vector<replica_elements>{{{0, 1}, {2, 3}, {}}});
  // Two workers of three replicas: worker 0 takes slices 0, 2, 4.
  CHECK(steps_of_workers(12, 6, 2, 3)
        == std::vector<replica_elements>{{{0}, {2}, {4}, {1}, {3}, {5}},
                                         {{6}, {8}, {10}, {7}, {9}, {11}}});
  // Batches the replicas do not divide, and an uneven last batch.
  CHECK(steps_of_workers(10, 10, 2, 2)
        == std::vector<replica_elements>{{{0, 1, 2}, {6, 7, 8}, {3, 4, 5}, {9}}});
  CHECK(steps_of_workers(13, 8, 2, 2)
        == std::vector<replica_elements>{{{0, 1}, {4, 5}, {2, 3}, {6, 7}},
                                         {{8, 9}, {12}, {10, 11}, {}}});
}

TEST_CASE("replica_rows: every row of a batch goes to exactly one replica, in slices") {
  for (std::size_t workers = 1; workers <= 4; ++workers)
    for (std::size_t local = 1; local <= 3; ++local)
      for (std::int64_t rows = 0; rows <= 13; ++rows) {
        CAPTURE(workers);
        CAPTURE(local);
        CAPTURE(rows);
        std::vector<int> taken(static_cast<std::size_t>(rows), 0);
        for (std::size_t w = 0; w < workers; ++w)
          for (std::size_t r = 0; r < local; ++r) {
            const auto share = detail::replica_rows(rows, workers, local, w, r);
            REQUIRE(share.begin >= 0);
            REQUIRE(share.count >= 0);
            REQUIRE(share.begin + share.count <= rows);
            for (auto i = share.begin; i < share.begin + share.count; ++i)
              ++taken[static_cast<std::size_t>(i)];
          }
        CHECK(taken == std::vector<int>(static_cast<std::size_t>(rows), 1));
      }
  CHECK(detail::replica_rows(8, 2, 2, 1, 1) == detail::row_range{6, 2});
  CHECK(detail::replica_rows(9, 2, 2, 0, 1) == detail::row_range{6, 3}); // slices of 3
  CHECK(detail::replica_rows(9, 2, 2, 1, 1) == detail::row_range{9, 0});
  CHECK(detail::replica_rows(9, 1, 4, 0, 1) == detail::row_range{3, 2}); // one worker: 3, 2, 2, 2
  CHECK(detail::replica_rows(1, 2, 2, 0, 1) == detail::row_range{1, 0});
  CHECK(error_of<value_error>([] { detail::replica_rows(4, 2, 2, 2, 0); })
        == "replica_rows: no share of a batch of 4 rows for replica 0 of worker 2 with 2 "
           "workers of 2 replicas");
  CHECK(error_of<value_error>([] { detail::replica_rows(-1, 1, 1, 0, 0); }).find("-1 rows")
        != std::string::npos);
}

TEST_CASE("a static batch size that replicas do not divide is TF's sharded-evenly value_error") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    const std::int64_t batch = 2 * n + 1;
    auto data = dataset<tensor>::from_tensor_slices(two_column_rows(4 * batch));
    const auto expected = "Batch size " + std::to_string(batch)
                          + " cannot be sharded evenly across replicas " + std::to_string(n);
    CHECK(error_of<value_error>([&] { s.experimental_distribute_dataset(data.batch(batch, true)); })
          == expected);
    // Stages that keep the batch keep it static.
    auto kept = data.batch(batch, true).shuffle(4, 1).repeat(2).take(3).prefetch(1);
    CHECK(kept.static_batch_size() == batch);
    CHECK(error_of<value_error>([&] { s.experimental_distribute_dataset(kept); }) == expected);
    // Without drop_remainder the batch dimension is not static: accepted.
    CHECK_FALSE(data.batch(batch).static_batch_size());
    check_split(s.experimental_distribute_dataset(data.batch(batch)), 4 * batch, batch, n);
  }
  mirrored_strategy one{cpu_devices(1)};
  CHECK_NOTHROW(one.experimental_distribute_dataset(
    dataset<tensor>::from_tensor_slices(two_column_rows(6)).batch(5, true)));
}

TEST_CASE("static_batch_size: batch(n, true) sets it, map and sources leave it unknown") {
  auto data = dataset<tensor>::from_tensor_slices(two_column_rows(8));
  CHECK_FALSE(data.static_batch_size());
  CHECK(data.batch(4, true).static_batch_size() == 4);
  CHECK_FALSE(data.batch(4, true).map([](tensor t) { return t; }).static_batch_size());
  CHECK(data.batch(4, true).shard(2, 1).static_batch_size() == 4);
}

TEST_CASE("every replica sees the same number of steps, and the end of data is clear") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto data = dataset<tensor>::from_tensor_slices(two_column_rows(11)).batch(3);
    auto it = s.experimental_distribute_dataset(data).make_iterator();
    std::vector<int> steps(static_cast<std::size_t>(n), 0);
    while (auto step = it.next()) {
      REQUIRE(step->size() == static_cast<std::size_t>(n));
      s.run([&](replica_context& ctx, const tensor&) {
        ++steps[ctx.replica_id_in_sync_group()];
      }, *step);
    }
    CHECK(steps == std::vector<int>(static_cast<std::size_t>(n), 4));
    CHECK_FALSE(it.next());
    CHECK_FALSE(it.next());
  }
}

TEST_CASE("run on distributed steps: replica r gets its slice; the all-reduced sum is the closed form") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    const std::int64_t total = 23;
    auto data = dataset<tensor>::from_tensor_slices(two_column_rows(total)).batch(6);
    float grand_total = 0;
    std::int64_t steps = 0;
    for (const auto& step : s.experimental_distribute_dataset(data)) {
      auto sums = s.run(
        [](replica_context& ctx, const tensor& x) {
          CHECK(x.device() == current_device());
          CHECK(x.device() == cpu_device(static_cast<int>(ctx.replica_id_in_sync_group())));
          auto local = tensor::scalar(static_cast<float>(reduce_sum_axis(
            reduce_sum_axis(x, 1), 0).as_double(0)));
          return ctx.all_reduce(reduce_op::sum, local);
        },
        step);
      // Every replica holds the step's total: the sum of the batch's values.
      const auto first = 2 * steps * 6;
      const auto last = std::min<std::int64_t>(2 * (steps + 1) * 6, 2 * total) - 1;
      const auto expected = static_cast<float>((first + last) * (last - first + 1) / 2);
      for (const auto& t : s.experimental_local_results(sums))
        CHECK(t.at<float>(0) == expected);
      grand_total += s.experimental_local_results(sums)[0].at<float>(0);
      ++steps;
    }
    CHECK(steps == 4);
    // 0 + 1 + ... + (2 * total - 1)
    CHECK(grand_total == static_cast<float>(2 * total * (2 * total - 1) / 2));
  }
}

TEST_CASE("dict elements: every leaf is split and run receives replica r's nest") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    const std::int64_t total = 10;
    const std::int64_t batch = 4;
    std::vector<std::int64_t> labels(static_cast<std::size_t>(total));
    for (std::size_t i = 0; i < labels.size(); ++i)
      labels[i] = 100 + static_cast<std::int64_t>(i);
    using tn = nest<tensor>;
    auto data = dataset<tn>::from_tensor_slices(
                  tn(tn::dict{{"x", tn(two_column_rows(total))},
                              {"y", tn(tensor::from(labels, {total}))}}))
                  .batch(batch);
    std::int64_t step = 0;
    for (const auto& x : s.experimental_distribute_dataset(data)) {
      CAPTURE(step);
      const auto rows = std::min(batch, total - step * batch);
      for (int r = 0; r < n; ++r) {
        const auto first = step * batch + offset(rows, n, r);
        const auto count = share(rows, n, r);
        const auto& xs = x["x"].leaf()[static_cast<std::size_t>(r)];
        const auto& ys = x["y"].leaf()[static_cast<std::size_t>(r)];
        check_rows(xs, first, count);
        REQUIRE(ys.shape() == shape_t{count});
        for (std::int64_t i = 0; i < count; ++i)
          CHECK(ys.at<std::int64_t>(i) == 100 + first + i);
        CHECK(xs.device() == cpu_device(r));
        CHECK(ys.device() == cpu_device(r));
      }
      // run unwraps the nest of per_replica leaves into replica r's nest.
      auto label_sums = s.run(
        [](replica_context& ctx, const nest<tensor>& mine) {
          std::int64_t sum = 0;
          const auto& y = mine["y"].leaf();
          for (std::int64_t i = 0; i < y.num_elements(); ++i)
            sum += y.at<std::int64_t>(i);
          return ctx.all_reduce(reduce_op::sum, tensor::scalar(sum));
        },
        x);
      const auto first = 100 + step * batch;
      const auto expected = (first + first + rows - 1) * rows / 2;
      for (const auto& t : s.experimental_local_results(label_sums))
        CHECK(t.at<std::int64_t>(0) == expected);
      ++step;
    }
    CHECK(step == 3);
  }
}

TEST_CASE("one_device and default strategies give one component on their device") {
  auto data = dataset<tensor>::from_tensor_slices(two_column_rows(5)).batch(2);
  one_device_strategy one{cpu_device(3)};
  std::int64_t step = 0;
  for (const auto& x : one.experimental_distribute_dataset(data)) {
    REQUIRE(x.size() == 1);
    check_rows(x[0], 2 * step, std::min<std::int64_t>(2, 5 - 2 * step));
    CHECK(x[0].device() == cpu_device(3));
    auto doubled = one.run([](const tensor& t) { return t.num_elements(); }, x);
    CHECK(doubled[0] == x[0].num_elements());
    ++step;
  }
  CHECK(step == 3);

  auto standard = get_strategy();
  step = 0;
  for (const auto& x : standard.experimental_distribute_dataset(data)) {
    REQUIRE(x.size() == 1);
    check_rows(x[0], 2 * step, std::min<std::int64_t>(2, 5 - 2 * step));
    CHECK(x[0].device() == current_device());
    ++step;
  }
  CHECK(step == 3);
}

TEST_CASE("errors in the pipeline reach the consumer; scalar elements cannot be split") {
  mirrored_strategy s{cpu_devices(2)};
  auto failing = dataset<tensor>::from_tensor_slices(two_column_rows(4)).batch(2).map(
    [](tensor t) -> tensor {
      if (t.at<float>(0) > 0)
        throw type_error("bad batch");
      return t;
    });
  auto it = s.experimental_distribute_dataset(failing).make_iterator();
  CHECK(it.next());
  CHECK(error_of<type_error>([&] { (void) it.next(); }) == "bad batch");

  auto scalars = dataset<tensor>::from_tensor_slices(tensor::from({1.0f, 2.0f}));
  auto scalar_it = s.experimental_distribute_dataset(scalars).make_iterator();
  CHECK(error_of<value_error>([&] { (void) scalar_it.next(); }).find("cannot split a scalar")
        != std::string::npos);

  CHECK(error_of<value_error>([&] {
          s.experimental_distribute_dataset(scalars, input_options{0, std::nullopt});
        }) == "input_options: prefetch_depth must be at least 1 (currently 0)");
}

// -- prefetch -----------------------------------------------------------------------

TEST_CASE("the input actor prefetches up to the depth, observable through prefetched()") {
  for (std::size_t depth : {1u, 2u, 3u}) {
    CAPTURE(depth);
    mirrored_strategy s{cpu_devices(2)};
    auto data = dataset<tensor>::from_tensor_slices(two_column_rows(10)).batch(2);
    auto it = s.experimental_distribute_dataset(data, input_options{depth, std::nullopt})
                .make_iterator();
    REQUIRE(wait_prefetched(it, depth));
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
    CHECK(it.prefetched() == depth); // never more than the depth ahead
    CHECK(it.produced() == depth);
    std::size_t taken = 0;
    while (auto step = it.next()) {
      ++taken;
      const auto remaining = 5 - taken;
      REQUIRE(wait_prefetched(it, std::min(depth, remaining)));
      CHECK(it.produced() == taken + std::min(depth, remaining));
      CHECK((*step)[1].device() == cpu_device(1));
    }
    CHECK(taken == 5);
    CHECK(it.prefetched() == 0);
  }
  mirrored_strategy s{cpu_devices(2)};
  auto data = dataset<tensor>::from_tensor_slices(two_column_rows(10)).batch(2);
  auto dist = s.experimental_distribute_dataset(data);
  CHECK(dist.options().prefetch_depth == 2);
  auto it = dist.make_iterator();
  CHECK(wait_prefetched(it, 2));
}

// -- datasets from a function -----------------------------------------------------

TEST_CASE("datasets_from_function: one call with TF's input_context, replicas take batches in turn") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    const std::int64_t global = 2 * n;
    // 2n + 1 per-replica batches of 2 rows: two full steps, then one batch
    // for replica 0 and empty batches for the others.
    const std::int64_t total = 2 * (2 * n + 1);
    int calls = 0;
    auto dist = s.experimental_distribute_datasets_from_function([&](const input_context& ctx) {
      ++calls;
      CHECK(ctx.num_input_pipelines() == 1);
      CHECK(ctx.input_pipeline_id() == 0);
      CHECK(ctx.num_replicas_in_sync() == static_cast<std::size_t>(n));
      return dataset<tensor>::from_tensor_slices(two_column_rows(total))
        .batch(ctx.get_per_replica_batch_size(global));
    });
    CHECK(calls == 1);
    std::int64_t step = 0;
    for (const auto& x : dist) {
      CAPTURE(step);
      REQUIRE(x.size() == static_cast<std::size_t>(n));
      for (int r = 0; r < n; ++r) {
        const auto element = step * n + r;
        const auto count = element < 2 * n + 1 ? 2 : 0;
        check_rows(x[static_cast<std::size_t>(r)], 2 * element, count);
        CHECK(x[static_cast<std::size_t>(r)].device() == cpu_device(r));
      }
      ++step;
    }
    CHECK(step == 3);
    CHECK(calls == 1);
  }
}

TEST_CASE("input_context: get_per_replica_batch_size divides or raises TF's value_error") {
  input_context ctx{1, 0, 4};
  CHECK(ctx.get_per_replica_batch_size(64) == 16);
  CHECK(ctx.get_per_replica_batch_size(0) == 0);
  CHECK(error_of<value_error>([&] { (void) ctx.get_per_replica_batch_size(10); })
        == "The `global_batch_size` 10 is not divisible by `num_replicas_in_sync` 4 ");
  const input_context standard;
  CHECK(standard.num_input_pipelines() == 1);
  CHECK(standard.input_pipeline_id() == 0);
  CHECK(standard.num_replicas_in_sync() == 1);
  CHECK(standard.get_per_replica_batch_size(7) == 7);

  mirrored_strategy s{cpu_devices(3)};
  CHECK(error_of<value_error>([&] {
          s.experimental_distribute_datasets_from_function([](const input_context& c) {
            return dataset<tensor>::from_tensor_slices(two_column_rows(8))
              .batch(c.get_per_replica_batch_size(8));
          });
        }) == "The `global_batch_size` 8 is not divisible by `num_replicas_in_sync` 3 ");
}

TEST_CASE("datasets_from_function with dict elements and structures that differ") {
  mirrored_strategy s{cpu_devices(2)};
  using tn = nest<tensor>;
  auto dist = s.experimental_distribute_datasets_from_function([](const input_context&) {
    return dataset<tn>::from_tensor_slices(tn(tn::dict{{"x", tn(two_column_rows(6))}})).batch(3);
  });
  int steps = 0;
  for (const auto& x : dist) {
    check_rows(x["x"].leaf()[0], 0, 3);
    check_rows(x["x"].leaf()[1], 3, 3);
    ++steps;
  }
  CHECK(steps == 1);

  // A per-replica dataset whose elements change structure is a value_error.
  auto mixed = s.experimental_distribute_datasets_from_function([](const input_context&) {
    return dataset<std::int64_t>::range(2).map([](std::int64_t i) {
      auto rows = two_column_rows(1);
      return i == 0 ? tn(tn::dict{{"x", tn(rows)}}) : tn(tn::dict{{"z", tn(rows)}});
    });
  });
  auto it = mixed.make_iterator();
  CHECK(error_of<value_error>([&] { (void) it.next(); }).find("structure") != std::string::npos);
}

TEST_CASE("make_input_fn_iterator accepts per_worker and rejects any other mode with TF's error") {
  mirrored_strategy s{cpu_devices(2)};
  auto fn = [](const input_context& ctx) {
    return dataset<tensor>::from_tensor_slices(two_column_rows(8))
      .batch(ctx.get_per_replica_batch_size(4));
  };
  auto it = s.make_input_fn_iterator(fn);
  int steps = 0;
  while (auto x = it.next()) {
    check_rows((*x)[0], 4 * steps, 2);
    check_rows((*x)[1], 4 * steps + 2, 2);
    ++steps;
  }
  CHECK(steps == 2);
  CHECK(error_of<value_error>([&] {
          s.make_input_fn_iterator(fn, input_replication_mode::per_replica);
        }) == "Input replication mode not supported: input_replication_mode::per_replica");
}

// -- values from a function ---------------------------------------------------------

TEST_CASE("distribute_values_from_function calls fn per replica on its device") {
  for (int n : world_sizes) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto values = s.experimental_distribute_values_from_function([&](const value_context& ctx) {
      CHECK(ctx.num_replicas_in_sync() == static_cast<std::size_t>(n));
      return tensor::scalar(static_cast<float>(10 * (ctx.replica_id_in_sync_group() + 1)));
    });
    REQUIRE(values.size() == static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      CHECK(values[static_cast<std::size_t>(r)].at<float>(0) == static_cast<float>(10 * (r + 1)));
      CHECK(values[static_cast<std::size_t>(r)].device() == cpu_device(r));
    }
    // 10 + 20 + ... + 10n, seen by every replica.
    auto sums = s.run([](replica_context& ctx, const tensor& v) {
      return ctx.all_reduce(reduce_op::sum, v);
    }, values);
    for (const auto& t : s.experimental_local_results(sums))
      CHECK(t.at<float>(0) == static_cast<float>(5 * n * (n + 1)));
    CHECK(s.reduce(reduce_op::sum, values).at<float>(0) == static_cast<float>(5 * n * (n + 1)));

    auto ids = s.experimental_distribute_values_from_function(
      [](const value_context& ctx) { return static_cast<int>(ctx.replica_id_in_sync_group()); });
    std::vector<int> expected(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r)
      expected[static_cast<std::size_t>(r)] = r;
    CHECK(ids.values() == expected);
  }
  const value_context standard;
  CHECK(standard.replica_id_in_sync_group() == 0);
  CHECK(standard.num_replicas_in_sync() == 1);
}
