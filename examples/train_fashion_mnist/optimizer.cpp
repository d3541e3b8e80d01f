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

void sgd_momentum_step(std::span<float> w, std::span<float> velocity, std::span<const float> g,
                       float learning_rate, float momentum) {
  for (std::size_t k = 0; k < w.size(); ++k) {
    velocity[k] = momentum * velocity[k] + g[k];
    w[k] -= learning_rate * velocity[k];
  }
}

void adam_step(std::span<float> w, std::span<float> m, std::span<float> v,
               std::span<const float> g, float step_size, const optimizer_options& options) {
  const auto b1 = static_cast<float>(options.beta1);
  const auto b2 = static_cast<float>(options.beta2);
  const auto eps = static_cast<float>(options.epsilon);
  for (std::size_t k = 0; k < w.size(); ++k) {
    m[k] = b1 * m[k] + (1 - b1) * g[k];
    v[k] = b2 * v[k] + (1 - b2) * g[k] * g[k];
    w[k] -= step_size * m[k] / (std::sqrt(v[k]) + eps);
  }
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
      extended.update(variables_[i], [options, velocity = slots[0]](tensor& w, const tensor& g) {
        auto v = velocity.value().copy();
        sgd_momentum_step(w.data<float>(), v.data<float>(), g.data<float>(),
                          static_cast<float>(options.learning_rate),
                          static_cast<float>(options.momentum));
        velocity.assign(v);
      }, gradients[i]);
    } else {
      extended.update(variables_[i], [options, step_size, m_slot = slots[0], v_slot = slots[1]](
                                         tensor& w, const tensor& g) {
        auto m = m_slot.value().copy();
        auto v = v_slot.value().copy();
        adam_step(w.data<float>(), m.data<float>(), v.data<float>(), g.data<float>(), step_size,
                  options);
        m_slot.assign(m);
        v_slot.assign(v);
      }, gradients[i]);
    }
  }
}

} // namespace fashion_mnist
