// Logical cores of the pod strategy (TF's logical_core, model parallelism
// inside a replica) on the virtual CPU devices of one process: a two-stage
// MLP split over two cores per replica against the same model on
// mirrored_strategy, the placement of tensors and variables under
// experimental_logical_device, parts that run on a core's own thread, and
// every error.

#include "lockstep/lockstep.hpp"

#include "test_support.hpp"

#include "pod_support.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace lockstep;
using namespace std::chrono_literals;

namespace {

/// Rows of 2 features and a target, deterministic: 20 steps of 8 rows.
dataset<tensor> mlp_rows() {
  std::vector<float> values;
  for (int i = 0; i < 160; ++i) {
    const float x0 = static_cast<float>(i % 7) / 7.0f - 0.4f;
    const float x1 = static_cast<float>(i % 5) / 5.0f - 0.5f;
    values.insert(values.end(), {x0, x1, 0.8f * x0 * x0 - 0.6f * x1 + 0.1f});
  }
  return dataset<tensor>::from_tensor_slices(tensor::from(values, {160, 3})).batch(8, true);
}

constexpr std::int64_t inputs = 2;
constexpr std::int64_t hidden = 4;
constexpr float learning_rate = 0.2f;

/// What stage 2 (the output layer and the loss) hands back to stage 1.
struct stage_two {
  tensor dw2;  ///< [hidden, 1], on stage 2's core
  tensor dh;   ///< [n, hidden], the gradient of the hidden activations
  float loss = 0;
  device_spec device;            ///< where stage 2 ran
  std::thread::id thread;        ///< on which thread
  std::thread::id replica_thread; ///< the replica's own thread, in the same step
  bool copy_on_its_core = false; ///< the replica's copy of w2 was there
};

/// Stage 2 on the current device: y = h w2, the mean squared error against
/// `targets`, and its gradients. `h` comes from another core: it is copied
/// here first.
stage_two output_layer(const variable& w2, const tensor& h_elsewhere,
                       const std::vector<float>& targets) {
  stage_two out;
  out.device = current_device();
  out.thread = std::this_thread::get_id();
  const auto h_tensor = h_elsewhere.to(current_device());
  const auto w2_value = w2.read_value();
  out.copy_on_its_core = w2_value.device() == current_device();
  const auto h = floats(h_tensor);
  const auto w = floats(w2_value);
  const auto n = static_cast<std::int64_t>(targets.size());
  std::vector<float> dw2(hidden, 0.0f);
  std::vector<float> dh(static_cast<std::size_t>(n * hidden));
  for (std::int64_t i = 0; i < n; ++i) {
    float y = 0;
    for (std::int64_t j = 0; j < hidden; ++j)
      y += h[i * hidden + j] * w[j];
    const float error = y - targets[i];
    out.loss += error * error / static_cast<float>(n);
    const float dy = 2.0f * error / static_cast<float>(n);
    for (std::int64_t j = 0; j < hidden; ++j) {
      dw2[j] += h[i * hidden + j] * dy;
      dh[i * hidden + j] = dy * w[j];
    }
  }
  out.dw2 = tensor::from(dw2, {hidden, 1});
  out.dh = tensor::from(dh, {n, hidden});
  return out;
}

/// Every copy of both layers after training, the losses, and where the
/// replicas' stage 2 ran.
struct trained {
  std::vector<std::vector<float>> w1;
  std::vector<std::vector<float>> w2;
  std::vector<device_spec> w1_devices;
  std::vector<device_spec> w2_devices;
  std::vector<float> losses;
  std::vector<device_spec> stage_two_devices; ///< of the last step, replica order
  std::vector<std::thread::id> stage_two_threads;
  std::vector<std::thread::id> replica_threads; ///< of the last step
  std::vector<std::thread::id> w2_copy_threads; ///< where w2's copies apply writes
  bool copies_on_their_cores = true;
};

/// 20 steps of plain SGD on a 2-4-1 MLP (ReLU): layer 1's weights are
/// created under logical core 0, layer 2's under `second_core`; each
/// replica runs layer 1 itself, layer 2 and the loss as a part on
/// `second_core`, then layer 1's backward pass; a merge_call reduces both
/// gradients (MEAN) onto the weights' copies and updates them.
trained train(const strategy& s, std::size_t second_core) {
  auto scope = s.scope();
  const auto& ext = s.extended();
  std::vector<float> w1_init;
  for (std::int64_t k = 0; k < inputs * hidden; ++k)
    w1_init.push_back(0.1f * static_cast<float>(k % 5) - 0.15f);
  auto w1 = [&] {
    auto core = ext.experimental_logical_device(0);
    return variable{tensor::from(w1_init, {inputs, hidden}), {.name = "w1"}};
  }();
  auto w2 = [&] {
    auto core = ext.experimental_logical_device(second_core);
    return variable{tensor::from<float>({0.3f, -0.2f, 0.25f, 0.1f}, {hidden, 1}),
                    {.name = "w2"}};
  }();
  trained out;
  auto it = s.experimental_distribute_dataset(mlp_rows()).make_iterator();
  std::vector<stage_two> last;
  while (auto batch = it.next()) {
    auto results = s.run(
      [&](replica_context& ctx, const tensor& rows) {
        // Stage 1, on the replica's own core 0.
        const auto data = floats(rows);
        const auto n = rows.shape()[0];
        const auto w = floats(w1.read_value());
        std::vector<float> z(static_cast<std::size_t>(n * hidden), 0.0f);
        std::vector<float> h(z.size());
        std::vector<float> targets;
        for (std::int64_t i = 0; i < n; ++i) {
          targets.push_back(data[i * 3 + 2]);
          for (std::int64_t j = 0; j < hidden; ++j) {
            for (std::int64_t a = 0; a < inputs; ++a)
              z[i * hidden + j] += data[i * 3 + a] * w[a * hidden + j];
            h[i * hidden + j] = z[i * hidden + j] > 0 ? z[i * hidden + j] : 0.0f;
          }
        }
        const auto h_tensor = tensor::from(h, {n, hidden});
        // Stage 2, on the replica's second core.
        auto two = ctx.experimental_logical_device(
          second_core, [&w2, h_tensor, targets] { return output_layer(w2, h_tensor, targets); });
        // Stage 1's backward pass, with stage 2's gradient brought back.
        const auto dh = floats(two.dh.to(current_device()));
        std::vector<float> dw1(static_cast<std::size_t>(inputs * hidden), 0.0f);
        for (std::int64_t i = 0; i < n; ++i)
          for (std::int64_t j = 0; j < hidden; ++j)
            if (z[i * hidden + j] > 0)
              for (std::int64_t a = 0; a < inputs; ++a)
                dw1[a * hidden + j] += data[i * 3 + a] * dh[i * hidden + j];
        const auto loss = ctx.all_reduce(reduce_op::mean, tensor::scalar(two.loss));
        ctx.merge_call(
          [&](strategy& st, const per_replica<tensor>& g1, const per_replica<tensor>& g2) {
            const auto sgd = [](tensor& value, const tensor& gradient) {
              auto v = value.data<float>();
              const auto g = gradient.data<float>();
              for (std::size_t k = 0; k < v.size(); ++k)
                v[k] -= learning_rate * g[k];
            };
            st.extended().update(w1, sgd, st.extended().reduce_to(reduce_op::mean, g1, w1));
            st.extended().update(w2, sgd, st.extended().reduce_to(reduce_op::mean, g2, w2));
          },
          tensor::from(dw1, {inputs, hidden}), two.dw2.to(current_device()));
        two.loss = loss.at<float>(0);
        two.replica_thread = std::this_thread::get_id();
        return two;
      },
      *batch);
    out.losses.push_back(results.primary().loss);
    for (const auto& r : results.values())
      out.copies_on_their_cores = out.copies_on_their_cores && r.copy_on_its_core;
    last = results.values();
  }
  for (const auto& r : last) {
    out.stage_two_devices.push_back(r.device);
    out.stage_two_threads.push_back(r.thread);
    out.replica_threads.push_back(r.replica_thread);
  }
  out.w2_copy_threads
    = ext.update(ungrouped, w2, [](tensor&) { return std::this_thread::get_id(); });
  for (const auto& copy : w1.values())
    out.w1.push_back(floats(copy.read_value()));
  for (const auto& copy : w2.values())
    out.w2.push_back(floats(copy.read_value()));
  out.w1_devices = w1.devices();
  out.w2_devices = w2.devices();
  return out;
}

} // namespace

