#include "trainer.hpp"

#include "agreed_settings.hpp"
#include "printable.hpp"
#include "recorded_config.hpp"

#include "lockstep/lockstep.hpp"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

namespace fashion_mnist {

using namespace lockstep;

namespace {

/// What one replica's share of one step adds to an epoch's figures.
struct step_stats {
  double loss = 0; // this replica's share of the global batch's mean loss
  std::int64_t correct = 0;
  std::int64_t examples = 0;

  step_stats& operator+=(const step_stats& other) {
    loss += other.loss;
    correct += other.correct;
    examples += other.examples;
    return *this;
  }
};

void check_config(const training_config& config, const training_data& data) {
  const auto positive = [](auto value, const char* what) {
    if (value <= 0)
      throw value_error(std::string("training: ") + what + " must be positive, got "
                        + std::to_string(value));
  };
  positive(config.replicas, "replicas");
  positive(config.epochs, "epochs");
  positive(config.global_batch, "global batch");
  positive(config.steps_per_call, "steps per call");
  if (!(config.lr_decay > 0 && config.lr_decay <= 1))
    throw value_error("training: lr decay must be in (0, 1], got "
                      + std::to_string(config.lr_decay));
  if (config.max_steps < 0)
    throw value_error("training: max steps must not be negative");
  if (config.placement.static_batches && config.slow_input_delay.count() > 0)
    throw value_error("training: a slow input delay is not supported with static batches (the"
                      " input pipeline gathers each example alone)");
  if (data.train_images.rank() != 2 || data.train_images.shape()[0] == 0)
    throw value_error("training: no training examples");
  if (config.global_batch > data.train_images.shape()[0])
    throw value_error("training: the global batch " + std::to_string(config.global_batch)
                      + " is larger than the training set ("
                      + std::to_string(data.train_images.shape()[0]) + " examples)");
}

/// The figures of the steps of an epoch so far, as a checkpoint keeps them
/// ("epoch_so_far", float64 [4]): a run resumed inside an epoch adds its
/// steps to them, so the epoch's row covers the whole epoch.
struct epoch_so_far {
  step_stats totals; // summed over every worker's replicas
  std::int64_t steps = 0; // the steps they cover: those done in the epoch

  tensor to_tensor() const {
    // Counts stay exact in a double up to 2^53.
    return tensor::from<double>({totals.loss, static_cast<double>(totals.correct),
                                 static_cast<double>(totals.examples),
                                 static_cast<double>(steps)});
  }

  static epoch_so_far from_tensor(const tensor& t) {
    const auto v = t.data<double>();
    return {{v[0], static_cast<std::int64_t>(v[1]), static_cast<std::int64_t>(v[2])},
            static_cast<std::int64_t>(v[3])};
  }
};

/// The model's variables, the optimizer, the epoch counter and the
/// recorded settings, created in `strategy`'s scope.
struct training_state {
  std::vector<variable> model;
  std::unique_ptr<optimizer> opt;
  variable epoch;
  /// The global batch the steps were counted in: a resumed run maps the
  /// global step to an epoch and a position with it.
  variable global_batch;
  std::unique_ptr<recorded_config> recorded;
  /// The current epoch's figures so far (epoch_so_far): zeros at an
  /// epoch's end, the partial sums in a checkpoint saved inside an epoch.
  variable so_far;

  /// What every checkpoint of this example holds, from the first version.
  std::vector<variable> core() const {
    auto all = model;
    const auto slots = opt->slot_variables();
    all.insert(all.end(), slots.begin(), slots.end());
    all.push_back(epoch);
    all.push_back(global_batch);
    return all;
  }

  /// The core and the recorded settings.
  std::vector<variable> with_settings() const {
    auto all = core();
    const auto settings = recorded->variables();
    all.insert(all.end(), settings.begin(), settings.end());
    return all;
  }

