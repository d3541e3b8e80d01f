// Checkpoints of the pod strategy whose variables live on logical cores
// other than 0 (TF's TPUMirroredVariable under a logical_device scope): a
// pod of 2 replicas x 2 logical cores on 4 virtual CPU devices saves each
// variable's primary copy and restores it to every copy, each on its own
// core (a SUM sync-on-read variable its sum, divided among the copies on
// restore); a checkpoint moves between the pod and mirrored_strategy over 2
// devices in both directions (restore matches variables by name, whatever
// the strategy); and training resumed from a checkpoint equals training
// that never stopped, bit for bit. Suite 'replicas'.

#include "lockstep/lockstep.hpp"

#include "pod_support.hpp"

#include <doctest/doctest.h>

#include "file_support.hpp"
#include "test_support.hpp"

#include "io/safetensors.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view directory_prefix = "lockstep_pod_checkpoint_test";
constexpr std::int64_t width = 4;
constexpr float learning_rate = 0.05f;

/// mirrored_strategy on the devices of the pod's core 0.
mirrored_strategy mirrored_pair() {
  return mirrored_strategy{{cpu_device(0).canonical(), cpu_device(2).canonical()}};
}

/// A two-stage model: `w1` under logical core 0; `w2`, its accumulated
/// gradient `w2_slot` (an optimizer slot, which steers the gradient) and
/// the step counter under `second_core` (1 on the pod; 0 on strategies of
/// one logical core, where the guard places nothing else).
struct model {
  variable w1;
  variable w2;
  variable w2_slot;
  variable steps;
};

/// The model's variables, created in `s`'s scope with distinct values.
model make_model(const strategy& s, std::size_t second_core, float shift = 0.0f) {
  auto scope = s.scope();
  const auto& ext = s.extended();
  auto w1 = [&] {
    auto core = ext.experimental_logical_device(0);
    return variable{tensor::from<float>({0.5f + shift, -0.25f, 0.75f, 0.125f}), {.name = "w1"}};
  }();
  auto core = ext.experimental_logical_device(second_core);
  return model{w1,
               variable{tensor::from<float>({0.3f, -0.2f, 0.25f + shift, 0.1f}), {.name = "w2"}},
               variable{tensor::zeros(dtype::f32, {width}), {.name = "w2/slot"}},
               variable{tensor::scalar<std::int64_t>(0), {.name = "steps"}}};
}

std::vector<variable> all(const model& m) { return {m.w1, m.w2, m.w2_slot, m.steps}; }

/// Replica r's input at `step`: deterministic, different per replica.
std::vector<float> input(std::int64_t step, std::size_t r) {
  std::vector<float> x;
  for (std::int64_t j = 0; j < width; ++j)
    x.push_back(0.1f * static_cast<float>(j + 1) + 0.05f * static_cast<float>(step)
                - 0.2f * static_cast<float>(r));
  return x;
}

/// What the part on the second core hands back.
struct stage_two {
  tensor dw2; ///< on the second core
  tensor dh;
};

/// Steps [first, last) of SGD: h = w1 * x on core 0; on the second core,
/// y = h * w2 against 1, its gradients plus half the slot; the merge
/// reduces them (MEAN), accumulates the slot and updates the weights.
void train(const strategy& s, const model& m, std::size_t second_core, std::int64_t first,
           std::int64_t last) {
  for (std::int64_t step = first; step < last; ++step) {
    s.run([&](replica_context& ctx) {
      const auto x = input(step, ctx.replica_id_in_sync_group());
      const auto w = floats(m.w1.read_value());
      std::vector<float> h(width);
      for (std::int64_t j = 0; j < width; ++j)
        h[j] = w[j] * x[j];
      const auto h_tensor = tensor::from(h, {width});
      auto two = ctx.experimental_logical_device(second_core, [&m, h_tensor] {
        const auto h = floats(h_tensor.to(current_device()));
        const auto v = floats(m.w2.read_value());
        const auto slot = floats(m.w2_slot.read_value());
        std::vector<float> dv(width), dh(width);
        for (std::int64_t j = 0; j < width; ++j) {
          const float error = h[j] * v[j] - 1.0f;
          dv[j] = 2.0f * error * h[j] + 0.5f * slot[j];
          dh[j] = 2.0f * error * v[j];
        }
        return stage_two{tensor::from(dv, {width}), tensor::from(dh, {width})};
      });
      const auto dh = floats(two.dh.to(current_device()));
      std::vector<float> dw1(width);
      for (std::int64_t j = 0; j < width; ++j)
        dw1[j] = dh[j] * x[j];
      ctx.merge_call(
        [&](strategy& st, const per_replica<tensor>& g1, const per_replica<tensor>& g2) {
          const auto sgd = [](tensor& value, const tensor& gradient) {
            auto v = value.data<float>();
            const auto g = gradient.data<float>();
            for (std::size_t k = 0; k < v.size(); ++k)
              v[k] -= learning_rate * g[k];
          };
          const auto accumulate = [](tensor& value, const tensor& gradient) {
            auto v = value.data<float>();
            const auto g = gradient.data<float>();
            for (std::size_t k = 0; k < v.size(); ++k)
              v[k] = 0.9f * v[k] + g[k];
          };
          auto& ext = st.extended();
          const auto reduced2 = ext.reduce_to(reduce_op::mean, g2, m.w2);
          ext.update(m.w1, sgd, ext.reduce_to(reduce_op::mean, g1, m.w1));
          ext.update(m.w2, sgd, reduced2);
          ext.update(m.w2_slot, accumulate, ext.reduce_to(reduce_op::mean, g2, m.w2_slot));
          ext.update(m.steps, [](tensor& value) { value.data<std::int64_t>()[0] += 1; });
        },
        tensor::from(dw1, {width}), two.dw2.to(current_device()));
    });
  }
}

