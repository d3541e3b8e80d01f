#pragma once

// The settings of a run that its checkpoints record, so that a run resumed
// from one can refuse settings that would make it a different run: the
// seed (the shuffle order of every later epoch), the layer widths, the
// optimizer and its hyper-parameters, and the learning-rate schedule. The
// global batch is recorded apart (training_state's "global_batch", older
// than these). Replicas and steps per call are not recorded: they do not
// change the weights (tests/training_test.cpp). Each setting is a scalar
// variable saved with the model, so the checkpoint's checksums cover it.

#include "trainer.hpp"

#include "lockstep/variable.hpp"

#include <string>
#include <vector>

namespace fashion_mnist {

/// The recorded settings as variables ("config/seed", "config/optimizer",
/// "config/learning_rate", "config/lr_decay", "config/momentum",
/// "config/beta1", "config/beta2", "config/epsilon", "config/layer_count"
/// and "config/layers"). Created in the strategy's scope with the values of
/// the configuration at hand; a restore overwrites them with the saved ones.
class recorded_config {
public:
  explicit recorded_config(const training_config& config);

  /// Every variable, for save and the final restore.
  std::vector<lockstep::variable> variables() const;

  /// The fixed-shape ones (all but "config/layers", whose length is the
  /// saved layer count): what a resume restores first to compare.
  std::vector<lockstep::variable> scalars() const;

  /// Compares the settings restored into scalars() from `source` with
  /// `config`, and, through `restore_layers` (called with a variable of the
  /// saved layer count, to restore into), the layer widths. value_error
  /// for the first that differs: "training: cannot resume from <source>:
  /// it was saved with <field> <saved>, this run has <given>; ...". Only
  /// the hyper-parameters of the saved optimizer are compared (momentum
  /// for SGD; beta1, beta2 and epsilon for Adam).
  template <class RestoreLayers>
  void check_matches(const training_config& config, const std::string& source,
                     RestoreLayers&& restore_layers) const {
    check_scalars(config, source);
    auto saved = saved_layers_variable(source);
    restore_layers(saved);
    check_layers(config, source, saved);
  }

private:
  void check_scalars(const training_config& config, const std::string& source) const;
  lockstep::variable saved_layers_variable(const std::string& source) const;
  void check_layers(const training_config& config, const std::string& source,
                    const lockstep::variable& saved) const;

  lockstep::variable seed_;
  lockstep::variable optimizer_;
  lockstep::variable learning_rate_;
  lockstep::variable lr_decay_;
  lockstep::variable momentum_;
  lockstep::variable beta1_;
  lockstep::variable beta2_;
  lockstep::variable epsilon_;
  lockstep::variable layer_count_;
  lockstep::variable layers_;
};

} // namespace fashion_mnist