  /// What a checkpoint holds now.
  std::vector<variable> checkpointed() const {
    auto all = with_settings();
    all.push_back(so_far);
    return all;
  }
};

training_state create_state(const strategy& strategy, const training_config& config) {
  auto scope = strategy.scope();
  std::vector<variable> model;
  const auto names = parameter_names(config.model);
  const auto initial = initial_parameters(config.model, config.seed);
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!config.placement.logical_core) {
      model.emplace_back(initial[i], variable_options{.name = names[i]});
      continue;
    }
    auto core = strategy.extended().experimental_logical_device(config.placement.logical_core(i));
    model.emplace_back(initial[i], variable_options{.name = names[i]});
  }
  auto opt = std::make_unique<optimizer>(config.optimizer, model);
  variable epoch{tensor::scalar(std::int64_t{0}), {.name = "epoch"}};
  variable global_batch{tensor::scalar(config.global_batch), {.name = "global_batch"}};
  variable so_far{epoch_so_far{}.to_tensor(), {.name = "epoch_so_far"}};
  return {std::move(model), std::move(opt), std::move(epoch), std::move(global_batch),
          std::make_unique<recorded_config>(config), std::move(so_far)};
}

/// The model's parameters as the calling replica's copies (the primary
/// copies in cross-replica context).
std::vector<tensor> read_parameters(const training_state& state) {
  std::vector<tensor> parameters;
  parameters.reserve(state.model.size());
  for (const auto& v : state.model)
    parameters.push_back(v.value());
  return parameters;
}

/// One replica's step: gradients of its batch, summed across replicas on
/// the replica threads, then applied once in cross-replica context.
step_stats replica_step(replica_context& ctx, const training_config& config,
                        training_state& state, const tensor& images, const tensor& labels) {
  if (config.slow_replica >= 0
      && ctx.replica_id_in_sync_group() == static_cast<std::size_t>(config.slow_replica))
    std::this_thread::sleep_for(config.slow_replica_delay);
  auto result = config.placement.gradients
                  ? config.placement.gradients(ctx, read_parameters(state), images, labels)
                  : loss_and_gradients(config.model, read_parameters(state), images, labels,
                                       config.global_batch);
  auto summed = ctx.all_reduce(reduce_op::sum, std::move(result.gradients));
  ctx.merge_call(
      [&](strategy& s, const per_replica<std::vector<tensor>>& gradients) {
        // all_reduce left every replica the same sums: each variable's
        // gradient is mirrored across the replicas.
        std::vector<mirrored<tensor>> mirrored_gradients;
        for (std::size_t i = 0; i < state.model.size(); ++i) {
          std::vector<tensor> copies;
          for (const auto& replica_gradients : gradients.values())
            copies.push_back(replica_gradients[i]);
          mirrored_gradients.emplace_back(std::move(copies));
        }
        state.opt->apply(s.extended(), mirrored_gradients);
      },
      summed);
  return {result.loss, result.correct, images.shape()[0]};
}

/// Rows `indices` (int64 [k]) of `x` (any dtype, rows along dimension 0).
tensor gather_rows(const tensor& x, const tensor& indices) {
  auto shape = x.shape();
  const auto rows = shape[0];
  const auto row_bytes = rows == 0 ? 0 : x.byte_size() / static_cast<std::size_t>(rows);
  shape[0] = indices.num_elements();
  auto out = tensor::uninitialized(x.dtype(), shape);
  auto* to = static_cast<std::byte*>(out.raw_data());
  const auto* from = static_cast<const std::byte*>(x.raw_data());
  for (auto i : indices.data<std::int64_t>()) {
    if (i < 0 || i >= rows)
      throw value_error("gather_rows: row " + std::to_string(i) + " of "
                        + std::to_string(rows));
    std::memcpy(to, from + static_cast<std::size_t>(i) * row_bytes, row_bytes);
    to += row_bytes;
  }
  return out;
}

/// Row `i` of `x` (rows along dimension 0), without that dimension.
tensor row_of(const tensor& x, std::int64_t i) {
  auto shape = x.shape();
  const auto rows = shape[0];
  if (i < 0 || i >= rows)
    throw value_error("row_of: row " + std::to_string(i) + " of " + std::to_string(rows));
  shape.erase(shape.begin());
  const auto row_bytes = x.byte_size() / static_cast<std::size_t>(rows);
  auto out = tensor::uninitialized(x.dtype(), shape);
  std::memcpy(out.raw_data(), static_cast<const std::byte*>(x.raw_data())
                                  + static_cast<std::size_t>(i) * row_bytes, row_bytes);
  return out;
}

/// `value` summed over the workers; itself in one process.
template <class T>
T sum_over_workers(const strategy& strategy, T value) {
  if (!strategy.extended().spans_workers())
    return value;
  return strategy.reduce(reduce_op::sum, value);
}

