#pragma once

// Data-parallel training of the MLP under a mirrored strategy: the model's
// variables and the optimizer's slots are mirrored variables; each step,
// every replica computes the gradients of its share of the global batch,
// the replicas all-reduce them (the fast path on the replica threads), and
// the optimizer applies the sum in cross-replica context (merge_call, then
// one `update` per variable). Checkpoints hold the model, the slots, the
// epoch and the global step; a run resumed from one reaches the same
// weights bit for bit as a run that never stopped, because the shuffle
// order of epoch e is a pure function of (seed, e) and the steps already
// taken in e are skipped.

#include "mlp.hpp"
#include "optimizer.hpp"

#include "lockstep/tensor.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace fashion_mnist {

/// The examples and labels a run trains and tests on.
struct training_data {
  lockstep::tensor train_images; // float32 [n, inputs]
  lockstep::tensor train_labels; // int64 [n]
  lockstep::tensor test_images;
  lockstep::tensor test_labels;
};

struct training_config {
  mlp_spec model;
  optimizer_options optimizer;
  /// Replicas: virtual CPU devices of one mirrored strategy.
  int replicas = 1;
  int epochs = 1;
  /// The learning rate of epoch e (from 0) is optimizer.learning_rate *
  /// lr_decay^e: a pure function of the epoch, so a resumed run keeps it.
  double lr_decay = 1.0;
  std::int64_t global_batch = 128;
  std::uint64_t seed = 42;
  /// Training steps per strategy call (extended().experimental_run_steps_on_iterator).
  int steps_per_call = 1;
  /// Where checkpoints go (every epoch, and on a stop request); empty: none.
  std::filesystem::path checkpoint_dir;
  /// Stops after this many steps in all (a test's short run); 0: no limit.
  std::int64_t max_steps = 0;
};

/// One epoch's figures.
struct epoch_metrics {
  int epoch = 0; // from 1
  double train_loss = 0;
  double train_accuracy = 0;
  double test_accuracy = 0;
  double seconds = 0;
  double examples_per_second = 0;
};

/// Called as training goes: after every step (epoch, steps done in it,
/// steps per epoch, mean loss and accuracy so far in the epoch) and after
/// every epoch.
struct training_observer {
  std::function<void(int, std::int64_t, std::int64_t, double, double)> on_step;
  std::function<void(const epoch_metrics&)> on_epoch;
  std::function<void(const std::string&)> on_note;
};

struct training_result {
  std::vector<epoch_metrics> epochs; // those run by this call
  /// The trained parameters (copy 0 of each variable).
  std::vector<lockstep::tensor> weights;
  std::int64_t global_step = 0;
  /// True when a stop request ended the run early (a checkpoint was saved
  /// if there is a checkpoint directory).
  bool interrupted = false;
  /// The epoch and step a checkpoint resumed from, if any.
  std::optional<std::int64_t> resumed_from_step;
};

/// Keeps freed tensor buffers in the process's heap instead of returning
/// them to the kernel: glibc gives blocks of 128 KiB and more their own
/// mapping and unmaps them on free, so every step's activations and
/// gradients would fault their pages in again (a fifth of a step's time,
/// measured). Call once at start-up, before threads are started.
void keep_freed_memory();

/// Trains as configured and returns the result. Resumes from the newest
/// checkpoint in `config.checkpoint_dir` if there is one. Stops early,
/// after the current step, when `stop` becomes true. value_error for a bad
/// configuration (non-positive replicas, epochs, batch or steps per call)
/// or data that does not fit the model.
training_result train(const training_config& config, const training_data& data,
                      const training_observer& observer = {},
                      const std::atomic<bool>* stop = nullptr);

} // namespace fashion_mnist
