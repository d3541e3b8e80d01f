#pragma once

// The loss and accuracy curves of a run, drawn by gnuplot.
//
// No path given by a person ever reaches gnuplot: its script language
// cannot quote a newline, so a path such as "x'\nsystem 'rm -rf ~'\n'"
// inside `set output '...'` would run a command. Instead gnuplot runs,
// without a shell, on its standard streams alone: its input (the metrics
// as an inline data block, then fixed commands) is a file in memory, the
// SVG comes back on its stdout, and this process writes it to the path
// asked for. Nothing is written to any folder but the plot itself, so a
// run killed while gnuplot works leaves nothing behind; and gnuplot gets
// SIGKILL when its parent dies (PR_SET_PDEATHSIG), so it is never left
// running as an orphan.

#include "trainer.hpp"

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace fashion_mnist {

/// Plots the loss and the accuracies of `epochs` against the epoch into an
/// SVG at `svg`. gnuplot (found on PATH) runs as a child process with an
/// argument vector, its input and stderr in memory files and its stdout,
/// the SVG, read through a pipe; it is killed when it takes longer than
/// `timeout`, and when this process dies. The SVG is written into `svg`
/// (created, or truncated and written through, so /dev/null or a symbolic
/// link is written through, never replaced). Returns "" on success, else
/// why not (no gnuplot, gnuplot's own message, a timeout, or the write
/// that failed).
std::string plot_metrics(const std::vector<epoch_metrics>& epochs,
                         const std::filesystem::path& svg,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60));

} // namespace fashion_mnist
