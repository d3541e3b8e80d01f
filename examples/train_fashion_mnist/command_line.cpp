#include "command_line.hpp"

#include "printable.hpp"

#include "lockstep/error.hpp"
#include "lockstep/idx.hpp"
#include "lockstep/cluster_resolver.hpp"
#include "lockstep/mirrored_strategy.hpp"
#include "lockstep/runtime_options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string_view>
#include <cstdlib>
#include <thread>

namespace fashion_mnist {

namespace {

[[noreturn]] void bad_value(std::string_view flag, std::string_view expected,
                            std::string_view text) {
  throw usage_error(std::string(flag) + ": expected " + std::string(expected) + ", got '"
                    + printable(text) + "'");
}

/// A whole number in [minimum, maximum], all of `text` (no sign but '-',
/// no spaces).
long long whole_number(std::string_view flag, std::string_view text, long long minimum,
                       long long maximum = std::numeric_limits<int>::max()) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size() || value < minimum
      || value > maximum)
    bad_value(flag, "a whole number in [" + std::to_string(minimum) + ", "
                        + std::to_string(maximum) + "]", text);
  return value;
}

/// A finite number in (0, maximum], all of `text`.
double positive_number(std::string_view flag, std::string_view text,
                       double maximum = std::numeric_limits<double>::max()) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size()
      || !std::isfinite(value) || !(value > 0 && value <= maximum))
    bad_value(flag,
              maximum == std::numeric_limits<double>::max()
                  ? std::string("a positive number")
                  : "a number in (0, " + number_text(maximum) + "]",
              text);
  return value;
}

std::filesystem::path nonempty_path(std::string_view flag, std::string_view text) {
  if (text.empty())
    throw usage_error(std::string(flag) + ": expected a path, got an empty one");
  return std::filesystem::path(text);
}

/// One process: a replica per core. A worker of a multi-worker job:
/// LOCKSTEP_REPLICAS_PER_WORKER (lockstep-run --replicas-per-worker), else 1.
int default_replicas() {
  if (lockstep::cluster_resolver{}.spec().world_size > 1) {
    const char* given = std::getenv("LOCKSTEP_REPLICAS_PER_WORKER");
    return given != nullptr && *given != '\0' ? std::atoi(given) : 1;
  }
  const auto cores = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::min<std::size_t>(cores, lockstep::max_mirrored_replicas));
}

} // namespace

command_line default_command_line() {
  command_line cl;
  cl.config.replicas = default_replicas();
  cl.config.epochs = 15;
  cl.config.global_batch = 128;
  cl.config.seed = 42;
  cl.config.steps_per_call = 10;
  cl.config.lr_decay = 0.85;
  cl.data_dir = lockstep::fashion_mnist_directory;
  cl.metrics = "fashion_mnist_metrics.csv";
  return cl;
}

std::string usage() {
  const auto d = default_command_line();
  const auto& c = d.config;
  const optimizer_options optimizer{}; // its defaults
  return "usage: train_fashion_mnist [options]\n"
         "  --replicas N          replicas (virtual CPU devices), 1 to "
         + std::to_string(lockstep::max_mirrored_replicas) + "; default: the number of cores ("
         + std::to_string(c.replicas) + " here)\n"
         "  --epochs E            epochs to train in all (a resumed run continues to E); default "
         + std::to_string(c.epochs) + "\n"
         "  --global-batch B      examples per step across all replicas, at most the training set; default "
         + std::to_string(c.global_batch) + "\n"
         "  --lr X                learning rate; default " + number_text(optimizer.learning_rate)
         + " (adam), " + number_text(default_sgd_learning_rate) + " (sgd)\n"
         "  --lr-decay D          in (0, 1]: the learning rate of epoch e is lr * D^e; default "
         + number_text(c.lr_decay) + "\n"
         "  --optimizer NAME      adam (default; beta1 " + number_text(optimizer.beta1) + ", beta2 "
         + number_text(optimizer.beta2) + ", epsilon " + number_text(optimizer.epsilon)
         + ") or sgd (momentum " + number_text(optimizer.momentum) + ")\n"
         "  --seed S              seed of the initial weights and the shuffle; default "
         + std::to_string(c.seed) + "\n"
         "  --steps-per-call K    training steps per strategy call (one dispatch to the replicas); default "
         + std::to_string(c.steps_per_call) + "\n"
         "  --checkpoint-dir DIR  save every epoch and on Ctrl-C, resume from the newest; default: none\n"
         "  --resume-from FILE    resume from this checkpoint instead (later saves go to --checkpoint-dir)\n"
         "  --metrics FILE        per-epoch CSV; default " + d.metrics.string() + "\n"
         "  --plot FILE           loss and accuracy curves (SVG, gnuplot); default: FILE of --metrics with .svg\n"
         "  --data-dir DIR        IDX files (train-images-idx3-ubyte.gz, ...); default "
         + d.data_dir.string() + "\n"
         "  --timeline FILE       write a timeline of the run (Chrome trace JSON; docs/timeline.md); default: none\n"
         "  --timeline-steps W    the steps it keeps: first:F,last:L, A-B or every:K; default first:50,last:50\n"
         "  --slow-replica R:MS   replica R sleeps MS ms before each step (a straggler, for the timeline)\n"
         "  --slow-input MS       the input pipeline sleeps MS ms per batch (input-bound steps)\n"
         "  --help                this text\n";
}

