// Checkpoints of distributed variables with TF's rules (spec §4.2), with 2
// and 3 replicas on virtual CPU devices: a mirrored variable saves its
// primary and restores to every copy; a sync-on-read variable saves its
// aggregate (its primary for NONE) and restores SUM divided among the
// copies, any other aggregation copied to each. Also: a checkpoint of 2
// replicas restored into 3, a restore ordered after pending updates, a
// manager in a mirrored scope, and save / restore in a replica function.
// Every copy is checked through its component handle. Suite 'replicas'.

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include "file_support.hpp"
#include "test_support.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "io/safetensors.hpp"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

/// The prefix of this test's temporary directories.
constexpr std::string_view directory_prefix = "lockstep_checkpoint_mirrored_test";

const std::vector<int> world_sizes{2, 3};

variable_options on_read(std::string name, variable_aggregation aggregation) {
  return {.name = std::move(name),
          .synchronization = variable_synchronization::on_read,
          .aggregation = aggregation};
}

// Each replica r assigns value_of(r) to its own copy of `v`.
template <class F>
void write_each_replica(const strategy& s, const variable& v, F value_of) {
  s.run([&](replica_context& ctx) { v.assign(value_of(ctx.replica_id_in_sync_group())); });
}

// Every copy of `v` holds `expected`.
void check_copies(const variable& v, const tensor& expected) {
  const auto copies = v.values();
  for (std::size_t i = 0; i < copies.size(); ++i) {
    CAPTURE(i);
    CHECK(copies[i].value() == expected);
  }
}

// The tensor the checkpoint at `path` holds under `name`.
tensor saved(const fs::path& path, const std::string& name) {
  return detail::read_safetensors(path).tensors.at(name);
}

// "r + 1" for replica r, as a float tensor [r + 1, 10 (r + 1)].
tensor replica_value(std::size_t r) {
  const auto x = static_cast<float>(r + 1);
  return tensor::from<float>({x, 10 * x});
}

} // namespace

TEST_CASE("a mirrored variable saves its primary and restores to every copy") {
  for (int n : world_sizes) {
    CAPTURE(n);
    temporary_directory dir{directory_prefix};
    const auto path = dir.path() / "model.safetensors";
    mirrored_strategy s{cpu_devices(n)};
    auto scope = s.scope();
    variable w{tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3}), {.name = "w"}};
    variable k{tensor::from<std::int64_t>({-7, 7}), {.name = "k"}};
    REQUIRE(w.values().size() == static_cast<std::size_t>(n));
    // Make the copies differ, so the file shows which one was saved.
    for (int i = 1; i < n; ++i) {
      w.values()[i].assign(tensor::filled(dtype::f32, {2, 3}, 100.0 * i));
      k.values()[i].assign(tensor::from<std::int64_t>({i, i}));
    }
    save(path, {w, k}, 4);
    CHECK(saved(path, "w") == tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
    CHECK(saved(path, "k") == tensor::from<std::int64_t>({-7, 7}));

    // Into fresh variables, and back into the diverged ones.
    variable w2{tensor::zeros(dtype::f32, {2, 3}), {.name = "w"}};
    variable k2{tensor::zeros(dtype::i64, {2}), {.name = "k"}};
    const auto info = restore(path, {w2, k2});
    CHECK(info.step == 4);
    CHECK(info.metadata.at("replicas") == std::to_string(n));
    CHECK(info.metadata.at("strategy") == s.to_string());
    restore(path, {w, k});
    for (const auto& v : {w, w2})
      check_copies(v, tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
    for (const auto& v : {k, k2})
      check_copies(v, tensor::from<std::int64_t>({-7, 7}));
  }
}

TEST_CASE("a SUM sync-on-read variable saves the sum and restores it divided among the copies") {
  for (int n : world_sizes) {
    CAPTURE(n);
    temporary_directory dir{directory_prefix};
    const auto path = dir.path() / "model.safetensors";
    mirrored_strategy s{cpu_devices(n)};
    auto scope = s.scope();
    variable total{tensor::zeros(dtype::f32, {2}), on_read("total", variable_aggregation::sum)};
    write_each_replica(s, total, replica_value);
    // 1 + 2 + ... + n
    const auto sum = static_cast<float>(n * (n + 1) / 2);
    const auto expected_sum = tensor::from<float>({sum, 10 * sum});
    REQUIRE(total.value() == expected_sum);
    save(path, {total}, 1);
    CHECK(saved(path, "total") == expected_sum);

    variable fresh{tensor::zeros(dtype::f32, {2}), on_read("total", variable_aggregation::sum)};
    restore(path, {fresh});
    restore(path, {total});
    const auto share = sum / static_cast<float>(n); // exact: 1.5 and 2
    for (const auto& v : {fresh, total}) {
      check_copies(v, tensor::from<float>({share, 10 * share}));
      CHECK(v.value() == expected_sum);
    }
  }
}