TEST_CASE("a two-stage MLP over 2 replicas x 2 logical cores trains exactly as on "
          "mirrored_strategy") {
  auto pod = two_by_two();
  const auto& assignment = pod.device_assignment();
  REQUIRE(assignment.num_cores_per_replica() == 2);
  CHECK(assignment.device(0, 0).canonical() == cpu_device(0).canonical());
  CHECK(assignment.device(0, 1).canonical() == cpu_device(1).canonical());
  CHECK(assignment.device(1, 0).canonical() == cpu_device(2).canonical());
  CHECK(assignment.device(1, 1).canonical() == cpu_device(3).canonical());
  CHECK(pod.extended().worker_devices() == canonical_cpus({0, 2}));
  CHECK(pod.num_replicas_per_host() == 2);

  const auto on_pod = train(pod, 1);
  const auto on_mirrored = train(mirrored_strategy{canonical_cpus({0, 2})}, 0);
  CHECK(on_pod.losses.size() == 20);
  CHECK(on_pod.losses == on_mirrored.losses);
  CHECK(on_pod.w1 == on_mirrored.w1);
  CHECK(on_pod.w2 == on_mirrored.w2);
  CHECK(on_pod.w1[0] == on_pod.w1[1]);
  CHECK(on_pod.w2[0] == on_pod.w2[1]);
  CHECK(on_pod.losses.back() < on_pod.losses.front());

  // Layer 1 on core 0 of each replica, layer 2 on core 1: one copy per
  // replica on that core (TF's TPUMirroredVariable).
  CHECK(on_pod.w1_devices == canonical_cpus({0, 2}));
  CHECK(on_pod.w2_devices == canonical_cpus({1, 3}));
  CHECK(on_mirrored.w1_devices == canonical_cpus({0, 2}));
  CHECK(on_mirrored.w2_devices == canonical_cpus({0, 2}));
  CHECK(on_pod.copies_on_their_cores);
  CHECK(on_mirrored.copies_on_their_cores);

  // Stage 2 ran on core 1's device, on that device's executor: the thread
  // that applies the writes of w2's copy there, not the replica's.
  CHECK(on_pod.stage_two_devices == canonical_cpus({1, 3}));
  CHECK(on_pod.stage_two_threads == on_pod.w2_copy_threads);
  for (std::size_t r = 0; r < 2; ++r)
    CHECK(on_pod.stage_two_threads[r] != on_pod.replica_threads[r]);
  CHECK(on_pod.stage_two_threads[0] != on_pod.stage_two_threads[1]);
  // On mirrored_strategy, core 0 is the replica itself: its own thread.
  CHECK(on_mirrored.stage_two_devices == canonical_cpus({0, 2}));
  CHECK(on_mirrored.stage_two_threads == on_mirrored.replica_threads);
}

