#include "trainer.hpp"

#include "lockstep/lockstep.hpp"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

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
  if (data.train_images.rank() != 2 || data.train_images.shape()[0] == 0)
    throw value_error("training: no training examples");
}

/// The model's variables, the optimizer and the epoch counter, created in
/// `strategy`'s scope.
struct training_state {
  std::vector<variable> model;
  std::unique_ptr<optimizer> opt;
  variable epoch;
  /// The global batch the steps were counted in: a resumed run maps the
  /// global step to an epoch and a position with it.
  variable global_batch;

  std::vector<variable> checkpointed() const {
    auto all = model;
    const auto slots = opt->slot_variables();
    all.insert(all.end(), slots.begin(), slots.end());
    all.push_back(epoch);
    all.push_back(global_batch);
    return all;
  }
};

training_state create_state(const strategy& strategy, const training_config& config) {
  auto scope = strategy.scope();
  std::vector<variable> model;
  const auto names = parameter_names(config.model);
  const auto initial = initial_parameters(config.model, config.seed);
  for (std::size_t i = 0; i < names.size(); ++i)
    model.emplace_back(initial[i], variable_options{.name = names[i]});
  auto opt = std::make_unique<optimizer>(config.optimizer, model);
  variable epoch{tensor::scalar(std::int64_t{0}), {.name = "epoch"}};
  variable global_batch{tensor::scalar(config.global_batch), {.name = "global_batch"}};
  return {std::move(model), std::move(opt), std::move(epoch), std::move(global_batch)};
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
  auto result = loss_and_gradients(config.model, read_parameters(state), images, labels,
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
  std::int64_t sum = 0;
  for (auto c : correct.values())
    sum += c;
  return static_cast<double>(sum) / static_cast<double>(total);
}

} // namespace

void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

