// pod: what the pod strategy's host loops and logical cores cost, as ratios
// measured in one run.
//
// How it works. Each repetition times every arm once, the arms alternating
// (a, b, c, d, e, a, b, ...); the table shows each arm's median over the
// repetitions, and the targets are ratios of medians.
//
// (1) Host loops. 2 replicas on cpu_devices(2), an endless dataset of tiny
//     global batches (2 float32 rows, one per replica, batch(2, true) so
//     the pod's static-shape rule holds), a near-empty step function:
//
//   (a) pod_strategy with steps_per_run 1: `steps` calls of
//       experimental_run_steps_on_iterator, one step each;
//   (b) pod_strategy with steps_per_run 100 (--steps-per-run): the same
//       steps, 100 per call;
//   (c) mirrored_strategy over the same devices, its own multi-step loop
//       of 100 steps per call.
//
//   Each arm reads its own endless iterator for the whole run, prefetching
//   --prefetch steps (default: a whole call's). The figure is
//   microseconds per step. Targets: (b)/(a) <= 0.2 (the host
//   loop amortizes the dispatch) and (b)/(c) <= 1.1 (the pod's loop costs
//   what mirrored_strategy's does).
//
// (2) Logical cores. One replica of a two-layer MLP (784-128-10, ReLU,
//     squared error, plain SGD; the main job's layer sizes) on a global
//     batch of 32 rows:
//
//   (d) the replica split over 2 logical cores of cpu_devices(2): layer 1
//       on core 0 (the replica), layer 2 and the loss as a part on core 1
//       (replica_context::experimental_logical_device), the activations
//       and their gradient copied between the cores;
//   (e) the same code on a pod of 1 device, layer 2 run by the replica
//       itself.
//
//   The figure is microseconds per training step. Target: (d)/(e) <= 1.3
//   (what the hand-over between the cores costs).
//
// Only the public API is used, as an application would.

#include "lockstep/lockstep.hpp"

#include "bench_support.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using lockstep::bench::parse_count;
using lockstep::bench::parse_flags;
using lockstep::bench::parse_list;
using lockstep::bench::pin_to;
using lockstep::bench::summarize;
using lockstep::bench::summary;
using clock_type = std::chrono::steady_clock;

constexpr double loop_target = 0.2;     // (b)/(a)
constexpr double mirrored_target = 1.1; // (b)/(c)
constexpr double split_target = 1.3;    // (d)/(e)

// -- options ------------------------------------------------------------------

struct options {
  std::size_t steps = 2000;
  std::size_t steps_per_run = 100;
  std::size_t mlp_steps = 50;
  std::size_t reps = 7;
  std::size_t prefetch = 0; // 0: steps_per_run
  std::vector<std::size_t> cpus;
  std::string json;
};

constexpr std::string_view usage = R"(usage: pod [options]
  --steps N          steps timed per repetition of arms (a)-(c) (default 2000;
                     a multiple of --steps-per-run)
  --steps-per-run K  the host loop's steps per call in (b) and (c) (default 100)
  --mlp-steps N      training steps timed per repetition of (d) and (e) (default 50)
  --reps N           repetitions of each arm, interleaved (default 7)
  --prefetch N       input_options::prefetch_depth of the three iterators
                     (default: --steps-per-run, a whole call's steps ahead,
                     as TF's host loop enqueues a run of steps)
  --cpus LIST        run on these CPUs only (e.g. 0,1)
  --json FILE        also write {"rows": [...], "targets": [...]} to FILE
A short check: --steps 200 --mlp-steps 5 --reps 3
)";

options parse_options(int argc, char** argv) {
  options opts;
  parse_flags(argc, argv, usage, [&](std::string_view flag, std::string_view value) {
    if (flag == "--steps")
      opts.steps = parse_count(flag, value);
    else if (flag == "--steps-per-run")
      opts.steps_per_run = parse_count(flag, value);
    else if (flag == "--mlp-steps")
      opts.mlp_steps = parse_count(flag, value);
    else if (flag == "--reps")
      opts.reps = parse_count(flag, value);
    else if (flag == "--prefetch")
      opts.prefetch = parse_count(flag, value);
    else if (flag == "--cpus")
      opts.cpus = parse_list(flag, value, 0);
    else if (flag == "--json")
      opts.json = value;
    else
      return false;
    return true;
  });
  if (opts.steps % opts.steps_per_run != 0)
    throw std::invalid_argument("--steps " + std::to_string(opts.steps)
                                + " is not a multiple of --steps-per-run "
                                + std::to_string(opts.steps_per_run));
  if (opts.prefetch == 0)
    opts.prefetch = opts.steps_per_run;
  return opts;
}

