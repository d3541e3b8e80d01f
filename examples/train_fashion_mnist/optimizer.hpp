#pragma once

// The optimizers of the training example, as TF's OptimizerV2 applies them
// under a strategy: slot variables created next to each model variable (in
// the strategy's scope, colocated with it), and one `update` per variable in
// cross-replica context that changes each copy of the variable and of its
// slots on that copy's device, in the same order on every copy.

#include "lockstep/strategy.hpp"
#include "lockstep/values.hpp"
#include "lockstep/variable.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fashion_mnist {

/// Which update rule.
enum class optimizer_kind {
  /// v = momentum * v + g; w -= learning_rate * v.
  sgd_momentum,
  /// Adam (Kingma and Ba), with TF's epsilon placement:
  /// w -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + epsilon).
  adam,
};

/// "sgd" or "adam"; value_error otherwise.
optimizer_kind parse_optimizer_kind(const std::string& name);
std::string to_string(optimizer_kind kind);

struct optimizer_options {
  /// Adam is the default: it reaches the accuracy bar in fewer epochs.
  optimizer_kind kind = optimizer_kind::adam;
  double learning_rate = 1e-3;
  double momentum = 0.9;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-7;
};

/// The update rules on plain floats (spans of one length), shared by the
/// optimizer's per-copy updates and bench/training's plain loop.
/// moment = decay * moment + scale * g (g squared when `squared`).
void moment_step(std::span<float> moment, std::span<const float> g, float decay, float scale,
                 bool squared);
/// w += a * x.
void axpy_step(std::span<float> w, std::span<const float> x, float a);
/// w -= step_size * m / (sqrt(v) + epsilon).
void adam_apply(std::span<float> w, std::span<const float> m, std::span<const float> v,
                float step_size, float epsilon);
/// One Adam step with `step_size` from adam_step_size: m, v, then w.
void adam_step(std::span<float> w, std::span<float> m, std::span<float> v,
               std::span<const float> g, float step_size, const optimizer_options& options);

/// Adam's bias-corrected learning rate at step `t` (from 1).
float adam_step_size(const optimizer_options& options, std::int64_t t);

/// An optimizer for a fixed list of variables. Construct it in the
/// strategy's scope (its slots are created there); apply() in cross-replica
/// context.
class optimizer {
public:
  /// Creates the slots of `variables`: "<name>/momentum" for SGD,
  /// "<name>/m" and "<name>/v" for Adam, zero-filled and colocated with
  /// their variable, and "iterations" (int64 scalar, the number of applied
  /// steps).
  optimizer(const optimizer_options& options, std::vector<lockstep::variable> variables);

  /// Applies one step: `gradients[i]` (mirrored on the devices of
  /// variables[i]) to variables[i]. Posted: returns once queued; every later
  /// read of a variable sees it. value_error for a gradient count that does
  /// not match.
  void apply(const lockstep::strategy_extended& extended,
             const std::vector<lockstep::mirrored<lockstep::tensor>>& gradients);

  /// The slots and "iterations": what a checkpoint must hold besides the
  /// model.
  std::vector<lockstep::variable> slot_variables() const;

  /// Steps applied so far (the "iterations" variable).
  std::int64_t iterations() const noexcept { return iterations_; }

  /// Reads "iterations" back after a checkpoint restored it.
  void restored();

  const optimizer_options& options() const noexcept { return options_; }

  /// Sets the learning rate of the steps applied from now on (a schedule).
  void set_learning_rate(double learning_rate) noexcept { options_.learning_rate = learning_rate; }

private:
  optimizer_options options_;
  std::vector<lockstep::variable> variables_;
  std::vector<std::vector<lockstep::variable>> slots_; // per variable
  lockstep::variable iterations_variable_;
  std::int64_t iterations_ = 0;
};

} // namespace fashion_mnist