/// A call's figures of every worker's replicas (each worker counted its own).
step_stats across_workers(const strategy& strategy, step_stats call) {
  return {sum_over_workers(strategy, call.loss), sum_over_workers(strategy, call.correct),
          sum_over_workers(strategy, call.examples)};
}

/// The share of `images` the model classifies right, each replica counting
/// its own slice of the test set with its own copies.
double test_accuracy(const strategy& strategy, const training_config& config,
                     training_state& state, const training_data& data) {
  const auto total = data.test_images.shape()[0];
  if (total == 0)
    return 0;
  auto test = dataset<nest<tensor>>::from_tensor_slices(
                  nest<tensor>{data.test_images, data.test_labels})
                  .batch(total);
  auto iterator = strategy.experimental_distribute_dataset(test).make_iterator();
  const auto step = iterator.next();
  auto correct = strategy.run(
      [&](const tensor& images, const tensor& labels) {
        return count_correct(config.model, read_parameters(state), images, labels);
      },
      (*step)[0].leaf(), (*step)[1].leaf());
  // Every replica of every worker counted its share.
  const auto sum = strategy.reduce(reduce_op::sum, correct);
  return static_cast<double>(sum) / static_cast<double>(total);
}

/// Appended to the error of a newest checkpoint that cannot be read.
constexpr std::string_view resume_hint
    = "; to resume from a readable checkpoint, name it with --resume-from FILE"
      " (training_config::resume_from)";

std::int64_t read_int(const variable& v) { return v.value().data<std::int64_t>()[0]; }

/// Resumes `state` as train() describes: the global step it resumed at,
/// or nullopt when there is nothing to resume from. Reads the checkpoint in
/// phases, each restore checked before it writes anything: its global
/// batch, then the recorded settings (and the layer widths), and only then
/// the model, so a different model is refused by name rather than by the
/// first tensor whose shape differs.
std::optional<std::int64_t> resume(const training_config& config, training_state& state,
                                   const std::optional<checkpoint_manager>& checkpoints,
                                   std::int64_t steps_per_epoch,
                                   const std::function<void(const std::string&)>& note) {
  std::filesystem::path source;
  std::optional<checkpoint_info> first;
  if (!config.resume_from.empty()) {
    source = config.resume_from;
    first = restore(source, {state.global_batch});
  } else if (checkpoints) {
    try {
      first = checkpoints->restore_latest({state.global_batch});
    } catch (const data_loss_error& e) {
      throw data_loss_error(std::string(e.what()) + std::string(resume_hint));
    } catch (const io_error& e) {
      throw io_error(std::string(e.what()) + std::string(resume_hint));
    }
    if (!first)
      return std::nullopt;
    const auto latest = checkpoints->latest();
    if (!latest)
      throw io_error("training: the checkpoints in " + printable(config.checkpoint_dir.native())
                     + " disappeared while resuming from them");
    source = *latest;
  } else {
    return std::nullopt;
  }
  const auto name = printable(source.native());
  const auto saved_batch = read_int(state.global_batch);
  if (saved_batch != config.global_batch)
    throw value_error("training: cannot resume from " + name + ": it was saved with global batch "
                      + std::to_string(saved_batch) + ", this run has "
                      + std::to_string(config.global_batch)
                      + " (its steps count global batches); resume with the global batch it"
                        " was saved with, or start afresh in another checkpoint directory");

  // A checkpoint written before the settings were recorded lacks them:
  // restore names the first missing one with a value_error (a shape_error
  // is a damaged or foreign file, and passes on).
  bool recorded = true;
  try {
    (void) restore(source, state.recorded->scalars());
  } catch (const shape_error&) {
    throw;
  } catch (const value_error&) {
    recorded = false;
  }
  if (recorded)
    state.recorded->check_matches(config, source.native(), [&](const variable& layers) {
      (void) restore(source, {layers});
    });
  else
    note("note: " + name + " records no run settings (it was saved before they were): the"
         " seed, layer widths and optimizer settings given now are taken to be those it was"
         " saved with");

  const auto info = restore(source, recorded ? state.with_settings() : state.core());
  if (info.step != first->step)
    throw data_loss_error(name + ": its step changed while resuming from it (from "
                          + (first->step ? std::to_string(*first->step) : "none") + " to "
                          + (info.step ? std::to_string(*info.step) : "none")
                          + "): is another run saving there?");
  if (!info.step)
    throw data_loss_error(name + ": the checkpoint records no step");
  const auto step = *info.step; // restore refuses a negative one
  const auto epochs_done = read_int(state.epoch);
  if (epochs_done != step / steps_per_epoch)
    throw value_error(name + ": step " + std::to_string(step) + " is "
                      + std::to_string(step / steps_per_epoch) + " full epochs at "
                      + std::to_string(steps_per_epoch)
                      + " steps an epoch, but the checkpoint's epoch counter says "
                      + std::to_string(epochs_done)
                      + ": the training set differs from the one it was saved with, or the"
                        " checkpoint is damaged");
  state.opt->restored();
  if (state.opt->iterations() != step)
    throw data_loss_error(name + ": the optimizer applied " + std::to_string(state.opt->iterations())
                          + " steps, but the checkpoint's step is " + std::to_string(step));
  // The figures of the epoch's steps before `step`; a checkpoint saved
  // before they were kept lacks them (restore names them with a
  // value_error), and its epoch's row then covers this run's steps only.
  const auto position = step % steps_per_epoch;
  bool kept = true;
  try {
    (void) restore(source, {state.so_far});
  } catch (const shape_error&) {
    throw;
  } catch (const value_error&) {
    kept = false;
  }
  if (kept) {
    const auto so_far = epoch_so_far::from_tensor(state.so_far.value());
    if (so_far.steps != position)
      throw data_loss_error(name + ": its figures of the epoch so far cover "
                            + std::to_string(so_far.steps) + " steps, but "
                            + std::to_string(position) + " steps of epoch "
                            + std::to_string(step / steps_per_epoch + 1)
                            + " come before its step " + std::to_string(step));
  } else if (position != 0) {
    note("note: " + name + " keeps no figures of the " + std::to_string(position)
         + " steps of epoch " + std::to_string(step / steps_per_epoch + 1)
         + " before it (it was saved before they were kept): that epoch's loss and accuracy"
           " cover only the steps this run takes");
  }
  note("resumed from " + name + " at step " + std::to_string(step) + " (epoch "
       + std::to_string(step / steps_per_epoch + 1) + ", step "
       + std::to_string(step % steps_per_epoch) + " of " + std::to_string(steps_per_epoch)
       + " done)");
  if (!config.resume_from.empty())
    note(checkpoints ? "later checkpoints go to " + printable(config.checkpoint_dir.native())
                     : std::string("no checkpoint directory: this run saves no checkpoints"));
  return step;
}