double elapsed_us(clock_type::time_point since) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - since).count();
}

// -- (1) host loops -------------------------------------------------------------

lockstep::dataset<lockstep::tensor> tiny_batches() {
  return lockstep::dataset<lockstep::tensor>::from_tensor_slices(
           lockstep::tensor::from<float>({1.0f, 1.0f}, {2, 1}))
    .batch(2, true)
    .repeat();
}

/// `steps` steps in host loops of `per_call` steps on `s`, from `it` (one
/// endless iterator per arm for the whole run, its input actor already
/// going); us per step.
double host_loop_arm(const lockstep::strategy& s,
                     lockstep::distributed_iterator<lockstep::tensor>& it, std::size_t steps,
                     std::size_t per_call) {
  auto step = [](lockstep::replica_context&, lockstep::multi_step_context&,
                 const lockstep::tensor& mine) {
    if (mine.num_elements() < 0)
      throw std::logic_error("unreachable");
  };
  const auto start = clock_type::now();
  for (std::size_t done = 0; done < steps; done += per_call)
    if (s.extended().experimental_run_steps_on_iterator(step, it, per_call).steps() != per_call)
      throw std::runtime_error("the endless dataset ended");
  return elapsed_us(start) / static_cast<double>(steps);
}

// -- (2) the MLP on two logical cores or one device -----------------------------

constexpr std::int64_t batch_rows = 32;
constexpr std::int64_t inputs = 784;
constexpr std::int64_t hidden = 128;
constexpr std::int64_t outputs = 10;
constexpr float learning_rate = 0.01f;

std::vector<float> floats(const lockstep::tensor& t) {
  const auto d = t.data<float>();
  return {d.begin(), d.end()};
}

/// The model's weights, the batch, and the targets; deterministic.
struct mlp {
  std::vector<float> w1 = std::vector<float>(inputs * hidden);
  std::vector<float> w2 = std::vector<float>(hidden * outputs);
  std::vector<float> x = std::vector<float>(batch_rows * inputs);
  std::vector<float> y = std::vector<float>(batch_rows * outputs);

  mlp() {
    for (std::size_t k = 0; k < w1.size(); ++k)
      w1[k] = 0.01f * static_cast<float>(static_cast<int>(k % 11) - 5);
    for (std::size_t k = 0; k < w2.size(); ++k)
      w2[k] = 0.02f * static_cast<float>(static_cast<int>(k % 7) - 3);
    for (std::size_t k = 0; k < x.size(); ++k)
      x[k] = static_cast<float>(k % 13) / 13.0f;
    for (std::int64_t i = 0; i < batch_rows; ++i)
      y[static_cast<std::size_t>(i * outputs + i % outputs)] = 1.0f;
  }
};

/// Layer 2 and the loss on the current device: takes the activations h
/// ([batch, hidden], from wherever), updates w2, returns dh (here) and the
/// loss.
struct layer_two_result {
  lockstep::tensor dh;
  float loss = 0;
};

layer_two_result layer_two(mlp& model, const lockstep::tensor& h_elsewhere) {
  const auto h = floats(h_elsewhere.to(lockstep::current_device()));
  std::vector<float> dh(h.size(), 0.0f);
  std::vector<float> dw2(model.w2.size(), 0.0f);
  float loss = 0;
  for (std::int64_t i = 0; i < batch_rows; ++i)
    for (std::int64_t o = 0; o < outputs; ++o) {
      float out = 0;
      for (std::int64_t j = 0; j < hidden; ++j)
        out += h[i * hidden + j] * model.w2[j * outputs + o];
      const float error = out - model.y[i * outputs + o];
      loss += error * error / static_cast<float>(batch_rows);
      const float d = 2.0f * error / static_cast<float>(batch_rows);
      for (std::int64_t j = 0; j < hidden; ++j) {
        dw2[j * outputs + o] += h[i * hidden + j] * d;
        dh[i * hidden + j] += d * model.w2[j * outputs + o];
      }
    }
  for (std::size_t k = 0; k < dw2.size(); ++k)
    model.w2[k] -= learning_rate * dw2[k];
  return {lockstep::tensor::from(dh, {batch_rows, hidden}), loss};
}

