// The main job: data-parallel training of an MLP (784-256-128-100-10) on
// Fashion-MNIST with a mirrored strategy over virtual CPU devices.
//
//   train_fashion_mnist [--replicas N] [--epochs E] [--global-batch B] [--lr X]
//                       [--lr-decay D] [--optimizer adam|sgd] [--seed S]
//                       [--steps-per-call K] [--checkpoint-dir DIR]
//                       [--resume-from FILE] [--metrics FILE] [--plot FILE]
//                       [--data-dir DIR]
//
// Ctrl-C saves a checkpoint (with --checkpoint-dir) and exits; running the
// same command again resumes from it. Ctrl-C while the workers of a
// multi-worker run are joining ends the join at once (status 130). Exit status: 0 done, 1 an error
// (data, checkpoints, outputs, a diverging loss), 2 a bad command line,
// 75 a lost worker (lockstep::peer_lost_exit_status: lockstep-run
// --max-restarts restarts the world from the last checkpoint), 130
// interrupted.

#include "command_line.hpp"
#include "output_files.hpp"
#include "plot.hpp"
#include "printable.hpp"
#include "report.hpp"
#include "trainer.hpp"

#include "lockstep/lockstep.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

namespace {

using fashion_mnist::printable;

std::atomic<bool> stop_requested{false};

extern "C" void request_stop(int) {
  stop_requested.store(true);
  lockstep::cancel_joins(); // a join in progress ends now, not at its timeout
  // A second Ctrl-C ends the process the default way.
  std::signal(SIGINT, SIG_DFL);
}

int run(int argc, char** argv) {
  // SIGUSR1 (or LOCKSTEP_DUMP_SIGNAL) writes the flight recorders of a
  // running job (docs/timeline.md); set before any thread starts. A
  // diagnostic: without a thread to spare the job goes on without it (and
  // fails at the first thread it needs, after joining its peers, which
  // then hear of it at once instead of at their join timeout).
  if (lockstep::get_runtime_options().dump_signal == 0) {
    auto options = lockstep::get_runtime_options();
    options.dump_signal = SIGUSR1;
    lockstep::set_runtime_options(options);
  }
  try {
    lockstep::watch_dump_signal();
  } catch (const lockstep::resource_error& e) {
    std::cerr << "train_fashion_mnist: warning: no flight recorder dumps on a signal: "
              << printable(e.what(), false) << "\n";
  }
  const auto cl = fashion_mnist::parse_command_line(argc, argv);
  if (cl.help) {
    std::cout << fashion_mnist::usage();
    return 0;
  }
  const auto& config = cl.config;
  if (!cl.timeline.empty() || !cl.timeline_steps.empty()) {
    auto options = lockstep::get_runtime_options();
    if (!cl.timeline.empty())
      options.timeline = cl.timeline.string();
    if (!cl.timeline_steps.empty())
      options.timeline_steps = cl.timeline_steps;
    lockstep::set_runtime_options(options);
  }
  // Outputs are checked before the data is read and hours are spent:
  // without truncating a metrics file that a resumed run reads.
  fashion_mnist::check_output_writable(cl.metrics, "metrics");
  fashion_mnist::check_output_writable(cl.plot, "plot");
  const auto data = lockstep::load_mnist(cl.data_dir);
  fashion_mnist::training_data training{data.train.images, data.train.labels, data.test.images,
                                        data.test.labels};
  const auto examples = data.train.images.shape()[0];
  // In a multi-worker job every worker trains; the chief alone reports and
  // writes the outputs.
  const auto cluster = lockstep::cluster_resolver{}.spec();
  const bool chief = cluster.is_chief();
  if (config.global_batch > examples)
    throw fashion_mnist::usage_error("--global-batch: " + std::to_string(config.global_batch)
                                     + " is larger than the training set ("
                                     + std::to_string(examples) + " examples in "
                                     + printable(cl.data_dir.native()) + ")");
  const auto replicas = cluster.world_size > 1
                          ? std::to_string(cluster.world_size) + " workers x "
                              + std::to_string(config.replicas) + " replicas"
                          : std::to_string(config.replicas) + " replicas";
  if (chief)
    std::cout << "Fashion-MNIST from " << printable(cl.data_dir.native()) << ": " << examples
              << " training and " << data.test.images.shape()[0] << " test images\n"
              << "model MLP 784-256-128-100-10, " << fashion_mnist::to_string(config.optimizer.kind)
              << " lr " << fashion_mnist::number_text(config.optimizer.learning_rate) << " (x"
              << fashion_mnist::number_text(config.lr_decay) << " an epoch), " << replicas
              << ", global batch " << config.global_batch << ", " << config.epochs
              << " epochs, seed " << config.seed << ", " << config.steps_per_call
              << " steps per call\n"
              << std::flush;

  const bool terminal = isatty(STDERR_FILENO) != 0;
  fashion_mnist::training_observer observer;
  if (chief) {
    observer.on_note = [](const std::string& text) { std::cerr << text << "\n"; };
    observer.on_progress = [&](const fashion_mnist::step_progress& p) {
      if (!terminal && p.step != p.steps)
        return; // a log file gets one line per epoch
      std::cerr << "\r"
                << fashion_mnist::progress_line(p.epoch, config.epochs, p.step, p.steps, p.loss,
                                                p.accuracy, p.examples_per_second())
                << (p.step == p.steps ? "\n" : "") << std::flush;
    };
  }
  // The chief rewrites the metrics after every epoch, so a job that dies
  // keeps its finished epochs' rows; a resumed run keeps the rows of the
  // epochs before it.
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
  if (chief)
    observer.on_epoch = [&](const fashion_mnist::epoch_metrics& m) {
      std::cerr << "  test accuracy " << m.test_accuracy << "\n";
      keep_rows_before(m.epoch);
      rows.push_back(m);
      fashion_mnist::write_metrics_csv(cl.metrics, rows);
    };

  std::signal(SIGINT, request_stop);
  const auto start = std::chrono::steady_clock::now();
  const auto result = fashion_mnist::train(config, training, observer, &stop_requested);
  const auto seconds
      = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (!chief)
    return result.interrupted ? 130 : 0;
  if (result.resumed_from_step && result.epochs.empty())
    keep_rows_before(config.epochs + 1); // resumed at the end: the earlier rows
  if (!rows.empty()) {
    std::cout << "\n";
    fashion_mnist::print_summary(std::cout, rows);
    std::cout << "\nmetrics: " << printable(cl.metrics.native()) << "\n";
    if (const auto problem = fashion_mnist::plot_metrics(rows, cl.plot); problem.empty())
      std::cout << "plot: " << printable(cl.plot.native()) << "\n";
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
  } catch (const fashion_mnist::usage_error& e) {
    std::cerr << "train_fashion_mnist: " << printable(e.what(), false) << "\n"
              << fashion_mnist::usage();
    return 2;
  } catch (const lockstep::peer_lost_error& e) {
    std::cerr << "train_fashion_mnist: " << printable(e.what(), false) << "\n";
    return lockstep::peer_lost_exit_status;
  } catch (const lockstep::cancelled_error& e) {
    std::cerr << "train_fashion_mnist: interrupted: " << printable(e.what(), false) << "\n";
    return 130;
  } catch (const std::exception& e) {
    std::cerr << "train_fashion_mnist: " << printable(e.what(), false) << "\n";
    return 1;
  }
}