/// Why training must stop at a loss that is not finite.
value_error diverged(double loss, int epoch, std::int64_t step, std::int64_t steps,
                     std::int64_t global_step, double learning_rate) {
  return value_error("training: the loss is not finite (" + std::string(std::isnan(loss) ? "nan" : "inf")
                     + ") at epoch " + std::to_string(epoch) + ", step " + std::to_string(step)
                     + " of " + std::to_string(steps) + " (global step "
                     + std::to_string(global_step) + "): the training diverged; try a lower"
                       " learning rate (--lr; this epoch's is "
                     + number_text(learning_rate)
                     + ")");
}

/// A multi-worker strategy when a launcher configured a cluster (each
/// worker with `config.replicas` CPU devices, all workers with the same
/// settings), else a mirrored one.
lockstep::strategy make_strategy(const training_config& config, const training_data& data) {
  if (config.placement.make_strategy)
    return config.placement.make_strategy(config);
  const cluster_resolver resolver;
  if (resolver.spec().world_size > 1 && !resolver.spec().is_evaluator())
    return multi_worker_mirrored_strategy{
      resolver,
      {.local_devices = cpu_devices(config.replicas),
       .agreed_settings = settings_to_agree(config, data)}};
  return mirrored_strategy{cpu_devices(config.replicas)};
}

} // namespace

void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

