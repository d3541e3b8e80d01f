// The main job's model split over two logical cores per replica on a
// virtual pod (docs/pod.md): cpu_devices(4) as a pod topology, 2 replicas
// x 2 logical cores; layer 1 on logical core 0, layers 2 to 4 and the loss
// on core 1. The options are train_fashion_mnist's (its command line,
// defaults and training loop); --steps-per-call K sets the pod's
// steps_per_run, and each call is a host loop of K steps. --replicas is
// refused: the pod has 2.
//
//   pod_fashion_mnist [--epochs E] [--global-batch B] [--lr X] ... (as train_fashion_mnist)

#include "command_line.hpp"
#include "output_files.hpp"
#include "printable.hpp"
#include "report.hpp"
#include "split_model.hpp"
#include "trainer.hpp"

#include "lockstep/lockstep.hpp"

#include <chrono>
#include <iostream>
#include <string>
#include <string_view>

namespace {

using fashion_mnist::printable;

/// The main job's usage as this program's: its name, without --replicas
/// (the pod has 2), and what --steps-per-call means here.
std::string pod_usage() {
  auto text = fashion_mnist::usage();
  const std::string main_name = "train_fashion_mnist";
  if (const auto at = text.find(main_name); at != std::string::npos)
    text.replace(at, main_name.size(), "pod_fashion_mnist");
  if (const auto at = text.find("  --replicas "); at != std::string::npos)
    text.erase(at, text.find('\n', at) + 1 - at);
  return text + "On a pod of cpu_devices(4): 2 replicas x 2 logical cores; --steps-per-call K"
                " sets the pod's steps_per_run.\n";
}

int run(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view{argv[i]} == "--replicas")
      throw fashion_mnist::usage_error(
          "--replicas: the pod has 2 replicas of 2 logical cores (cpu_devices(4))");
  const auto cl = fashion_mnist::parse_command_line(argc, argv);
  if (cl.help) {
    std::cout << pod_usage();
    return 0;
  }
  const auto config = fashion_mnist::with_pod_placement(cl.config);
  fashion_mnist::check_output_writable(cl.metrics, "metrics");
  const auto data = lockstep::load_mnist(cl.data_dir);
  const fashion_mnist::training_data training{data.train.images, data.train.labels,
                                              data.test.images, data.test.labels};
  std::cout << "Fashion-MNIST from " << printable(cl.data_dir.native())
            << ", model MLP 784-256-128-100-10 split over 2 logical cores (layer 1 on core 0,"
               " layers 2-4 and the loss on core 1), pod of cpu_devices(4): 2 replicas x 2"
               " cores, "
            << fashion_mnist::to_string(config.optimizer.kind) << " lr "
            << fashion_mnist::number_text(config.optimizer.learning_rate) << " (x"
            << fashion_mnist::number_text(config.lr_decay) << " an epoch), global batch "
            << config.global_batch << ", " << config.epochs << " epochs, seed " << config.seed
            << ", steps_per_run " << config.steps_per_call << "\n"
            << std::flush;
  std::vector<fashion_mnist::epoch_metrics> rows;
  fashion_mnist::training_observer observer;
  observer.on_note = [](const std::string& text) { std::cerr << text << "\n"; };
  observer.on_epoch = [&](const fashion_mnist::epoch_metrics& m) {
    std::cerr << "epoch " << m.epoch << "/" << config.epochs << ": loss " << m.train_loss
              << ", accuracy " << m.train_accuracy << ", test accuracy " << m.test_accuracy
              << ", " << m.seconds << " s\n";
    rows.push_back(m);
    fashion_mnist::write_metrics_csv(cl.metrics, rows);
  };
  const auto start = std::chrono::steady_clock::now();
  const auto result = fashion_mnist::train(config, training, observer);
  const auto seconds
      = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "steps " << result.global_step << ", this run " << seconds << " s";
  if (!rows.empty())
    std::cout << ", final test accuracy " << rows.back().test_accuracy;
  std::cout << "\nmetrics: " << printable(cl.metrics.native()) << "\n";
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  fashion_mnist::keep_freed_memory();
  try {
    return run(argc, argv);
  } catch (const fashion_mnist::usage_error& e) {
    std::cerr << "pod_fashion_mnist: " << printable(e.what(), false) << "\n" << pod_usage();
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "pod_fashion_mnist: " << printable(e.what(), false) << "\n";
    return 1;
  }
}
