// The main job's model split over two logical cores per replica on a
// virtual pod (docs/pod.md): each host has cpu_devices(N) (--pod-devices
// N, even, default 4) and runs N/2 replicas x 2 logical cores; layer 1 on
// logical core 0, layers 2 to 4 and the loss on core 1. Alone, the pod is
// this process's cpu_devices(N). Under a launcher that configures a
// cluster (lockstep-run -n H), every worker process is a host of one pod
// of H x N devices, H*N/2 replicas (pod_strategy(resolver, ...)): the
// hosts join as the main job's workers do, agree on the settings that
// change the numbers (--pod-devices among them), and the chief alone
// prints and writes the metrics and the checkpoints (a resumed run keeps
// the metrics rows of the epochs before it). The options are
// train_fashion_mnist's (its command line, defaults and training loop);
// --steps-per-call K sets the pod's steps_per_run, and each call is a host
// loop of K steps. --replicas is refused: --pod-devices sets the replicas.
//
//   pod_fashion_mnist [--pod-devices N] [--epochs E] [--global-batch B] [--lr X] ...
//                     (the rest as train_fashion_mnist)
//   lockstep-run -n 2 pod_fashion_mnist [--pod-devices N] ...
//
// Exit status as the main job's: 0 done, 1 an error, 2 a bad command line,
// 75 a lost host (lockstep::peer_lost_exit_status), 130 interrupted
// (Ctrl-C saves a checkpoint with --checkpoint-dir).

#include "agreed_settings.hpp"
#include "command_line.hpp"
#include "output_files.hpp"
#include "printable.hpp"
#include "report.hpp"
#include "split_model.hpp"
#include "trainer.hpp"

#include "lockstep/lockstep.hpp"

#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using fashion_mnist::printable;

/// --pod-devices: devices per host when not given, and at most (the main
/// job's --replicas bound, even).
constexpr int default_pod_devices = 4;
constexpr int max_pod_devices = static_cast<int>(lockstep::max_mirrored_replicas) / 2 * 2;

std::atomic<bool> stop_requested{false};

extern "C" void request_stop(int) {
  stop_requested.store(true);
  lockstep::cancel_joins(); // a join in progress ends now, not at its timeout
  std::signal(SIGINT, SIG_DFL);
}

/// The main job's usage as this program's: its name, --pod-devices in the
/// place of --replicas, and what --steps-per-call means here.
std::string pod_usage() {
  auto text = fashion_mnist::usage();
  const std::string main_name = "train_fashion_mnist";
  if (const auto at = text.find(main_name); at != std::string::npos)
    text.replace(at, main_name.size(), "pod_fashion_mnist");
  if (const auto at = text.find("  --replicas "); at != std::string::npos)
    text.replace(at, text.find('\n', at) + 1 - at,
                 "  --pod-devices N       virtual CPU devices per host, even, 2 to "
                   + std::to_string(max_pod_devices) + ": N/2 replicas of 2 logical cores; default "
                   + std::to_string(default_pod_devices) + "\n");
  return text
         + "On a pod of cpu_devices(N) per host: N/2 replicas x 2 logical cores; --steps-per-call K"
           " sets the pod's steps_per_run.\n"
           "Under a launcher (lockstep-run -n H pod_fashion_mnist ...) each worker process is a"
           " host: H*N/2 replicas.\n";
}

/// The command line without --pod-devices, and its value.
struct pod_command_line {
  std::vector<const char*> rest; // argv without --pod-devices N
  int pod_devices = default_pod_devices;
};

pod_command_line take_pod_devices(int argc, char** argv) {
  pod_command_line out;
  out.rest.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") { // the rest is not read
      out.rest.insert(out.rest.end(), argv + i, argv + argc);
      break;
    }
    if (flag == "--replicas")
      throw fashion_mnist::usage_error(
          "--replicas: the pod's replicas are set by --pod-devices N (N/2 replicas of 2 logical"
          " cores per host)");
    if (flag != "--pod-devices") {
      out.rest.push_back(argv[i]);
      if (i + 1 < argc) // an option's value, which may look like a flag
        out.rest.push_back(argv[++i]);
      continue;
    }
    if (i + 1 >= argc)
      throw fashion_mnist::usage_error("--pod-devices: missing value");
    const std::string_view text = argv[++i];
    int value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc{} || end != text.data() + text.size() || value < 2
        || value > max_pod_devices || value % 2 != 0)
      throw fashion_mnist::usage_error(
          "--pod-devices: expected an even whole number in [2, " + std::to_string(max_pod_devices)
          + "] (each replica has 2 logical cores), got '" + printable(text) + "'");
    out.pod_devices = value;
  }
  return out;
}

