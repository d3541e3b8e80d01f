#include "optimizer.hpp"

#include "lockstep/context.hpp"
#include "lockstep/error.hpp"

#include <cmath>

namespace fashion_mnist {

using lockstep::tensor;
using lockstep::variable;

optimizer_kind parse_optimizer_kind(const std::string& name) {
  if (name == "sgd")
    return optimizer_kind::sgd_momentum;
  if (name == "adam")
    return optimizer_kind::adam;
  throw lockstep::value_error("unknown optimizer '" + name + "': expected sgd or adam");
}

std::string to_string(optimizer_kind kind) {
  return kind == optimizer_kind::adam ? "adam" : "sgd";
}

optimizer::optimizer(const optimizer_options& options, std::vector<variable> variables)
    : options_(options),
      variables_(std::move(variables)),
      iterations_variable_(tensor::scalar(std::int64_t{0}), {.name = "iterations"}) {
  const auto& extended = lockstep::get_strategy().extended();
  const std::vector<std::string> slot_names
      = options.kind == optimizer_kind::adam ? std::vector<std::string>{"m", "v"}
                                             : std::vector<std::string>{"momentum"};
  for (const auto& var : variables_) {
    auto colocated = extended.colocate_vars_with(var);
    auto zeros = tensor::zeros(var.dtype(), var.shape());
    std::vector<variable> slots;
    for (const auto& slot : slot_names)
      slots.emplace_back(zeros, lockstep::variable_options{.name = var.name() + "/" + slot});
    slots_.push_back(std::move(slots));
  }
}

std::vector<variable> optimizer::slot_variables() const {
  std::vector<variable> all{iterations_variable_};
  for (const auto& slots : slots_)
    all.insert(all.end(), slots.begin(), slots.end());
  return all;
}

void optimizer::restored() {
  iterations_ = iterations_variable_.value().data<std::int64_t>()[0];
}

void moment_step(std::span<float> moment, std::span<const float> g, float decay, float scale,
                 bool squared) {
  for (std::size_t k = 0; k < moment.size(); ++k)
    moment[k] = decay * moment[k] + scale * (squared ? g[k] * g[k] : g[k]);
}

void axpy_step(std::span<float> w, std::span<const float> x, float a) {
  for (std::size_t k = 0; k < w.size(); ++k)
    w[k] += a * x[k];
}

void adam_apply(std::span<float> w, std::span<const float> m, std::span<const float> v,
                float step_size, float epsilon) {
  for (std::size_t k = 0; k < w.size(); ++k)
    w[k] -= step_size * m[k] / (std::sqrt(v[k]) + epsilon);
}

void adam_step(std::span<float> w, std::span<float> m, std::span<float> v,
               std::span<const float> g, float step_size, const optimizer_options& options) {
  const auto b1 = static_cast<float>(options.beta1);
  const auto b2 = static_cast<float>(options.beta2);
  moment_step(m, g, b1, 1 - b1, false);
  moment_step(v, g, b2, 1 - b2, true);
  adam_apply(w, m, v, step_size, static_cast<float>(options.epsilon));
}

float adam_step_size(const optimizer_options& options, std::int64_t t) {
  const auto steps = static_cast<double>(t);
  return static_cast<float>(options.learning_rate * std::sqrt(1 - std::pow(options.beta2, steps))
                            / (1 - std::pow(options.beta1, steps)));
}

void optimizer::apply(const lockstep::strategy_extended& extended,
                      const std::vector<lockstep::mirrored<tensor>>& gradients) {
  if (gradients.size() != variables_.size())
    throw lockstep::value_error("optimizer: " + std::to_string(gradients.size())
                                + " gradients for " + std::to_string(variables_.size())
                                + " variables");
  ++iterations_;
  iterations_variable_.assign(tensor::scalar(iterations_));
  const auto options = options_;
  const auto step_size = adam_step_size(options, iterations_);
  for (std::size_t i = 0; i < variables_.size(); ++i) {
    const auto& slots = slots_[i];
    // Inside an update, the slots' reads and writes touch the copy on the
    // device of the variable's copy being updated.
    if (options.kind == optimizer_kind::sgd_momentum) {
      // The slot changes in place first; the variable's update, posted
      // after it, reads it on the same device.
      extended.update(slots[0], [options](tensor& velocity, const tensor& g) {
        moment_step(velocity.data<float>(), g.data<float>(), static_cast<float>(options.momentum),
                    1.0f, false);
      }, gradients[i]);
      extended.update(variables_[i], [options, velocity = slots[0]](tensor& w) {
        const auto v = velocity.value();
        axpy_step(w.data<float>(), v.data<float>(), -static_cast<float>(options.learning_rate));
      });
    } else {
      const auto b1 = static_cast<float>(options.beta1);
      const auto b2 = static_cast<float>(options.beta2);
      extended.update(slots[0], [b1](tensor& m, const tensor& g) {
        moment_step(m.data<float>(), g.data<float>(), b1, 1 - b1, false);
      }, gradients[i]);
      extended.update(slots[1], [b2](tensor& v, const tensor& g) {
        moment_step(v.data<float>(), g.data<float>(), b2, 1 - b2, true);
      }, gradients[i]);
      extended.update(variables_[i], [options, step_size, m_slot = slots[0], v_slot = slots[1]](
                                         tensor& w) {
        const auto m = m_slot.value();
        const auto v = v_slot.value();
        adam_apply(w.data<float>(), m.data<float>(), v.data<float>(), step_size,
                   static_cast<float>(options.epsilon));
      });
    }
  }
}

} // namespace fashion_mnist
