#pragma once

// What the training example shows a person: a progress line per epoch, a
// summary table and a CSV of per-epoch metrics (plot.hpp draws the curves).

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

/// `epoch,train_loss,train_accuracy,test_accuracy,seconds,examples_per_second`
/// and one row per epoch, each line ending in a newline.
std::string metrics_csv(const std::vector<epoch_metrics>& epochs);

/// Writes metrics_csv(epochs) to `path` (replaced whole). io_error if it
/// cannot.
void write_metrics_csv(const std::filesystem::path& path, const std::vector<epoch_metrics>& epochs);

/// Reads the rows of a CSV written by write_metrics_csv (for a resumed
/// run, which appends its epochs to the earlier ones). Empty if the file
/// does not exist; data_loss_error for a malformed row.
std::vector<epoch_metrics> read_metrics_csv(const std::filesystem::path& path);

} // namespace fashion_mnist