TEST_CASE("experimental_logical_device places tensors and variables on a logical core") {
  auto pod = two_by_two();
  auto scope = pod.scope();
  const auto& ext = pod.extended();

  SUBCASE("cross-replica context: variables on that core of every replica") {
    variable on_zero{tensor::scalar(1.0f)};
    CHECK(on_zero.devices() == canonical_cpus({0, 2}));
    {
      auto core = ext.experimental_logical_device(1);
      variable on_one{tensor::scalar(2.0f)};
      CHECK(on_one.devices() == canonical_cpus({1, 3}));
      for (const auto& copy : on_one.values())
        CHECK(copy.read_value().at<float>(0) == 2.0f);
      CHECK(on_one.values()[1].read_value().device() == cpu_device(3).canonical());
      {
        auto back = ext.experimental_logical_device(0);
        CHECK(variable{tensor::scalar(3.0f)}.devices() == canonical_cpus({0, 2}));
      }
      CHECK(variable{tensor::scalar(4.0f)}.devices() == canonical_cpus({1, 3}));
    }
    CHECK(variable{tensor::scalar(5.0f)}.devices() == canonical_cpus({0, 2}));
  }

  SUBCASE("replica context: the replica's core is the current device; variables go to that "
          "core of every replica") {
    const auto seen = pod.run([&](replica_context& ctx) {
      const auto own = current_device();
      std::vector<device_spec> devices;
      variable created = [&] {
        auto core = ext.experimental_logical_device(1);
        devices.push_back(current_device());
        devices.push_back(tensor::scalar(1.0f).device());
        return variable{tensor::scalar(6.0f), {.name = "inside"}};
      }();
      devices.push_back(current_device());
      CHECK(current_device() == own);
      CHECK(created.devices() == canonical_cpus({1, 3}));
      CHECK(created.read_value().device() == devices[0]);
      CHECK(ctx.devices() == std::vector<device_spec>{own});
      return devices;
    });
    CHECK(seen.values()[0] == canonical_cpus({1, 1, 0}));
    CHECK(seen.values()[1] == canonical_cpus({3, 3, 2}));
  }
}