training_result train(const training_config& config, const training_data& data,
                      const training_observer& observer, const std::atomic<bool>* stop) {
  check_config(config, data);
  const auto strategy = make_strategy(config, data);
  if (config.slow_replica >= 0
      && static_cast<std::size_t>(config.slow_replica) >= strategy.num_replicas_in_sync())
    throw value_error("slow replica " + std::to_string(config.slow_replica)
                      + " does not exist: the replicas are 0 to "
                      + std::to_string(strategy.num_replicas_in_sync() - 1));
  auto state = create_state(strategy, config);
  auto scope = strategy.scope();
  const auto note = [&](const std::string& text) {
    if (observer.on_note)
      observer.on_note(text);
  };

  training_result result;
  const auto examples = data.train_images.shape()[0];
  const auto steps_per_epoch = config.placement.static_batches
                                   ? examples / config.global_batch
                                   : (examples + config.global_batch - 1) / config.global_batch;
  std::optional<checkpoint_manager> checkpoints;
  if (!config.checkpoint_dir.empty())
    checkpoints.emplace(config.checkpoint_dir, 3, strategy);
  if (const auto step = resume(config, state, checkpoints, steps_per_epoch, note)) {
    result.global_step = *step;
    result.resumed_from_step = *step;
  }
  // The figures of the steps before the resume point in its epoch (zeros
  // at an epoch's start): the first epoch of this run adds to them.
  auto resumed_so_far = epoch_so_far::from_tensor(state.so_far.value());
  const auto save = [&](std::int64_t epoch, const epoch_so_far& so_far) {
    if (!checkpoints)
      return;
    state.epoch.assign(tensor::scalar(epoch));
    state.so_far.assign(so_far.to_tensor());
    // Every worker takes part (they agree on the step); the chief writes.
    if (auto path = checkpoints->save(state.checkpointed(), result.global_step))
      note("saved " + path->string());
  };

  // Every replica sees its consecutive share of each global batch; the
  // order of epoch e is a pure function of (seed, e). The shuffle permutes
  // example numbers, and each batch gathers its rows in one copy.
  const auto shuffled = dataset<std::int64_t>::range(examples).shuffle(examples, config.seed);
  // With static batches each example is gathered alone and the batches
  // stacked after (batch(n, true) gives the static batch size; a map after
  // it would lose it): the same batches, the last partial one left out.
  auto train_set
      = config.placement.static_batches
          ? shuffled
                .map([&data](std::int64_t i) {
                  return nest<tensor>{row_of(data.train_images, i), row_of(data.train_labels, i)};
                })
                .batch(config.global_batch, true)
          : shuffled.batch(config.global_batch)
                .map([&data, delay = config.slow_input_delay](const tensor& rows) {
                  if (delay.count() > 0)
                    std::this_thread::sleep_for(delay);
                  return nest<tensor>{gather_rows(data.train_images, rows),
                                      gather_rows(data.train_labels, rows)};
                });
  // A call of K steps takes them back to back: prefetch K ahead.
  auto distributed = strategy.experimental_distribute_dataset(
      train_set, {.prefetch_depth = static_cast<std::size_t>(std::max<std::int64_t>(
                      2, std::min<std::int64_t>(config.steps_per_call, steps_per_epoch)))});
  const auto replicas = static_cast<std::size_t>(config.replicas);
  const auto out_of_steps = [&] {
    return config.max_steps > 0 && result.global_step >= config.max_steps;
  };

  for (auto epoch = result.global_step / steps_per_epoch; epoch < config.epochs; ++epoch) {
    if (out_of_steps())
      break;
    if (stop != nullptr && stop->load()) {
      result.interrupted = true; // the last epoch's checkpoint is this step's
      break;
    }
    const auto learning_rate
        = config.optimizer.learning_rate * std::pow(config.lr_decay, static_cast<double>(epoch));
    state.opt->set_learning_rate(learning_rate);
    auto iterator = distributed.make_iterator(static_cast<std::uint64_t>(epoch));
    auto done = result.global_step - epoch * steps_per_epoch; // steps taken before a resume
    for (std::int64_t i = 0; i < done; ++i)
      iterator.next();
    // Timed from here, before the first call: the steps skipped above are
    // not this process's work, and the first call's are.
    const auto start = std::chrono::steady_clock::now();
    // The epoch's figures: a resumed epoch's start from the checkpoint's.
    auto so_far = std::exchange(resumed_so_far, epoch_so_far{});
    if (so_far.steps != done)
      so_far = {}; // a checkpoint that kept none: this run's steps only
    const auto examples_before = so_far.totals.examples; // not this run's work
    const auto data_ended = [&] {
      return value_error("training: the data ended after " + std::to_string(done)
                         + " of an epoch's " + std::to_string(steps_per_epoch) + " steps");
    };
    while (done < steps_per_epoch && !out_of_steps()) {
      if (stop != nullptr && stop->load()) {
        save(epoch, so_far);
        result.interrupted = true;
        break;
      }
      auto steps = std::min<std::int64_t>(config.steps_per_call, steps_per_epoch - done);
      if (config.max_steps > 0)
        steps = std::min(steps, config.max_steps - result.global_step);
      // The first step of this call (from 1) whose loss is not finite on
      // some replica, and that loss; 0 if none.
      std::int64_t bad_step = 0;
      double bad_loss = 0;
      step_stats call; // this worker's replicas' figures for this call
      if (config.steps_per_call == 1) {
        const auto step = iterator.next();
        if (!step)
          throw data_ended();
        const auto stats = strategy.run(
            [&](replica_context& ctx, const tensor& images, const tensor& labels) {
              return replica_step(ctx, config, state, images, labels);
            },
            (*step)[0].leaf(), (*step)[1].leaf());
        for (const auto& s : stats.values()) {
          call += s;
          if (!std::isfinite(s.loss))
            bad_step = 1, bad_loss = s.loss;
        }
      } else {
        // Several steps in one dispatch; each replica adds up its own and
        // notes its first non-finite loss.
        std::vector<step_stats> per_replica_totals(replicas);
        std::vector<std::int64_t> taken(replicas, 0), first_bad(replicas, 0);
        std::vector<double> first_bad_loss(replicas, 0);
        const auto context = strategy.extended().experimental_run_steps_on_iterator(
            [&](replica_context& ctx, multi_step_context&, const nest<tensor>& batch) {
              const auto r = ctx.replica_id_in_sync_group() % replicas; // this worker's index
              const auto stats = replica_step(ctx, config, state, batch[0].leaf(), batch[1].leaf());
              ++taken[r];
              if (!std::isfinite(stats.loss) && first_bad[r] == 0)
                first_bad[r] = taken[r], first_bad_loss[r] = stats.loss;
              per_replica_totals[r] += stats;
            },
            iterator, static_cast<std::size_t>(steps));
        steps = static_cast<std::int64_t>(context.steps());
        if (steps == 0)
          throw data_ended();
        for (std::size_t r = 0; r < replicas; ++r) {
          call += per_replica_totals[r];
          if (first_bad[r] != 0 && (bad_step == 0 || first_bad[r] < bad_step))
            bad_step = first_bad[r], bad_loss = first_bad_loss[r];
        }
      }
      so_far.totals += across_workers(strategy, call);
      if (bad_step != 0)
        throw diverged(bad_loss, static_cast<int>(epoch + 1), done + bad_step, steps_per_epoch,
                       result.global_step + bad_step, learning_rate);
      done += steps;
      so_far.steps += steps;
      result.global_step += steps;
      const auto& totals = so_far.totals;
      const auto mean_loss
          = totals.loss / static_cast<double>(std::max<std::int64_t>(so_far.steps, 1));
      const auto accuracy = static_cast<double>(totals.correct)
                            / static_cast<double>(std::max<std::int64_t>(totals.examples, 1));
      if (observer.on_progress)
        observer.on_progress(step_progress{
            static_cast<int>(epoch + 1), done, steps_per_epoch, mean_loss, accuracy,
            totals.examples - examples_before,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
    }
    if (result.interrupted)
      break;
    if (done < steps_per_epoch)
      break; // max_steps ended the run inside this epoch
    const auto seconds
        = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Loss and accuracy over the whole epoch, a resumed one's earlier steps
    // included; the time and speed of this process's steps only.
    const auto& totals = so_far.totals;
    epoch_metrics metrics;
    metrics.epoch = static_cast<int>(epoch + 1);
    metrics.train_loss
        = totals.loss / static_cast<double>(std::max<std::int64_t>(so_far.steps, 1));
    metrics.train_accuracy
        = static_cast<double>(totals.correct) / static_cast<double>(std::max<std::int64_t>(totals.examples, 1));
    metrics.seconds = seconds;
    metrics.examples_per_second = static_cast<double>(totals.examples - examples_before) / seconds;
    metrics.test_accuracy = test_accuracy(strategy, config, state, data);
    save(epoch + 1, epoch_so_far{});
    result.epochs.push_back(metrics);
    if (observer.on_epoch)
      observer.on_epoch(metrics);
  }
  strategy.extended().synchronize();
  result.weights = read_parameters(state);
  return result;
}

} // namespace fashion_mnist