/// One training step of the replica: layer 1 here, layer 2 on logical core
/// 1 when `split`, else here; then layer 1's backward pass.
float train_step(lockstep::replica_context& ctx, mlp& model, bool split) {
  std::vector<float> z(batch_rows * hidden, 0.0f);
  for (std::int64_t i = 0; i < batch_rows; ++i)
    for (std::int64_t a = 0; a < inputs; ++a) {
      const float xa = model.x[i * inputs + a];
      for (std::int64_t j = 0; j < hidden; ++j)
        z[i * hidden + j] += xa * model.w1[a * hidden + j];
    }
  std::vector<float> h(z.size());
  for (std::size_t k = 0; k < z.size(); ++k)
    h[k] = z[k] > 0 ? z[k] : 0.0f;
  const auto h_tensor = lockstep::tensor::from(h, {batch_rows, hidden});
  const auto two = split ? ctx.experimental_logical_device(
                             1, [&model, h_tensor] { return layer_two(model, h_tensor); })
                         : layer_two(model, h_tensor);
  const auto dh = floats(two.dh.to(lockstep::current_device()));
  for (std::int64_t i = 0; i < batch_rows; ++i)
    for (std::int64_t a = 0; a < inputs; ++a) {
      const float xa = model.x[i * inputs + a];
      for (std::int64_t j = 0; j < hidden; ++j)
        if (z[i * hidden + j] > 0)
          model.w1[a * hidden + j] -= learning_rate * xa * dh[i * hidden + j];
    }
  return two.loss;
}

/// `steps` training steps of one replica on `s`; us per step.
double mlp_arm(const lockstep::strategy& s, mlp& model, bool split, std::size_t steps) {
  const auto start = clock_type::now();
  for (std::size_t k = 0; k < steps; ++k)
    (void) s.run([&model, split](lockstep::replica_context& ctx) {
      return train_step(ctx, model, split);
    });
  return elapsed_us(start) / static_cast<double>(steps);
}

// -- targets and output ---------------------------------------------------------

using target = lockstep::bench::ratio_target;

std::string range_string(const summary& s) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "[%.2f-%.2f]", s.min, s.max);
  return buf;
}

struct arm_result {
  std::string name;
  std::string what;
  summary us_per_step;
};

void write_json(const std::string& path, const std::vector<arm_result>& arms,
                const std::vector<target>& targets, const options& opts) {
  nlohmann::json out;
  out["benchmark"] = "pod";
  out["reps"] = opts.reps;
  out["steps"] = opts.steps;
  out["steps_per_run"] = opts.steps_per_run;
  out["mlp_steps"] = opts.mlp_steps;
  out["prefetch_depth"] = opts.prefetch;
  out["rows"] = nlohmann::json::array();
  for (const auto& a : arms)
    out["rows"].push_back({{"arm", a.name},
                           {"what", a.what},
                           {"us_per_step", a.us_per_step.median},
                           {"min_us_per_step", a.us_per_step.min},
                           {"max_us_per_step", a.us_per_step.max}});
  out["targets"] = lockstep::bench::targets_json(targets);
  lockstep::bench::write_json_file(path, out.dump(2));
}

} // namespace

