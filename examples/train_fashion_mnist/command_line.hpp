#pragma once

// The command line of train_fashion_mnist: its options, their defaults (one
// source for what the program uses and what --help says) and their checks.

#include "trainer.hpp"

#include <filesystem>
#include <stdexcept>
#include <string>

namespace fashion_mnist {

/// A bad command line: an unknown option, a missing, malformed or
/// out-of-range value. main() prints it with the usage and exits 2.
class usage_error : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

/// What the command line asks for.
struct command_line {
  training_config config;
  std::filesystem::path data_dir;
  std::filesystem::path metrics;
  /// The SVG of the curves; defaults to `metrics` with the extension .svg.
  std::filesystem::path plot;
  /// runtime_options::timeline and timeline_steps, when given (else the
  /// LOCKSTEP_TIMELINE* variables apply).
  std::filesystem::path timeline;
  std::string timeline_steps;
  /// --help or -h: print the usage and exit 0.
  bool help = false;
};

/// SGD's learning rate when --lr is not given (Adam's is
/// optimizer_options' default).
inline constexpr double default_sgd_learning_rate = 0.05;

/// The settings of a command line with no options: one replica per core
/// (at most lockstep::max_mirrored_replicas), 15 epochs, global batch 128,
/// Adam at 0.001 decayed by 0.85 an epoch, seed 42, 10 steps per call, no
/// checkpoints, metrics to fashion_mnist_metrics.csv, data from
/// lockstep::fashion_mnist_directory.
command_line default_command_line();

/// The usage text, its defaults taken from default_command_line().
std::string usage();

/// Parses argv[1..argc). usage_error for an unknown option, a missing
/// value, a value that is not a number in the option's range, an unknown
/// optimizer, or an empty path; the message names the option and the
/// value given (escaped by fashion_mnist::printable).
command_line parse_command_line(int argc, const char* const* argv);

} // namespace fashion_mnist