/// Every copy of every variable, as tensors, in copy order.
std::vector<std::vector<tensor>> copies_of(const model& m) {
  std::vector<std::vector<tensor>> out;
  for (const auto& v : all(m)) {
    out.emplace_back();
    for (const auto& copy : v.values())
      out.back().push_back(copy.read_value());
  }
  return out;
}

/// Every copy of `v` holds `expected` and lies on `devices`, in order.
void check_copies(const variable& v, const tensor& expected,
                  const std::vector<device_spec>& devices) {
  const auto name = v.name();
  CAPTURE(name);
  CHECK(v.devices() == devices);
  const auto copies = v.values();
  REQUIRE(copies.size() == devices.size());
  for (std::size_t i = 0; i < copies.size(); ++i) {
    CAPTURE(i);
    const auto value = copies[i].read_value();
    CHECK(value == expected);
    CHECK(value.device().canonical() == devices[i]);
  }
}

tensor saved(const fs::path& path, const std::string& name) {
  return detail::read_safetensors(path).tensors.at(name);
}

/// The pod's placement: core 0 on devices 0 and 2, core 1 on 1 and 3.
void check_pod_model(const model& m, const fs::path& path) {
  check_copies(m.w1, saved(path, "w1"), canonical_cpus({0, 2}));
  for (const auto& v : {m.w2, m.w2_slot, m.steps})
    check_copies(v, saved(path, v.name()), canonical_cpus({1, 3}));
}

} // namespace

TEST_CASE("a pod saves variables of logical cores 0 and 1 and restores every copy on its core") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "pod.safetensors";
  std::vector<std::vector<tensor>> trained;
  {
    auto pod = two_by_two();
    const auto m = make_model(pod, 1);
    train(pod, m, 1, 0, 3);
    trained = copies_of(m);
    for (const auto& copies : trained)
      CHECK(copies[0] == copies[1]);
    auto scope = pod.scope();
    save(path, all(m), 3);
    CHECK(saved(path, "steps") == tensor::scalar<std::int64_t>(3));
    CHECK(saved(path, "w1") == trained[0][0]);
    CHECK(saved(path, "w2") == trained[1][0]);
    CHECK(saved(path, "w2/slot") == trained[2][0]);
    CHECK_FALSE(saved(path, "w2") == tensor::from<float>({0.3f, -0.2f, 0.25f, 0.1f})); // trained
  }
  auto pod = two_by_two();
  const auto m = make_model(pod, 1, 1.0f);
  auto scope = pod.scope();
  const auto info = restore(path, all(m));
  CHECK(info.step == 3);
  CHECK(info.metadata.at("replicas") == "2");
  CHECK(info.metadata.at("strategy") == pod.to_string());
  check_pod_model(m, path);
  CHECK(copies_of(m) == trained);

  // checkpoint_manager in the pod's scope: the same.
  checkpoint_manager manager{dir.path() / "managed", 2};
  REQUIRE(manager.save(all(m), 3).has_value());
  const auto fresh = make_model(pod, 1, 2.0f);
  const auto latest = manager.restore_latest(all(fresh));
  REQUIRE(latest.has_value());
  CHECK(latest->step == 3);
  check_pod_model(fresh, path);
}

