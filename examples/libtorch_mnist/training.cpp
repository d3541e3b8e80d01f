#include "training.hpp"

#include "lockstep/error.hpp"
#include "lockstep/reduce_op.hpp"

#include <ATen/DLConvertor.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>

namespace libtorch_mnist {

namespace {

using lockstep::value_error;

/// A lockstep tensor as a libtorch tensor over the same memory.
torch::Tensor view_of(const lockstep::tensor& t) { return at::fromDLPack(t.to_dlpack()); }

std::string shape_text(const torch::Tensor& t) {
  std::string text;
  for (const auto d : t.sizes())
    text += (text.empty() ? "" : "x") + std::to_string(d);
  return text.empty() ? "a scalar" : text;
}

void check(const training_config& config, const training_data& data, std::size_t in_sync,
           std::size_t local) {
  const auto fail = [](const std::string& what) { throw value_error("libtorch_mnist: " + what); };
  if (config.layers.size() < 2)
    fail("the model needs at least an input and an output width");
  const auto inputs = config.layers.front();
  const auto classes = config.layers.back();
  const auto check_split = [&](const char* name, const torch::Tensor& images,
                               const torch::Tensor& labels) {
    if (images.dim() != 2 || images.size(1) != inputs)
      fail(std::string(name) + " images are " + shape_text(images) + "; the model takes float32 [n, "
           + std::to_string(inputs) + "] (28x28 images)");
    if (images.scalar_type() != torch::kFloat32)
      fail(std::string(name) + " images are " + c10::toString(images.scalar_type())
           + "; the model takes float32");
    if (labels.dim() != 1 || labels.size(0) != images.size(0) || labels.scalar_type() != torch::kInt64)
      fail(std::string(name) + " labels are " + shape_text(labels) + " "
           + c10::toString(labels.scalar_type()) + "; expected int64 ["
           + std::to_string(images.size(0)) + "], one per image");
    if (labels.numel() > 0) {
      const auto low = labels.min().item<std::int64_t>();
      const auto high = labels.max().item<std::int64_t>();
      if (low < 0 || high >= classes)
        fail(std::string(name) + " labels span [" + std::to_string(low) + ", "
             + std::to_string(high) + "]; the model has classes 0 to "
             + std::to_string(classes - 1));
    }
  };
  check_split("training", data.train_images, data.train_labels);
  check_split("test", data.test_images, data.test_labels);
  if (config.epochs < 1)
    fail("epochs must be at least 1, got " + std::to_string(config.epochs));
  if (config.replicas < 1 || static_cast<std::size_t>(config.replicas) != local)
    fail("the configuration has " + std::to_string(config.replicas)
         + " replicas per process but the strategy has " + std::to_string(local));
  const auto replicas = static_cast<std::int64_t>(in_sync);
  if (config.global_batch < 1 || config.global_batch % replicas != 0)
    fail("the global batch (" + std::to_string(config.global_batch)
         + ") must be a positive multiple of the replicas in sync (" + std::to_string(replicas)
         + ")");
  if (config.global_batch > data.train_images.size(0))
    fail("the global batch (" + std::to_string(config.global_batch)
         + ") is larger than the training set (" + std::to_string(data.train_images.size(0))
         + " examples)");
}

/// The training set's order in epoch `epoch`: the same on every worker.
std::vector<std::int64_t> shuffled_rows(std::int64_t n, std::uint64_t seed, int epoch) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
  std::iota(rows.begin(), rows.end(), std::int64_t{0});
  std::mt19937_64 generator{seed * 1'000'003 + static_cast<std::uint64_t>(epoch)};
  std::shuffle(rows.begin(), rows.end(), generator);
  return rows;
}

/// Test examples the model classifies as their labels.
std::int64_t count_correct(mlp_module& model, const torch::Tensor& images,
                           const torch::Tensor& labels) {
  torch::NoGradGuard no_grad;
  std::int64_t correct = 0;
  for (std::int64_t start = 0; start < images.size(0); start += 1000) {
    const auto end = std::min<std::int64_t>(start + 1000, images.size(0));
    const auto logits = model->forward(images.slice(0, start, end));
    correct += logits.argmax(1).eq(labels.slice(0, start, end)).sum().item<std::int64_t>();
  }
  return correct;
}

/// One replica's model and optimizer.
struct replica {
  mlp_module model = nullptr;
  std::unique_ptr<torch::optim::Adam> optimizer;
  bool in_place = true;
  double loss = 0;         // the epoch's summed global-batch losses
  std::int64_t correct = 0; // the epoch's correct predictions, every replica's
};

} // namespace

training_data to_torch(const lockstep::mnist_dataset& dataset) {
  return {view_of(dataset.train.images), view_of(dataset.train.labels),
          view_of(dataset.test.images), view_of(dataset.test.labels)};
}

