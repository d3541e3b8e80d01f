// The main job: data-parallel training of an MLP (784-256-128-100-10) on
// Fashion-MNIST with a mirrored strategy over virtual CPU devices.
//
//   train_fashion_mnist [--replicas N] [--epochs E] [--global-batch B] [--lr X]
//                       [--optimizer adam|sgd] [--seed S] [--steps-per-call K]
//                       [--checkpoint-dir DIR] [--metrics FILE] [--plot FILE]
//                       [--data-dir DIR]
//
// Ctrl-C saves a checkpoint (with --checkpoint-dir) and exits; running the
// same command again resumes from it.

#include "report.hpp"
#include "trainer.hpp"

#include "lockstep/lockstep.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

namespace {

constexpr std::string_view usage = R"(usage: train_fashion_mnist [options]
  --replicas N          replicas (virtual CPU devices); default: the number of cores
  --epochs E            epochs to train in all (a resumed run continues to E); default 15
  --global-batch B      examples per step across all replicas; default 158
  --lr X                learning rate; default 0.001 (adam), 0.05 (sgd)
  --lr-decay D          the learning rate of epoch e is lr * D^e; default 0.85
  --optimizer NAME      adam (default) or sgd (with momentum 0.9)
  --seed S              seed of the initial weights and the shuffle; default 42
  --steps-per-call K    training steps per strategy call (one dispatch to the replicas); default 10
  --checkpoint-dir DIR  save every epoch and on Ctrl-C; resume from the newest
  --metrics FILE        per-epoch CSV; default fashion_mnist_metrics.csv
  --plot FILE           loss and accuracy curves (SVG, gnuplot); default: FILE of --metrics with .svg
  --data-dir DIR        IDX files (train-images-idx3-ubyte.gz, ...); default /usr/share/datasets/fashion-mnist
)";

std::atomic<bool> stop_requested{false};

extern "C" void request_stop(int) {
  stop_requested.store(true);
  // A second Ctrl-C ends the process the default way.
  std::signal(SIGINT, SIG_DFL);
}

struct command_line {
  fashion_mnist::training_config config;
  std::filesystem::path data_dir{lockstep::fashion_mnist_directory};
  std::filesystem::path metrics{"fashion_mnist_metrics.csv"};
  std::filesystem::path plot;
  bool lr_given = false;
};

long long whole_number(std::string_view flag, const std::string& text, long long minimum,
                       long long maximum = std::numeric_limits<int>::max()) {
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < minimum || value > maximum)
    throw std::invalid_argument(std::string(flag) + ": expected a whole number in ["
                                + std::to_string(minimum) + ", " + std::to_string(maximum)
                                + "], got '" + text + "'");
  return value;
}

/// A number in (0, `maximum`].
double number_in(std::string_view flag, const std::string& text, double maximum) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(value > 0 && value <= maximum))
    throw std::invalid_argument(std::string(flag) + ": expected a number in (0, "
                                + (maximum < 1e300 ? std::to_string(static_cast<int>(maximum))
                                                   : std::string("inf"))
                                + "], got '" + text + "'");
  return value;
}

command_line parse(int argc, char** argv) {
  command_line cl;
  cl.config.replicas = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cl.config.epochs = 15;
  cl.config.steps_per_call = 10;
  cl.config.lr_decay = 0.85;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << usage;
      std::exit(0);
    }
    if (i + 1 >= argc)
      throw std::invalid_argument(std::string(flag) + ": missing value (see --help)");
    const std::string value = argv[++i];
    if (flag == "--replicas")
      cl.config.replicas = static_cast<int>(whole_number(flag, value, 1, 4096));
    else if (flag == "--epochs")
      cl.config.epochs = static_cast<int>(whole_number(flag, value, 1));
    else if (flag == "--global-batch")
      cl.config.global_batch = whole_number(flag, value, 1, 1 << 30);
    else if (flag == "--seed")
      cl.config.seed = static_cast<std::uint64_t>(
          whole_number(flag, value, 0, std::numeric_limits<long long>::max()));
    else if (flag == "--steps-per-call")
      cl.config.steps_per_call = static_cast<int>(whole_number(flag, value, 1));
    else if (flag == "--lr") {
      cl.config.optimizer.learning_rate = number_in(flag, value, 1e300); // any positive
      cl.lr_given = true;
    } else if (flag == "--lr-decay")
      cl.config.lr_decay = number_in(flag, value, 1);
    else if (flag == "--optimizer")
      cl.config.optimizer.kind = fashion_mnist::parse_optimizer_kind(value);
    else if (flag == "--checkpoint-dir")
      cl.config.checkpoint_dir = value;
    else if (flag == "--metrics")
      cl.metrics = value;
    else if (flag == "--plot")
      cl.plot = value;
    else if (flag == "--data-dir")
      cl.data_dir = value;
    else
      throw std::invalid_argument("unknown option " + std::string(flag) + " (see --help)");
  }
  if (!cl.lr_given && cl.config.optimizer.kind == fashion_mnist::optimizer_kind::sgd_momentum)
    cl.config.optimizer.learning_rate = 0.05;
  if (cl.plot.empty())
    cl.plot = std::filesystem::path{cl.metrics}.replace_extension(".svg");
  return cl;
}

