#include "agreed_settings.hpp"

#include <charconv>
#include <string>

namespace fashion_mnist {

namespace {

/// The shortest text that reads back as `value`: two workers agree exactly
/// when their texts are equal.
std::string exact(double value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return {text, end};
}

std::string shape_text(const lockstep::tensor& t) {
  std::string text;
  for (const auto d : t.shape())
    text += (text.empty() ? "" : "x") + std::to_string(d);
  return text;
}

} // namespace

std::vector<lockstep::agreed_setting> settings_to_agree(const training_config& config,
                                                        const training_data& data) {
  std::string layers;
  for (const auto width : config.model.layers)
    layers += (layers.empty() ? "" : "-") + std::to_string(width);
  const auto& o = config.optimizer;
  return {
    {"--epochs", std::to_string(config.epochs)},
    {"--global-batch", std::to_string(config.global_batch)},
    {"--lr", exact(o.learning_rate)},
    {"--lr-decay", exact(config.lr_decay)},
    {"--optimizer", to_string(o.kind)},
    {"optimizer constants",
     "momentum " + exact(o.momentum) + ", beta1 " + exact(o.beta1) + ", beta2 " + exact(o.beta2)
       + ", epsilon " + exact(o.epsilon)},
    {"--seed", std::to_string(config.seed)},
    {"model", layers},
    {"max steps", std::to_string(config.max_steps)},
    {"training data", shape_text(data.train_images) + " images, " + shape_text(data.train_labels)
                        + " labels"},
    {"test data", shape_text(data.test_images) + " images, " + shape_text(data.test_labels)
                    + " labels"},
  };
}

} // namespace fashion_mnist