bool all_reduce_gradients(lockstep::replica_context& ctx, torch::nn::Module& model,
                          lockstep::tensor& stats) {
  auto parameters = model.parameters();
  std::vector<lockstep::tensor> values;
  values.reserve(parameters.size() + 1);
  // lockstep owns each DLManagedTensor from here; its deleter drops the
  // reference to libtorch's gradient storage when the last handle goes.
  for (auto& p : parameters)
    values.push_back(lockstep::tensor::from_dlpack(at::toDLPack(p.grad())));
  values.push_back(std::move(stats));
  auto sums = ctx.all_reduce(lockstep::reduce_op::sum, std::move(values));
  bool in_place = true;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    auto& gradient = parameters[i].mutable_grad();
    if (sums[i].raw_data() != gradient.data_ptr()) {
      // from_dlpack copied this gradient (strided or misaligned), or the
      // strategy reduced into a new buffer: the one copy that remains.
      gradient.copy_(at::fromDLPack(sums[i].to_dlpack()));
      in_place = false;
    }
  }
  stats = std::move(sums.back());
  return in_place;
}

training_result train(const lockstep::strategy& strategy, const training_config& config,
                      const training_data& data,
                      const std::function<void(const epoch_figures&)>& on_epoch) {
  const auto in_sync = strategy.num_replicas_in_sync();
  const auto local = strategy.extended().worker_devices().size();
  check(config, data, in_sync, local);
  at::set_num_threads(1);

  std::vector<replica> replicas(local);
  for (std::size_t r = 0; r < local; ++r) {
    replicas[r].model = r == 0 ? initial_model(config.layers, config.seed)
                               : mlp_module{config.layers};
    if (r > 0)
      copy_parameters(replicas[0].model, replicas[r].model);
    replicas[r].optimizer = std::make_unique<torch::optim::Adam>(
        replicas[r].model->parameters(),
        torch::optim::AdamOptions(config.learning_rate).eps(config.epsilon));
  }

  const auto examples = data.train_images.size(0);
  const auto steps_per_epoch = examples / config.global_batch;
  const auto share = config.global_batch / static_cast<std::int64_t>(in_sync);
  training_result result;
  for (int epoch = 0; epoch < config.epochs; ++epoch) {
    if (config.max_steps > 0 && result.global_step >= config.max_steps)
      break;
    const auto steps = config.max_steps > 0
                           ? std::min(steps_per_epoch, config.max_steps - result.global_step)
                           : steps_per_epoch;
    const auto rows = shuffled_rows(examples, config.seed, epoch);
    const auto learning_rate = config.learning_rate * std::pow(config.lr_decay, epoch);
    for (auto& r : replicas) {
      for (auto& group : r.optimizer->param_groups())
        static_cast<torch::optim::AdamOptions&>(group.options()).lr(learning_rate);
      r.loss = 0;
      r.correct = 0;
    }
    const auto start = std::chrono::steady_clock::now();
    strategy.run([&](lockstep::replica_context& ctx) {
      // OpenMP's thread count is per thread: each replica thread sets its own.
      at::set_num_threads(1);
      // This worker's replicas are consecutive in the sync group.
      auto& self = replicas[ctx.replica_id_in_sync_group() % local];
      const auto first = static_cast<std::int64_t>(ctx.replica_id_in_sync_group()) * share;
      for (std::int64_t step = 0; step < steps; ++step) {
        // This replica's rows of the step's global batch.
        auto index = torch::from_blob(
            const_cast<std::int64_t*>(rows.data()) + step * config.global_batch + first, {share},
            torch::kInt64);
        const auto images = data.train_images.index_select(0, index);
        const auto labels = data.train_labels.index_select(0, index);
        self.optimizer->zero_grad();
        const auto logits = self.model->forward(images);
        // Summed over the share, divided by the global batch: the replicas'
        // sum is the gradient of the global batch's mean loss.
        const auto loss = torch::nn::functional::cross_entropy(
                              logits, labels,
                              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                          / static_cast<double>(config.global_batch);
        loss.backward();
        const auto correct = logits.argmax(1).eq(labels).sum().item<std::int64_t>();
        auto stats = lockstep::tensor::from<double>({loss.item<double>(), static_cast<double>(correct)});
        self.in_place = all_reduce_gradients(ctx, *self.model, stats) && self.in_place;
        self.optimizer->step();
        const auto totals = stats.data<double>();
        self.loss += totals[0];
        self.correct += static_cast<std::int64_t>(std::llround(totals[1]));
      }
    });
    result.global_step += steps;
    const auto seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto& first = replicas.front();
    epoch_figures figures{
        .epoch = epoch + 1,
        .train_loss = first.loss / static_cast<double>(steps),
        .train_accuracy = static_cast<double>(first.correct)
                          / static_cast<double>(steps * config.global_batch),
        .test_accuracy = static_cast<double>(count_correct(replicas.front().model, data.test_images,
                                                           data.test_labels))
                         / static_cast<double>(std::max<std::int64_t>(1, data.test_images.size(0))),
        .seconds = seconds,
        .steps = steps};
    result.epochs.push_back(figures);
    if (on_epoch)
      on_epoch(figures);
  }
  for (const auto& r : replicas)
    result.gradients_in_place = result.gradients_in_place && r.in_place;
  for (const auto& p : replicas.front().model->parameters())
    result.weights.push_back(p.detach().clone());
  return result;
}

} // namespace libtorch_mnist