int run(int argc, char** argv) {
  const auto cl = parse(argc, argv);
  const auto& config = cl.config;
  const auto data = lockstep::load_mnist(cl.data_dir);
  fashion_mnist::training_data training{data.train.images, data.train.labels, data.test.images,
                                        data.test.labels};
  std::cout << "Fashion-MNIST from " << cl.data_dir.string() << ": "
            << data.train.images.shape()[0] << " training and " << data.test.images.shape()[0]
            << " test images\n"
            << "model MLP 784-256-128-100-10, " << fashion_mnist::to_string(config.optimizer.kind)
            << " lr " << config.optimizer.learning_rate << " (x" << config.lr_decay << " an epoch), " << config.replicas
            << " replicas, global batch " << config.global_batch << ", " << config.epochs
            << " epochs, seed " << config.seed << ", " << config.steps_per_call
            << " steps per call\n";

  const bool terminal = isatty(STDERR_FILENO) != 0;
  auto epoch_start = std::chrono::steady_clock::now();
  int last_epoch = 0;
  fashion_mnist::training_observer observer;
  observer.on_note = [](const std::string& text) { std::cerr << text << "\n"; };
  observer.on_step = [&](int epoch, std::int64_t step, std::int64_t steps, double loss,
                         double accuracy) {
    if (epoch != last_epoch) {
      last_epoch = epoch;
      epoch_start = std::chrono::steady_clock::now();
    }
    if (!terminal && step != steps)
      return; // a log file gets one line per epoch
    const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                                       - epoch_start).count();
    const auto rate = seconds > 0 ? static_cast<double>(step * config.global_batch) / seconds : 0;
    std::cerr << "\r" << fashion_mnist::progress_line(epoch, config.epochs, step, steps, loss,
                                                      accuracy, rate)
              << (step == steps ? "\n" : "") << std::flush;
  };
  observer.on_epoch = [](const fashion_mnist::epoch_metrics& m) {
    std::cerr << "  test accuracy " << m.test_accuracy << "\n";
  };

  std::signal(SIGINT, request_stop);
  const auto start = std::chrono::steady_clock::now();
  const auto result = fashion_mnist::train(config, training, observer, &stop_requested);
  const auto seconds
      = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // A resumed run keeps the rows of the epochs before it.
  std::vector<fashion_mnist::epoch_metrics> rows;
  if (result.resumed_from_step) {
    try {
      rows = fashion_mnist::read_metrics_csv(cl.metrics);
    } catch (const lockstep::error& e) {
      std::cerr << "ignoring the earlier metrics: " << e.what() << "\n";
    }
    const int first_new = result.epochs.empty() ? config.epochs + 1 : result.epochs.front().epoch;
    std::erase_if(rows, [&](const auto& e) { return e.epoch >= first_new; });
  }
  rows.insert(rows.end(), result.epochs.begin(), result.epochs.end());
  if (!rows.empty()) {
    std::cout << "\n";
    fashion_mnist::print_summary(std::cout, rows);
    fashion_mnist::write_metrics_csv(cl.metrics, rows);
    std::cout << "\nmetrics: " << cl.metrics.string() << "\n";
    if (const auto problem = fashion_mnist::plot_metrics(cl.metrics, cl.plot); problem.empty())
      std::cout << "plot: " << cl.plot.string() << "\n";
    else
      std::cerr << "no plot: " << problem << "\n";
  }
  std::cout << "steps " << result.global_step << ", this run " << seconds << " s";
  if (!rows.empty())
    std::cout << ", final test accuracy " << rows.back().test_accuracy;
  std::cout << "\n";
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
  } catch (const std::invalid_argument& e) {
    std::cerr << "train_fashion_mnist: " << e.what() << "\n" << usage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "train_fashion_mnist: " << e.what() << "\n";
    return 1;
  }
}