TEST_CASE("MEAN, ONLY_FIRST_REPLICA and NONE sync-on-read variables restore the value to each copy") {
  for (int n : world_sizes) {
    CAPTURE(n);
    temporary_directory dir{directory_prefix};
    const auto path = dir.path() / "model.safetensors";
    mirrored_strategy s{cpu_devices(n)};
    auto scope = s.scope();
    variable mean{tensor::zeros(dtype::f32, {2}), on_read("mean", variable_aggregation::mean)};
    variable first{tensor::zeros(dtype::f32, {2}),
                   on_read("first", variable_aggregation::only_first_replica)};
    variable none{tensor::zeros(dtype::f32, {2}), on_read("none", variable_aggregation::none)};
    for (const auto& v : {mean, first, none})
      write_each_replica(s, v, replica_value);
    save(path, {mean, first, none}, 1);

    // The mean of 1..n is (n + 1) / 2: 1.5 or 2, exactly.
    const auto average = static_cast<float>(n + 1) / 2;
    const auto expected_mean = tensor::from<float>({average, 10 * average});
    CHECK(saved(path, "mean") == expected_mean);
    CHECK(saved(path, "first") == replica_value(0));
    CHECK(saved(path, "none") == replica_value(0)); // the primary

    variable mean2{tensor::zeros(dtype::f32, {2}), on_read("mean", variable_aggregation::mean)};
    variable first2{tensor::zeros(dtype::f32, {2}),
                    on_read("first", variable_aggregation::only_first_replica)};
    variable none2{tensor::zeros(dtype::f32, {2}), on_read("none", variable_aggregation::none)};
    restore(path, {mean2, first2, none2});
    restore(path, {mean, first, none});
    for (const auto& v : {mean, mean2}) {
      check_copies(v, expected_mean);
      CHECK(v.value() == expected_mean);
    }
    for (const auto& v : {first, first2, none, none2})
      check_copies(v, replica_value(0));
    CHECK(first2.value() == replica_value(0));
  }
}

TEST_CASE_TEMPLATE("an integer SUM sync-on-read variable restores the sum divided, truncated",
                   T, std::int32_t, std::int64_t) {
  for (int n : world_sizes) {
    CAPTURE(n);
    temporary_directory dir{directory_prefix};
    const auto path = dir.path() / "model.safetensors";
    mirrored_strategy s{cpu_devices(n)};
    auto scope = s.scope();
    const auto type = tensor::scalar<T>(0).dtype();
    variable count{tensor::zeros(type, {3}), on_read("count", variable_aggregation::sum)};
    // Replica r holds [6 (r + 1), -(r + 1), r + 1].
    write_each_replica(s, count, [](std::size_t r) {
      const auto x = static_cast<T>(r + 1);
      return tensor::from<T>({T(6) * x, -x, x});
    });
    const T sum = static_cast<T>(n * (n + 1) / 2); // 3 or 6
    const auto expected_sum = tensor::from<T>({T(6) * sum, static_cast<T>(-sum), sum});
    save(path, {count}, 1);
    CHECK(saved(path, "count") == expected_sum);

    variable fresh{tensor::zeros(type, {3}), on_read("count", variable_aggregation::sum)};
    restore(path, {fresh});
    // TF casts sum / n back to the dtype, truncating toward zero: with two
    // replicas -3 / 2 is -1 and 3 / 2 is 1 on each copy.
    const T nn = static_cast<T>(n);
    const auto share = tensor::from<T>({T(6) * sum / nn, static_cast<T>(-sum / nn), sum / nn});
    check_copies(fresh, share);
    const auto read_back = tensor::from<T>({T(6) * sum / nn * nn, static_cast<T>(-sum / nn * nn),
                                            sum / nn * nn});
    CHECK(fresh.value() == read_back);
    if (n == 3)
      CHECK(fresh.value() == expected_sum); // divisible: exact
    else
      CHECK(fresh.value() == tensor::from<T>({18, -2, 2}));
  }
}