command_line parse_command_line(int argc, const char* const* argv) {
  auto cl = default_command_line();
  bool lr_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      cl.help = true;
      return cl;
    }
    static constexpr std::string_view flags[] = {
        "--replicas", "--epochs", "--global-batch", "--lr", "--lr-decay", "--optimizer",
        "--seed", "--steps-per-call", "--checkpoint-dir", "--resume-from", "--metrics",
        "--plot", "--data-dir", "--timeline", "--timeline-steps", "--slow-replica",
        "--slow-input"};
    if (std::find(std::begin(flags), std::end(flags), flag) == std::end(flags))
      throw usage_error("unknown option '" + printable(flag) + "'");
    if (i + 1 >= argc)
      throw usage_error(std::string(flag) + ": missing value");
    const std::string_view value = argv[++i];
    if (flag == "--replicas")
      cl.config.replicas = static_cast<int>(whole_number(
          flag, value, 1, static_cast<long long>(lockstep::max_mirrored_replicas)));
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
      cl.config.optimizer.learning_rate = positive_number(flag, value);
      lr_given = true;
    } else if (flag == "--lr-decay")
      cl.config.lr_decay = positive_number(flag, value, 1);
    else if (flag == "--optimizer") {
      try {
        cl.config.optimizer.kind = parse_optimizer_kind(std::string(value));
      } catch (const lockstep::value_error&) {
        bad_value(flag, "adam or sgd", value);
      }
    } else if (flag == "--checkpoint-dir")
      cl.config.checkpoint_dir = nonempty_path(flag, value);
    else if (flag == "--resume-from")
      cl.config.resume_from = nonempty_path(flag, value);
    else if (flag == "--metrics")
      cl.metrics = nonempty_path(flag, value);
    else if (flag == "--plot")
      cl.plot = nonempty_path(flag, value);
    else if (flag == "--timeline")
      cl.timeline = nonempty_path(flag, value);
    else if (flag == "--slow-replica") {
      const auto colon = value.find(':');
      if (colon == std::string_view::npos)
        bad_value(flag, "R:MS (a replica and milliseconds)", value);
      cl.config.slow_replica = static_cast<int>(whole_number(
          flag, value.substr(0, colon), 0, static_cast<long long>(lockstep::max_mirrored_replicas)));
      cl.config.slow_replica_delay =
          std::chrono::milliseconds{whole_number(flag, value.substr(colon + 1), 0, 3'600'000)};
    } else if (flag == "--slow-input")
      cl.config.slow_input_delay = std::chrono::milliseconds{whole_number(flag, value, 0, 3'600'000)};
    else if (flag == "--timeline-steps") {
      try {
        lockstep::runtime_options checked;
        checked.timeline_steps = std::string(value);
        checked.validate();
      } catch (const lockstep::value_error&) {
        bad_value(flag, "first:F,last:L, A-B or every:K", value);
      }
      cl.timeline_steps = std::string(value);
    }
    else
      cl.data_dir = nonempty_path(flag, value);
  }
  if (!lr_given && cl.config.optimizer.kind == optimizer_kind::sgd_momentum)
    cl.config.optimizer.learning_rate = default_sgd_learning_rate;
  if (cl.plot.empty())
    cl.plot = std::filesystem::path{cl.metrics}.replace_extension(".svg");
  return cl;
}

} // namespace fashion_mnist