TEST_CASE("outside the pod strategy, its logical device scope places nothing") {
  auto pod = two_by_two();
  const auto before = current_device();
  auto core = pod.extended().experimental_logical_device(1);
  CHECK(current_device() == before);
  const variable plain{tensor::scalar(1.0f)}; // the default strategy's
  CHECK(plain.devices() == std::vector<device_spec>{before});
}

TEST_CASE("a part on logical core 0 of the pod runs on core 0's executor, not the replica's "
          "thread") {
  auto pod = two_by_two();
  auto scope = pod.scope();
  const auto seen = pod.run([](replica_context& ctx) {
    const auto replica_thread = std::this_thread::get_id();
    const auto own = current_device();
    const auto part = ctx.experimental_logical_device(0, [] {
      return std::make_pair(std::this_thread::get_id(), current_device());
    });
    CHECK(part.first != replica_thread);
    CHECK(part.second == own);
    int calls = 0;
    ctx.experimental_logical_device(1, [&calls] { ++calls; }); // fn returning nothing
    CHECK(calls == 1);
    return part.second;
  });
  CHECK(seen.values() == canonical_cpus({0, 2}));
}

TEST_CASE("an exception thrown on another logical core reaches the replica function") {
  auto pod = two_by_two();
  auto scope = pod.scope();
  const auto caught = pod.run([](replica_context& ctx) {
    try {
      ctx.experimental_logical_device(1, []() -> int {
        throw type_error("stage 2 failed on " + current_device().to_string());
      });
    } catch (const type_error& e) {
      return std::string{e.what()};
    }
    return std::string{"nothing was thrown"};
  });
  CHECK(caught.values()[0] == "stage 2 failed on /job:localhost/replica:0/task:0/device:CPU:1");
  CHECK(caught.values()[1] == "stage 2 failed on /job:localhost/replica:0/task:0/device:CPU:3");
  // Left uncaught, it leaves run with its type; the strategy stays usable.
  CHECK(error_of<type_error>([&] {
          pod.run([](replica_context& ctx) {
            ctx.experimental_logical_device(1, [] { throw type_error("from core 1"); });
          });
        })
        == "from core 1");
  const auto after = pod.run([](replica_context& ctx) {
    return ctx.experimental_logical_device(1, [] { return 7; });
  });
  CHECK(after.values() == std::vector<int>{7, 7});
}