TEST_CASE("a checkpoint of two replicas restores into three") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "model.safetensors";
  std::string two_replicas;
  {
    mirrored_strategy s{cpu_devices(2)};
    two_replicas = s.to_string();
    auto scope = s.scope();
    variable w{tensor::from<double>({0.5, -0.25}), {.name = "w"}};
    variable total{tensor::zeros(dtype::f32, {}), on_read("total", variable_aggregation::sum)};
    variable mean{tensor::zeros(dtype::f32, {}), on_read("mean", variable_aggregation::mean)};
    // Copies 1.5 and 4.5: sum 6, mean 3.
    write_each_replica(s, total, [](std::size_t r) { return tensor::scalar(r == 0 ? 1.5f : 4.5f); });
    write_each_replica(s, mean, [](std::size_t r) { return tensor::scalar(r == 0 ? 1.5f : 4.5f); });
    save(path, {w, total, mean}, 8);
  }
  mirrored_strategy s{cpu_devices(3)};
  auto scope = s.scope();
  variable w{tensor::zeros(dtype::f64, {2}), {.name = "w"}};
  variable total{tensor::zeros(dtype::f32, {}), on_read("total", variable_aggregation::sum)};
  variable mean{tensor::zeros(dtype::f32, {}), on_read("mean", variable_aggregation::mean)};
  const auto info = restore(path, {w, total, mean});
  CHECK(info.step == 8);
  CHECK(info.metadata.at("replicas") == "2");
  CHECK(info.metadata.at("strategy") == two_replicas);
  REQUIRE(w.values().size() == 3);
  check_copies(w, tensor::from<double>({0.5, -0.25}));
  check_copies(total, tensor::scalar(2.0f)); // 6 / 3
  CHECK(total.value() == tensor::scalar(6.0f));
  check_copies(mean, tensor::scalar(3.0f));
  CHECK(mean.value() == tensor::scalar(3.0f));
}

TEST_CASE("restore applies after the updates posted before it, and before those after it") {
  for (int n : world_sizes) {
    CAPTURE(n);
    temporary_directory dir{directory_prefix};
    const auto path = dir.path() / "model.safetensors";
    mirrored_strategy s{cpu_devices(n)};
    auto scope = s.scope();
    variable w{tensor::from<float>({1, 2}), {.name = "w"}};
    variable total{tensor::from<float>({3, 3}), on_read("total", variable_aggregation::sum)};
    save(path, {w, total}, 1); // total holds 3 on each copy: the file holds 3n
    CHECK(saved(path, "total") == tensor::filled(dtype::f32, {2}, 3.0 * n));

    std::atomic<int> calls{0};
    // Slow updates, so the restore is posted while they are still queued.
    auto slow_scale = [&calls](tensor& value) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      scale_into(value, 100);
      ++calls;
    };
    s.extended().update(w, slow_scale);
    s.extended().update(total, slow_scale);
    restore(path, {w, total});
    s.extended().update(w, [](tensor& value) { add_into(value, tensor::from<float>({1, 1})); });

    check_copies(w, tensor::from<float>({2, 3}));
    check_copies(total, tensor::from<float>({3, 3}));
    s.extended().synchronize();
    CHECK(calls.load() == 2 * n); // the updates ran, on every copy, and were overwritten
  }
}

TEST_CASE("checkpoint_manager in a mirrored scope saves and restores distributed variables") {
  temporary_directory dir{directory_prefix};
  mirrored_strategy s{cpu_devices(3)};
  auto scope = s.scope();
  checkpoint_manager manager{dir.path(), 2}; // the scope's strategy, which checkpoints
  variable w{tensor::from<float>({1, 2}), {.name = "w"}};
  variable total{tensor::zeros(dtype::f32, {2}), on_read("total", variable_aggregation::sum)};
  write_each_replica(s, total, replica_value); // sum [6, 60]
  for (std::int64_t step = 1; step <= 3; ++step)
    REQUIRE(manager.save({w, total}, step).has_value());
  CHECK(manager.checkpoints().size() == 2);

  w.assign(tensor::from<float>({0, 0}));
  total.assign(tensor::from<float>({0, 0}));
  const auto info = manager.restore_latest({w, total});
  REQUIRE(info.has_value());
  CHECK(info->step == 3);
  check_copies(w, tensor::from<float>({1, 2}));
  check_copies(total, tensor::from<float>({2, 20}));
}

TEST_CASE("save and restore in a replica function are context errors") {
  for (int n : world_sizes) {
    CAPTURE(n);
    temporary_directory dir{directory_prefix};
    const auto path = dir.path() / "model.safetensors";
    mirrored_strategy s{cpu_devices(n)};
    auto scope = s.scope();
    variable w{tensor::from<float>({1, 2}), {.name = "w"}};
    CHECK_THROWS_AS(s.run([&] { save(path, {w}, 1); }), context_error);
    CHECK_FALSE(fs::exists(path));

    save(path, {w}, 1);
    w.assign(tensor::from<float>({5, 6}));
    CHECK_THROWS_AS(s.run([&] { restore(path, {w}); }), context_error);
    check_copies(w, tensor::from<float>({5, 6}));
  }
}
