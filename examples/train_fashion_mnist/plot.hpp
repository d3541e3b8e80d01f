#pragma once

// The loss and accuracy curves of a run, drawn by gnuplot.
//
// No path given by a person ever reaches gnuplot: its script language
// cannot quote a newline, so a path such as "x'\nsystem 'rm -rf ~'\n'"
// inside `set output '...'` would run a command. Instead gnuplot runs,
// without a shell, in a private temporary directory (mkdtemp, mode 0700)
// on fixed names (metrics.csv in, curves.svg out), and the SVG is then
// moved to the path asked for.

#include "trainer.hpp"

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace fashion_mnist {

/// Plots the loss and the accuracies of `epochs` against the epoch into an
/// SVG at `svg`. gnuplot (found on PATH) runs as a child process with an
/// argument vector, stdin from /dev/null and its output captured; it is
/// killed when it takes longer than `timeout`. The SVG is renamed onto
/// `svg` when that is a regular file or absent and on the same file
/// system, else copied into it (so /dev/null or a symbolic link is
/// written through, never replaced). Returns "" on success, else why not
/// (no gnuplot, gnuplot's own message, a timeout, or the write that
/// failed); the temporary directory is removed either way.
std::string plot_metrics(const std::vector<epoch_metrics>& epochs,
                         const std::filesystem::path& svg,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60));

} // namespace fashion_mnist