TEST_CASE("a pod checkpoint restores into mirrored_strategy over 2 devices, and back") {
  temporary_directory dir{directory_prefix};
  const auto from_pod = dir.path() / "from_pod.safetensors";
  const auto from_mirrored = dir.path() / "from_mirrored.safetensors";
  {
    auto pod = two_by_two();
    const auto m = make_model(pod, 1);
    train(pod, m, 1, 0, 3);
    auto scope = pod.scope();
    save(from_pod, all(m), 3);
  }
  {
    auto mirrored = mirrored_pair();
    const auto m = make_model(mirrored, 0, 1.0f);
    auto scope = mirrored.scope();
    restore(from_pod, all(m));
    for (const auto& v : all(m))
      check_copies(v, saved(from_pod, v.name()), canonical_cpus({0, 2}));
    // Trained on, it saves for the pod.
    train(mirrored, m, 0, 3, 5);
    save(from_mirrored, all(m), 5);
    CHECK(saved(from_mirrored, "steps") == tensor::scalar<std::int64_t>(5));
  }
  auto pod = two_by_two();
  const auto m = make_model(pod, 1, 2.0f);
  auto scope = pod.scope();
  const auto info = restore(from_mirrored, all(m));
  CHECK(info.step == 5);
  check_pod_model(m, from_mirrored);

  // The same 5 steps on the pod alone, without the trip through
  // mirrored_strategy, give the same bits (the pod's split model equals
  // the mirrored one, tests/pod_logical_test.cpp).
  const auto straight = make_model(pod, 1);
  train(pod, straight, 1, 0, 5);
  CHECK(copies_of(straight) == copies_of(m));
}

TEST_CASE("training resumed from a pod checkpoint equals training that never stopped") {
  temporary_directory dir{directory_prefix};
  std::vector<std::vector<tensor>> uninterrupted;
  {
    auto pod = two_by_two();
    const auto m = make_model(pod, 1);
    train(pod, m, 1, 0, 7);
    uninterrupted = copies_of(m);
  }
  {
    auto pod = two_by_two();
    const auto m = make_model(pod, 1);
    train(pod, m, 1, 0, 3);
    auto scope = pod.scope();
    checkpoint_manager manager{dir.path(), 2};
    REQUIRE(manager.save(all(m), 3).has_value());
    train(pod, m, 1, 3, 4); // a step past the checkpoint, lost in the "crash"
  }
  auto pod = two_by_two();
  const auto m = make_model(pod, 1, 1.0f);
  std::int64_t resumed_at = 0;
  {
    auto scope = pod.scope();
    checkpoint_manager manager{dir.path(), 2};
    const auto info = manager.restore_latest(all(m));
    REQUIRE(info.has_value());
    REQUIRE(info->step.has_value());
    resumed_at = *info->step;
  }
  CHECK(resumed_at == 3);
  train(pod, m, 1, resumed_at, 7);
  const auto resumed = copies_of(m);
  CHECK(resumed == uninterrupted);
  CHECK(resumed[3][0] == tensor::scalar<std::int64_t>(7));
  CHECK(m.w1.devices() == canonical_cpus({0, 2}));
  CHECK(m.w2.devices() == canonical_cpus({1, 3}));
}

TEST_CASE("a SUM sync-on-read variable under logical core 1 saves its sum and restores it "
          "divided among the copies on that core") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "pod.safetensors";
  const variable_options options{.name = "total",
                                 .synchronization = variable_synchronization::on_read,
                                 .aggregation = variable_aggregation::sum};
  const auto make_total = [&](const pod_strategy& pod) {
    auto scope = pod.scope();
    auto core = pod.extended().experimental_logical_device(1);
    return variable{tensor::zeros(dtype::f32, {2}), options};
  };
  {
    auto pod = two_by_two();
    const auto total = make_total(pod);
    CHECK(total.devices() == canonical_cpus({1, 3}));
    // Replica r's copy holds [r + 1, 10 (r + 1)]: the sum is [3, 30].
    pod.run([&](replica_context& ctx) {
      const auto x = static_cast<float>(ctx.replica_id_in_sync_group() + 1);
      total.assign(tensor::from<float>({x, 10 * x}));
    });
    auto scope = pod.scope();
    save(path, {total}, 1);
    CHECK(saved(path, "total") == tensor::from<float>({3, 30}));
  }
  auto pod = two_by_two();
  const auto total = make_total(pod);
  auto scope = pod.scope();
  restore(path, {total});
  check_copies(total, tensor::from<float>({1.5f, 15}), canonical_cpus({1, 3}));
  CHECK(total.value() == tensor::from<float>({3, 30}));
}