training_result train(const training_config& config, const training_data& data,
                      const training_observer& observer, const std::atomic<bool>* stop) {
  check_config(config, data);
  mirrored_strategy strategy{cpu_devices(config.replicas)};
  auto state = create_state(strategy, config);
  auto scope = strategy.scope();
  const auto note = [&](const std::string& text) {
    if (observer.on_note)
      observer.on_note(text);
  };

  training_result result;
  const auto examples = data.train_images.shape()[0];
  const auto steps_per_epoch = (examples + config.global_batch - 1) / config.global_batch;
  std::optional<checkpoint_manager> checkpoints;
  if (!config.checkpoint_dir.empty()) {
    checkpoints.emplace(config.checkpoint_dir, 3, strategy);
    if (auto restored = checkpoints->restore_latest(state.checkpointed())) {
      const auto saved_batch = state.global_batch.value().data<std::int64_t>()[0];
      if (saved_batch != config.global_batch)
        throw value_error("training: the checkpoints in " + config.checkpoint_dir.string()
                          + " count steps of global batch " + std::to_string(saved_batch)
                          + ", not " + std::to_string(config.global_batch)
                          + "; resume with that batch or use another directory");
      result.global_step = restored->step.value_or(0);
      result.resumed_from_step = result.global_step;
      state.opt->restored();
      note("resumed from " + checkpoints->latest()->string() + " at step "
           + std::to_string(result.global_step));
    }
  }
  const auto save = [&](std::int64_t epoch) {
    if (!checkpoints)
      return;
    state.epoch.assign(tensor::scalar(epoch));
    if (auto path = checkpoints->save(state.checkpointed(), result.global_step))
      note("saved " + path->string());
  };

  // Every replica sees its consecutive share of each global batch; the
  // order of epoch e is a pure function of (seed, e). The shuffle permutes
  // example numbers, and each batch gathers its rows in one copy.
  auto train_set = dataset<std::int64_t>::range(examples)
                       .shuffle(examples, config.seed)
                       .batch(config.global_batch)
                       .map([&data](const tensor& rows) {
                         return nest<tensor>{gather_rows(data.train_images, rows),
                                             gather_rows(data.train_labels, rows)};
                       });
  // A call of K steps takes them back to back: prefetch K ahead.
  auto distributed = strategy.experimental_distribute_dataset(
      train_set, {.prefetch_depth = static_cast<std::size_t>(std::max(2, config.steps_per_call))});
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
    const auto start = std::chrono::steady_clock::now();
    state.opt->set_learning_rate(config.optimizer.learning_rate
                                 * std::pow(config.lr_decay, static_cast<double>(epoch)));
    auto iterator = distributed.make_iterator(static_cast<std::uint64_t>(epoch));
    auto done = result.global_step - epoch * steps_per_epoch; // steps taken before a resume
    for (std::int64_t i = 0; i < done; ++i)
      iterator.next();
    step_stats totals;
    std::int64_t ran = 0; // steps this call took in this epoch
    const auto data_ended = [&] {
      return value_error("training: the data ended after " + std::to_string(done)
                         + " of an epoch's " + std::to_string(steps_per_epoch) + " steps");
    };
    while (done < steps_per_epoch && !out_of_steps()) {
      if (stop != nullptr && stop->load()) {
        save(epoch);
        result.interrupted = true;
        break;
      }
      auto steps = std::min<std::int64_t>(config.steps_per_call, steps_per_epoch - done);
      if (config.max_steps > 0)
        steps = std::min(steps, config.max_steps - result.global_step);
      if (config.steps_per_call == 1) {
        const auto step = iterator.next();
        if (!step)
          throw data_ended();
        const auto stats = strategy.run(
            [&](replica_context& ctx, const tensor& images, const tensor& labels) {
              return replica_step(ctx, config, state, images, labels);
            },
            (*step)[0].leaf(), (*step)[1].leaf());
        for (const auto& s : stats.values())
          totals += s;
      } else {
        // Several steps in one dispatch; each replica adds up its own.
        std::vector<step_stats> per_replica_totals(replicas);
        const auto context = strategy.extended().experimental_run_steps_on_iterator(
            [&](replica_context& ctx, multi_step_context&, const nest<tensor>& batch) {
              per_replica_totals[ctx.replica_id_in_sync_group()]
                  += replica_step(ctx, config, state, batch[0].leaf(), batch[1].leaf());
            },
            iterator, static_cast<std::size_t>(steps));
        steps = static_cast<std::int64_t>(context.steps());
        if (steps == 0)
          throw data_ended();
        for (const auto& s : per_replica_totals)
          totals += s;
      }
      done += steps;
      ran += steps;
      result.global_step += steps;
      if (observer.on_step)
        observer.on_step(static_cast<int>(epoch + 1), done, steps_per_epoch,
                         totals.loss / static_cast<double>(std::max<std::int64_t>(ran, 1)),
                         static_cast<double>(totals.correct)
                             / static_cast<double>(std::max<std::int64_t>(totals.examples, 1)));
    }
    if (result.interrupted)
      break;
    if (done < steps_per_epoch)
      break; // max_steps ended the run inside this epoch
    const auto seconds
        = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    epoch_metrics metrics;
    metrics.epoch = static_cast<int>(epoch + 1);
    metrics.train_loss = totals.loss / static_cast<double>(std::max<std::int64_t>(ran, 1));
    metrics.train_accuracy
        = static_cast<double>(totals.correct) / static_cast<double>(std::max<std::int64_t>(totals.examples, 1));
    metrics.seconds = seconds;
    metrics.examples_per_second = static_cast<double>(totals.examples) / seconds;
    metrics.test_accuracy = test_accuracy(strategy, config, state, data);
    save(epoch + 1);
    result.epochs.push_back(metrics);
    if (observer.on_epoch)
      observer.on_epoch(metrics);
  }
  strategy.extended().synchronize();
  result.weights = read_parameters(state);
  return result;
}

} // namespace fashion_mnist
