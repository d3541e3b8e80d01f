#include "recorded_config.hpp"

#include "printable.hpp"

#include "lockstep/error.hpp"

#include <bit>

namespace fashion_mnist {

using lockstep::tensor;
using lockstep::value_error;
using lockstep::variable;

namespace {

/// The most layer widths a checkpoint may claim: far more than any model
/// here, and small enough that reading them allocates next to nothing.
constexpr std::int64_t max_layer_count = 1024;

std::int64_t kind_code(optimizer_kind kind) { return kind == optimizer_kind::adam ? 1 : 0; }

std::string kind_name(std::int64_t code) {
  return code == 1 ? "adam" : code == 0 ? "sgd" : "unknown optimizer " + std::to_string(code);
}

std::string widths(const std::vector<std::int64_t>& layers) {
  std::string text;
  for (auto w : layers)
    text += (text.empty() ? "" : "-") + std::to_string(w);
  return text;
}

variable scalar_variable(const char* name, auto value) {
  return variable{tensor::scalar(value), {.name = name}};
}

std::int64_t read_int(const variable& v) { return v.value().data<std::int64_t>()[0]; }
double read_double(const variable& v) { return v.value().data<double>()[0]; }

[[noreturn]] void mismatch(const std::string& source, const std::string& field,
                           const std::string& saved, const std::string& given) {
  throw value_error("training: cannot resume from " + printable(source)
                    + ": it was saved with " + field + " " + saved + ", this run has " + given
                    + "; resume with the " + field + " it was saved with, or start afresh in"
                    + " another checkpoint directory");
}

} // namespace

recorded_config::recorded_config(const training_config& config)
    : seed_(scalar_variable("config/seed", std::bit_cast<std::int64_t>(config.seed))),
      optimizer_(scalar_variable("config/optimizer", kind_code(config.optimizer.kind))),
      learning_rate_(scalar_variable("config/learning_rate", config.optimizer.learning_rate)),
      lr_decay_(scalar_variable("config/lr_decay", config.lr_decay)),
      momentum_(scalar_variable("config/momentum", config.optimizer.momentum)),
      beta1_(scalar_variable("config/beta1", config.optimizer.beta1)),
      beta2_(scalar_variable("config/beta2", config.optimizer.beta2)),
      epsilon_(scalar_variable("config/epsilon", config.optimizer.epsilon)),
      layer_count_(scalar_variable("config/layer_count",
                                   static_cast<std::int64_t>(config.model.layers.size()))),
      layers_(tensor::from(config.model.layers), {.name = "config/layers"}) {}

std::vector<variable> recorded_config::scalars() const {
  return {seed_, optimizer_, learning_rate_, lr_decay_, momentum_,
          beta1_, beta2_, epsilon_, layer_count_};
}

std::vector<variable> recorded_config::variables() const {
  auto all = scalars();
  all.push_back(layers_);
  return all;
}

void recorded_config::check_scalars(const training_config& config,
                                    const std::string& source) const {
  const auto saved_kind = read_int(optimizer_);
  if (saved_kind != kind_code(config.optimizer.kind))
    mismatch(source, "optimizer", kind_name(saved_kind), to_string(config.optimizer.kind));
  const auto saved_seed = std::bit_cast<std::uint64_t>(read_int(seed_));
  if (saved_seed != config.seed)
    mismatch(source, "seed", std::to_string(saved_seed), std::to_string(config.seed));
  const auto compare = [&](const variable& v, const char* field, double given) {
    const auto saved = read_double(v);
    // Bit for bit: the same text on the command line parses to the same bits.
    if (std::bit_cast<std::uint64_t>(saved) != std::bit_cast<std::uint64_t>(given))
      mismatch(source, field, number_text(saved), number_text(given));
  };
  compare(learning_rate_, "learning rate", config.optimizer.learning_rate);
  compare(lr_decay_, "learning-rate decay", config.lr_decay);
  if (config.optimizer.kind == optimizer_kind::sgd_momentum) {
    compare(momentum_, "momentum", config.optimizer.momentum);
  } else {
    compare(beta1_, "beta1", config.optimizer.beta1);
    compare(beta2_, "beta2", config.optimizer.beta2);
    compare(epsilon_, "epsilon", config.optimizer.epsilon);
  }
}

variable recorded_config::saved_layers_variable(const std::string& source) const {
  const auto count = read_int(layer_count_);
  if (count < 2 || count > max_layer_count)
    throw lockstep::data_loss_error(printable(source) + ": the recorded layer count "
                                    + std::to_string(count) + " is not in [2, "
                                    + std::to_string(max_layer_count) + "]");
  return variable{tensor::zeros(lockstep::dtype::i64, {count}), {.name = "config/layers"}};
}

void recorded_config::check_layers(const training_config& config, const std::string& source,
                                   const variable& saved) const {
  const auto values = saved.value();
  const auto span = values.data<std::int64_t>();
  const std::vector<std::int64_t> saved_layers(span.begin(), span.end());
  if (saved_layers != config.model.layers)
    mismatch(source, "layer widths", widths(saved_layers), widths(config.model.layers));
}

} // namespace fashion_mnist
