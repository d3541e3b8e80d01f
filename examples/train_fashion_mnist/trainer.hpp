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
// taken in e are skipped. They also record the settings that make a run
// (recorded_config.hpp), and a resume refuses different ones, and the
// figures of the current epoch's steps so far, so that a resumed epoch's
// loss and accuracy cover the whole epoch.

#include "mlp.hpp"
#include "optimizer.hpp"

#include "lockstep/strategy.hpp"
#include "lockstep/tensor.hpp"

#include <atomic>
#include <chrono>
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

struct training_config;

/// Where a replica's model lives and how its gradients are computed, for a
/// model split over several logical cores of a replica
/// (examples/pod_fashion_mnist). Members left empty keep the main job's way.
struct model_placement {
  /// The strategy to train under; empty: a mirrored strategy over
  /// `replicas` CPU devices (multi-worker when a launcher set up a cluster).
  std::function<lockstep::strategy(const training_config&)> make_strategy;
  /// The logical core of parameter i (parameter_names' order): it is
  /// created under extended().experimental_logical_device(core), its
  /// optimizer slots with it. Empty: the replica's own device.
  std::function<std::size_t(std::size_t parameter)> logical_core;
  /// One replica's loss and gradients of its share of the global batch
  /// (gradients on the replica's current device); empty:
  /// loss_and_gradients on the replica's thread.
  std::function<batch_gradients(lockstep::replica_context&,
                                const std::vector<lockstep::tensor>& parameters,
                                const lockstep::tensor& images, const lockstep::tensor& labels)>
      gradients;
  /// Batches the training set with drop_remainder, so the iterator has a
  /// static batch size (the pod strategy's host loops require one): an
  /// epoch is then the training set's full global batches, the last
  /// partial one of each shuffled epoch left out. Not with
  /// slow_input_delay (value_error).
  bool static_batches = false;
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
  /// A run resumes from the newest one there, unless `resume_from` is set.
  std::filesystem::path checkpoint_dir;
  /// A checkpoint file to resume from instead of the newest in
  /// `checkpoint_dir` (e.g. an older one when the newest is damaged);
  /// empty: none. Later saves still go to `checkpoint_dir`.
  std::filesystem::path resume_from;
  /// Stops after this many steps in all (a test's short run); 0: no limit.
  std::int64_t max_steps = 0;
  /// Delays injected to show a straggler and an input-bound step in the
  /// timeline (docs/timeline.md): replica `slow_replica` (an index in the
  /// sync group; -1: none) sleeps `slow_replica_delay` before each step's
  /// gradients, and the input pipeline sleeps `slow_input_delay` per batch.
  /// They change no number the run computes.
  int slow_replica = -1;
  std::chrono::milliseconds slow_replica_delay{0};
  std::chrono::milliseconds slow_input_delay{0};
  /// The main job's own placement unless set (model_placement).
  model_placement placement;
};

/// One epoch's figures. Loss and accuracy cover every step of the epoch,
/// also when a run resumed inside it (a checkpoint saved inside an epoch
/// keeps the figures of its steps so far, "epoch_so_far"); seconds and
/// examples per second time this process's steps only.
struct epoch_metrics {
  int epoch = 0; // from 1
  double train_loss = 0;
  double train_accuracy = 0;
  double test_accuracy = 0;
  double seconds = 0;
  double examples_per_second = 0;
};

/// Where an epoch stands after a strategy call.
struct step_progress {
  int epoch = 0;          // from 1
  std::int64_t step = 0;  // steps done in the epoch, those of an earlier run included
  std::int64_t steps = 0; // steps per epoch
  /// Mean loss of the epoch's steps so far, and their share of correct
  /// predictions: in a resumed epoch, the steps before the resume too
  /// (the checkpoint keeps their figures).
  double loss = 0;
  double accuracy = 0;
  /// Examples this process trained on in this epoch (a resumed epoch's
  /// skipped steps are not among them).
  std::int64_t examples = 0;
  /// Seconds since just before this process's first call of the epoch.
  double seconds = 0;

  /// examples / seconds: the speed of this process alone.
  double examples_per_second() const noexcept {
    return seconds > 0 ? static_cast<double>(examples) / seconds : 0;
  }
};

/// Called as training goes: after every strategy call (where the epoch
/// stands), after every epoch, and with notes (resumed, saved, ...).
struct training_observer {
  std::function<void(const step_progress&)> on_progress;
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

/// Trains as configured and returns the result. Stops early, after the
/// current step, when `stop` becomes true. value_error for a bad
/// configuration (non-positive replicas, epochs, batch or steps per call,
/// a global batch larger than the training set) or data that does not fit
/// the model.
///
/// Resumes from `config.resume_from`, else from the newest checkpoint in
/// `config.checkpoint_dir` if there is one. A resume checks, before it
/// changes the model, that the checkpoint was saved with this global batch
/// and the settings recorded_config names (value_error naming the field,
/// the saved and the given value), then that its step fits its counters: a
/// step that is missing or negative, or an optimizer iteration count other
/// than the step, is a data_loss_error; an epoch counter other than step /
/// steps per epoch (a training set of another size, or a damaged file) a
/// value_error. A checkpoint from before the settings were recorded
/// resumes with a note that they could not be checked. When the newest
/// checkpoint cannot be read, the library's error (naming it and the
/// newest readable one) gains a hint to resume from another with
/// `resume_from` (--resume-from): never a silent fall-back.
///
/// Every call's loss is checked: a loss that is not finite (the training
/// diverged) is a value_error naming the epoch and step, and nothing is
/// saved after it.
training_result train(const training_config& config, const training_data& data,
                      const training_observer& observer = {},
                      const std::atomic<bool>* stop = nullptr);

} // namespace fashion_mnist
