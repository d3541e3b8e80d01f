// The main job with a libtorch model: the Fashion-MNIST MLP of
// examples/train_fashion_mnist written with libtorch's modules, autograd
// and Adam, its gradients all-reduced through lockstep via DLPack
// (training.hpp). One process runs --replicas replicas of a
// mirrored_strategy; under a launcher (lockstep-run -n N) each worker runs
// --replicas (default LOCKSTEP_REPLICAS_PER_WORKER, else 1) replicas of a
// multi_worker_mirrored_strategy, and the chief reports.
//
//   libtorch_mnist [--replicas N] [--epochs E] [--global-batch B] [--lr X]
//                  [--lr-decay D] [--seed S] [--max-steps K] [--data-dir DIR]
//
// Exit status: 0 done, 1 an error (data, a lost worker's peer_lost_error
// is 75), 2 a bad command line.

#include "training.hpp"

#include "lockstep/lockstep.hpp"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace {

struct usage_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct command_line {
  libtorch_mnist::training_config config;
  std::string data_dir{lockstep::fashion_mnist_directory};
  bool replicas_given = false;
  bool help = false;
};

const char* const usage_text =
    "usage: libtorch_mnist [options]\n"
    "  --replicas N      replicas in this process (virtual CPU devices); default 2, under a\n"
    "                    launcher LOCKSTEP_REPLICAS_PER_WORKER, else 1\n"
    "  --epochs E        default 15\n"
    "  --global-batch B  examples per step across every replica; default 128\n"
    "  --lr X            Adam's learning rate; default 0.001\n"
    "  --lr-decay D      in (0, 1]: epoch e's learning rate is lr * D^e; default 0.85\n"
    "  --seed S          seed of the weights and the shuffle; default 42\n"
    "  --max-steps K     stop after K steps in all; default 0 (no limit)\n"
    "  --data-dir DIR    the four IDX files; default /usr/share/datasets/fashion-mnist\n";

template <class T>
T number(std::string_view flag, std::string_view text, T minimum, T maximum) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size() || value < minimum
      || value > maximum)
    throw usage_error(std::string(flag) + ": expected a number in [" + std::to_string(minimum)
                      + ", " + std::to_string(maximum) + "], got '" + std::string(text) + "'");
  return value;
}

command_line parse(int argc, char** argv) {
  command_line cl;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      cl.help = true;
      return cl;
    }
    if (i + 1 >= argc)
      throw usage_error(flag.starts_with("--") ? std::string(flag) + ": missing value"
                                               : "unknown option '" + std::string(flag) + "'");
    const std::string_view value = argv[++i];
    auto& c = cl.config;
    if (flag == "--replicas") {
      c.replicas = number<int>(flag, value, 1, static_cast<int>(lockstep::max_mirrored_replicas));
      cl.replicas_given = true;
    } else if (flag == "--epochs")
      c.epochs = number<int>(flag, value, 1, 1'000'000);
    else if (flag == "--global-batch")
      c.global_batch = number<std::int64_t>(flag, value, 1, std::int64_t{1} << 30);
    else if (flag == "--lr")
      c.learning_rate = number<double>(flag, value, 1e-12, 1e3);
    else if (flag == "--lr-decay")
      c.lr_decay = number<double>(flag, value, 1e-12, 1);
    else if (flag == "--seed")
      c.seed = number<std::uint64_t>(flag, value, 0, std::uint64_t{1} << 62);
    else if (flag == "--max-steps")
      c.max_steps = number<std::int64_t>(flag, value, 0, std::int64_t{1} << 40);
    else if (flag == "--data-dir")
      cl.data_dir = value;
    else
      throw usage_error("unknown option '" + std::string(flag) + "'");
  }
  return cl;
}

std::string exact(double value) {
  char text[32];
  return {text, std::to_chars(text, text + sizeof text, value).ptr};
}

/// A multi-worker strategy under a launcher, whose workers must agree on
/// the settings that change the numbers; else a mirrored one.
lockstep::strategy make_strategy(const command_line& cl) {
  const lockstep::cluster_resolver resolver;
  const auto& c = cl.config;
  if (resolver.spec().world_size > 1 && !resolver.spec().is_evaluator())
    return lockstep::multi_worker_mirrored_strategy{
        resolver,
        {.local_devices = lockstep::cpu_devices(c.replicas),
         .agreed_settings = {{"--epochs", std::to_string(c.epochs)},
                             {"--global-batch", std::to_string(c.global_batch)},
                             {"--lr", exact(c.learning_rate)},
                             {"--lr-decay", exact(c.lr_decay)},
                             {"--seed", std::to_string(c.seed)},
                             {"--max-steps", std::to_string(c.max_steps)}}}};
  return lockstep::mirrored_strategy{lockstep::cpu_devices(c.replicas)};
}

} // namespace

int main(int argc, char** argv) {
  command_line cl;
  try {
    cl = parse(argc, argv);
  } catch (const usage_error& e) {
    std::cerr << "libtorch_mnist: " << e.what() << "\n" << usage_text;
    return 2;
  }
  if (cl.help) {
    std::cout << usage_text;
    return 0;
  }
  try {
    const lockstep::cluster_resolver resolver;
    const bool several = resolver.spec().world_size > 1;
    if (!cl.replicas_given) {
      const char* given = std::getenv("LOCKSTEP_REPLICAS_PER_WORKER");
      cl.config.replicas = several ? (given != nullptr && *given != '\0' ? std::atoi(given) : 1) : 2;
    }
    const bool report = !several || resolver.spec().is_chief();
    const auto data = libtorch_mnist::to_torch(lockstep::load_mnist(cl.data_dir));
    const auto strategy = make_strategy(cl);
    double seconds = 0;
    const auto result = libtorch_mnist::train(
        strategy, cl.config, data, [&](const libtorch_mnist::epoch_figures& e) {
          seconds += e.seconds;
          if (!report)
            return;
          std::printf("epoch %d: train loss %.6f, train accuracy %.6f, test accuracy %.6f, "
                      "%lld steps, %.2f s\n",
                      e.epoch, e.train_loss, e.train_accuracy, e.test_accuracy,
                      static_cast<long long>(e.steps), e.seconds);
          std::fflush(stdout);
        });
    if (report && !result.epochs.empty())
      std::printf("final test accuracy %.4f after %zu epochs (%lld steps, %zu replicas in sync), "
                  "%.1f s of training; gradients reduced in place: %s\n",
                  result.epochs.back().test_accuracy, result.epochs.size(),
                  static_cast<long long>(result.global_step), strategy.num_replicas_in_sync(),
                  seconds, result.gradients_in_place ? "yes" : "no (copied back)");
    return 0;
  } catch (const lockstep::peer_lost_error& e) {
    std::cerr << "libtorch_mnist: " << e.what() << "\n";
    return lockstep::peer_lost_exit_status;
  } catch (const std::exception& e) {
    std::cerr << "libtorch_mnist: error: " << e.what() << "\n";
    return 1;
  }
}