TEST_CASE("a part that outlives the strategy's timeout: timeout_error naming replica and core") {
  const auto saved = get_runtime_options();
  auto quick = saved;
  quick.timeout = 200ms;
  set_runtime_options(quick);
  auto pod = two_by_two();
  set_runtime_options(saved);
  std::promise<void> release;
  const std::shared_future<void> released = release.get_future().share();
  const auto message = error_of<timeout_error>([&] {
    pod.run(run_options{.timeout = 60s}, [released](replica_context& ctx) {
      if (ctx.replica_id_in_sync_group() == 1)
        return; // replica 1 needs no core 1 here
      ctx.experimental_logical_device(1, [released] { released.wait(); });
    });
  });
  release.set_value();
  CHECK(message
        == "pod_strategy(/job:localhost/replica:0/task:0/device:CPU:0, "
           "/job:localhost/replica:0/task:0/device:CPU:2): replica 0 "
           "(/job:localhost/replica:0/task:0/device:CPU:0): its part on logical core 1 "
           "(/job:localhost/replica:0/task:0/device:CPU:1) did not finish within 200 ms");
  // Core 1 runs the next part once the late one has ended.
  const auto after = pod.run([](replica_context& ctx) {
    return ctx.experimental_logical_device(1, [] { return current_device(); });
  });
  CHECK(after.values() == canonical_cpus({1, 3}));
}

TEST_CASE("logical device ids out of range: TF's error, for every strategy") {
  const auto text = [](int id, int cores) {
    return "`logical_device_id` not in range (was " + std::to_string(id)
           + ", but there are only " + std::to_string(cores) + " logical devices per replica).";
  };
  SUBCASE("the pod: 2 logical cores per replica") {
    auto pod = two_by_two();
    auto scope = pod.scope();
    CHECK(error_of<value_error>([&] { (void) pod.extended().experimental_logical_device(2); })
          == text(2, 2));
    CHECK(error_of<value_error>([&] {
            pod.run([](replica_context& ctx) { ctx.experimental_logical_device(5, [] {}); });
          })
          == text(5, 2));
    CHECK(error_of<value_error>([&] {
            pod.run([&](replica_context&) {
              (void) pod.extended().experimental_logical_device(2);
            });
          })
          == text(2, 2));
  }
  SUBCASE("a pod of one logical core per replica") {
    pod_strategy pod{pod_topology::from_devices(cpu_devices(2))};
    CHECK(error_of<value_error>([&] { (void) pod.extended().experimental_logical_device(1); })
          == text(1, 1));
  }
  SUBCASE("mirrored_strategy: core 0 is a scope that changes nothing") {
    mirrored_strategy mirrored{cpu_devices(2)};
    auto scope = mirrored.scope();
    const auto& ext = mirrored.extended();
    CHECK(error_of<value_error>([&] { (void) ext.experimental_logical_device(1); })
          == text(1, 1));
    {
      auto core = ext.experimental_logical_device(0);
      CHECK(variable{tensor::scalar(1.0f)}.devices() == canonical_cpus({0, 1}));
    }
    const auto devices = mirrored.run([&](replica_context& ctx) {
      auto core = ext.experimental_logical_device(0);
      const auto here = std::this_thread::get_id();
      CHECK(ctx.experimental_logical_device(0, [] { return std::this_thread::get_id(); })
            == here);
      CHECK(error_of<value_error>([&] { ctx.experimental_logical_device(1, [] {}); })
            == text(1, 1));
      return current_device();
    });
    CHECK(devices.values() == canonical_cpus({0, 1}));
  }
  SUBCASE("the default strategy") {
    const auto& ext = get_strategy().extended();
    const auto before = current_device();
    {
      auto core = ext.experimental_logical_device(0);
      CHECK(current_device() == before);
    }
    CHECK(error_of<value_error>([&] { (void) ext.experimental_logical_device(3); })
          == text(3, 1));
    auto* ctx = get_replica_context();
    REQUIRE(ctx != nullptr);
    CHECK(ctx->experimental_logical_device(0, [] { return 3; }) == 3);
    CHECK(error_of<value_error>([&] { ctx->experimental_logical_device(1, [] {}); })
          == text(1, 1));
  }
}
