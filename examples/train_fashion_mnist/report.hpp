#pragma once

// What the training example shows a person: a progress line per epoch, a
// summary table, a CSV of per-epoch metrics and a plot of the curves drawn
// by gnuplot.

#include "trainer.hpp"

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

namespace fashion_mnist {

/// "epoch 3/15 [==========>         ] 234/469  loss 0.3412  acc 0.8765  12,345 ex/s",
/// for a bar `width` characters wide.
std::string progress_line(int epoch, int epochs, std::int64_t step, std::int64_t steps,
                          double loss, double accuracy, double examples_per_second,
                          int width = 30);

/// The per-epoch table, one row per epoch, with a header.
void print_summary(std::ostream& out, const std::vector<epoch_metrics>& epochs);

/// Writes `epoch,train_loss,train_accuracy,test_accuracy,seconds,examples_per_second`
/// and one row per epoch to `path` (replaced whole). io_error if it cannot.
void write_metrics_csv(const std::filesystem::path& path, const std::vector<epoch_metrics>& epochs);

/// Reads the rows of a CSV written by write_metrics_csv (for a resumed
/// run, which appends its epochs to the earlier ones). Empty if the file
/// does not exist; data_loss_error for a malformed row.
std::vector<epoch_metrics> read_metrics_csv(const std::filesystem::path& path);

/// Plots loss and accuracy against the epoch from the CSV at `csv` into
/// `svg` with gnuplot. Returns "" on success, else why it could not (no
/// gnuplot, or gnuplot failed with its message).
std::string plot_metrics(const std::filesystem::path& csv, const std::filesystem::path& svg);

} // namespace fashion_mnist