int main(int argc, char** argv) {
  try {
    const auto opts = parse_options(argc, argv);
    if (!opts.cpus.empty())
      pin_to(opts.cpus);
    const auto two_devices = lockstep::pod_topology::from_devices(lockstep::cpu_devices(2));

    // (1) host loops over 2 replicas.
    lockstep::pod_strategy pod_one{two_devices, std::nullopt, {.steps_per_run = 1}};
    lockstep::pod_strategy pod_many{two_devices, std::nullopt,
                                    {.steps_per_run = opts.steps_per_run}};
    lockstep::mirrored_strategy mirrored{lockstep::cpu_devices(2)};
    lockstep::input_options input;
    input.prefetch_depth = opts.prefetch;
    auto it_one = pod_one.experimental_distribute_dataset(tiny_batches(), input).make_iterator();
    auto it_many = pod_many.experimental_distribute_dataset(tiny_batches(), input).make_iterator();
    auto it_mirrored
      = mirrored.experimental_distribute_dataset(tiny_batches(), input).make_iterator();

    // (2) one replica of the MLP: over 2 logical cores, and on 1 device.
    lockstep::pod_strategy split_pod{
      two_devices, lockstep::device_assignment::build(two_devices, {1, 1, 1, 2}, {}, 1)};
    lockstep::pod_strategy one_device{
      lockstep::pod_topology::from_devices(lockstep::cpu_devices(1))};
    mlp split_model;
    mlp one_model;

    auto arm_a = [&] { return host_loop_arm(pod_one, it_one, opts.steps, 1); };
    auto arm_b = [&] { return host_loop_arm(pod_many, it_many, opts.steps, opts.steps_per_run); };
    auto arm_c = [&] {
      return host_loop_arm(mirrored, it_mirrored, opts.steps, opts.steps_per_run);
    };
    auto arm_d = [&] { return mlp_arm(split_pod, split_model, true, opts.mlp_steps); };
    auto arm_e = [&] { return mlp_arm(one_device, one_model, false, opts.mlp_steps); };

    // One untimed repetition of each arm warms threads and caches.
    (void) arm_a();
    (void) arm_b();
    (void) arm_c();
    (void) arm_d();
    (void) arm_e();
    std::vector<double> a, b, c, d, e;
    for (std::size_t rep = 0; rep < opts.reps; ++rep) {
      a.push_back(arm_a());
      b.push_back(arm_b());
      c.push_back(arm_c());
      d.push_back(arm_d());
      e.push_back(arm_e());
    }
    // The same steps in the same order on both models: equal weights.
    for (std::size_t k = 0; k < split_model.w2.size(); ++k)
      if (split_model.w2[k] != one_model.w2[k])
        throw std::logic_error("the split and one-device models diverged at w2[" + std::to_string(k)
                               + "]");

    const auto K = std::to_string(opts.steps_per_run);
    const std::vector<arm_result> arms{
      {"a", "pod, 2 replicas, steps_per_run 1", summarize(a)},
      {"b", "pod, 2 replicas, steps_per_run " + K, summarize(b)},
      {"c", "mirrored_strategy, 2 replicas, " + K + " steps per call", summarize(c)},
      {"d", "MLP, 1 replica over 2 logical cores", summarize(d)},
      {"e", "MLP, 1 replica on 1 device", summarize(e)}};
    std::printf("pod: us per step, median [min-max] of %zu interleaved reps; (a)-(c) %zu "
                "near-empty steps each, (d)-(e) %zu training steps of a 784-128-10 MLP on a "
                "batch of %lld\n\n",
                opts.reps, opts.steps, opts.mlp_steps, static_cast<long long>(batch_rows));
    std::printf("| arm | what | us/step |\n|---|---|---:|\n");
    for (const auto& arm : arms)
      std::printf("| (%s) | %s | %.2f %s |\n", arm.name.c_str(), arm.what.c_str(),
                  arm.us_per_step.median, range_string(arm.us_per_step).c_str());

    const std::vector<target> targets{
      {"(b)/(a): steps_per_run " + K + " against 1, 2 replicas",
       arms[1].us_per_step.median / arms[0].us_per_step.median, loop_target},
      {"(b)/(c): the pod's host loop against mirrored_strategy's",
       arms[1].us_per_step.median / arms[2].us_per_step.median, mirrored_target},
      {"(d)/(e): MLP over 2 logical cores against 1 device",
       arms[3].us_per_step.median / arms[4].us_per_step.median, split_target}};
    std::printf("\n| target | measured | limit | |\n|---|---:|---:|---|\n");
    for (const auto& t : targets)
      std::printf("| %s | %.3g x | <= %.3g x | %s |\n", t.what.c_str(), t.measured, t.limit,
                  t.pass() ? "pass" : "FAIL");
    if (!opts.json.empty())
      write_json(opts.json, arms, targets, opts);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pod: %s\n", e.what());
    return 1;
  }
}