int run(int argc, char** argv) {
  const auto pod_cl = take_pod_devices(argc, argv);
  const auto cl = fashion_mnist::parse_command_line(static_cast<int>(pod_cl.rest.size()),
                                                    pod_cl.rest.data());
  if (cl.help) {
    std::cout << pod_usage();
    return 0;
  }
  fashion_mnist::check_output_writable(cl.metrics, "metrics");
  const auto data = lockstep::load_mnist(cl.data_dir);
  const fashion_mnist::training_data training{data.train.images, data.train.labels,
                                              data.test.images, data.test.labels};
  // In a pod of several hosts every host trains; the chief alone reports
  // and writes the outputs. The hosts agree on the main job's settings and
  // on the pod's shape.
  const auto cluster = lockstep::cluster_resolver{}.spec();
  const bool chief = cluster.is_chief();
  const auto hosts = cluster.world_size > 1 && !cluster.is_evaluator() ? cluster.world_size : 1;
  fashion_mnist::pod_shape shape{pod_cl.pod_devices,
                                 fashion_mnist::settings_to_agree(cl.config, training)};
  shape.agreed_settings.push_back({"--pod-devices", std::to_string(pod_cl.pod_devices)});
  const auto config = fashion_mnist::with_pod_placement(cl.config, shape);
  const auto devices = "cpu_devices(" + std::to_string(pod_cl.pod_devices) + ")";
  const auto pod = (hosts > 1 ? std::to_string(hosts) + " hosts x " + devices : devices) + ": "
                   + std::to_string(hosts * static_cast<std::size_t>(config.replicas))
                   + " replicas x 2 cores";
  if (chief)
    std::cout << "Fashion-MNIST from " << printable(cl.data_dir.native())
              << ", model MLP 784-256-128-100-10 split over 2 logical cores (layer 1 on core 0,"
                 " layers 2-4 and the loss on core 1), pod of "
              << pod << ", " << fashion_mnist::to_string(config.optimizer.kind) << " lr "
              << fashion_mnist::number_text(config.optimizer.learning_rate) << " (x"
              << fashion_mnist::number_text(config.lr_decay) << " an epoch), global batch "
              << config.global_batch << ", " << config.epochs << " epochs, seed " << config.seed
              << ", steps_per_run " << config.steps_per_call << "\n"
              << std::flush;
  // The chief rewrites the metrics after every epoch; a resumed run keeps
  // the rows of the epochs before it (as the main job does).
  std::vector<fashion_mnist::epoch_metrics> rows;
  bool rows_read = false;
  const auto keep_rows_before = [&](int epoch) {
    if (!rows_read && std::filesystem::is_regular_file(cl.metrics)) {
      try {
        rows = fashion_mnist::read_metrics_csv(cl.metrics);
      } catch (const lockstep::error& e) {
        std::cerr << "ignoring the earlier metrics: " << printable(e.what(), false) << "\n";
      }
    }
    rows_read = true;
    std::erase_if(rows, [&](const auto& e) { return e.epoch >= epoch; });
  };
  fashion_mnist::training_observer observer;
  if (chief) {
    observer.on_note = [](const std::string& text) { std::cerr << text << "\n"; };
    observer.on_epoch = [&](const fashion_mnist::epoch_metrics& m) {
      std::cerr << "epoch " << m.epoch << "/" << config.epochs << ": loss " << m.train_loss
                << ", accuracy " << m.train_accuracy << ", test accuracy " << m.test_accuracy
                << ", " << m.seconds << " s\n";
      keep_rows_before(m.epoch);
      rows.push_back(m);
      fashion_mnist::write_metrics_csv(cl.metrics, rows);
    };
  }
  std::signal(SIGINT, request_stop);
  const auto start = std::chrono::steady_clock::now();
  const auto result = fashion_mnist::train(config, training, observer, &stop_requested);
  const auto seconds
      = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!chief)
    return result.interrupted ? 130 : 0;
  if (result.resumed_from_step && result.epochs.empty())
    keep_rows_before(config.epochs + 1); // resumed at the end: the earlier rows
  std::cout << "steps " << result.global_step << ", this run " << seconds << " s";
  if (!rows.empty())
    std::cout << ", final test accuracy " << rows.back().test_accuracy;
  std::cout << "\nmetrics: " << printable(cl.metrics.native()) << "\n";
  if (result.interrupted) {
    std::cout << "interrupted"
              << (config.checkpoint_dir.empty() ? " (no --checkpoint-dir: nothing saved)\n"
                                                : "; run the same command again to resume\n");
    return 130;
  }
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
  } catch (const lockstep::peer_lost_error& e) {
    std::cerr << "pod_fashion_mnist: " << printable(e.what(), false) << "\n";
    return lockstep::peer_lost_exit_status;
  } catch (const lockstep::cancelled_error& e) {
    std::cerr << "pod_fashion_mnist: interrupted: " << printable(e.what(), false) << "\n";
    return 130;
  } catch (const std::exception& e) {
    std::cerr << "pod_fashion_mnist: " << printable(e.what(), false) << "\n";
    return 1;
  }
}
