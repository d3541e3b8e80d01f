#include "report.hpp"

#include "printable.hpp"

#include "lockstep/error.hpp"

#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>

namespace fashion_mnist {

namespace {

std::string fixed(double value, int digits) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(digits) << value;
  return text.str();
}

std::string thousands(double value) {
  auto digits = std::to_string(static_cast<long long>(value + 0.5));
  for (auto at = static_cast<long>(digits.size()) - 3; at > 0; at -= 3)
    digits.insert(static_cast<std::size_t>(at), ",");
  return digits;
}

} // namespace

std::string progress_line(int epoch, int epochs, std::int64_t step, std::int64_t steps,
                          double loss, double accuracy, double examples_per_second, int width) {
  const auto filled = steps > 0 ? static_cast<int>(step * width / steps) : width;
  std::string bar(static_cast<std::size_t>(width), ' ');
  for (int i = 0; i < filled; ++i)
    bar[static_cast<std::size_t>(i)] = '=';
  if (filled < width)
    bar[static_cast<std::size_t>(filled)] = '>';
  return "epoch " + std::to_string(epoch) + "/" + std::to_string(epochs) + " [" + bar + "] "
         + std::to_string(step) + "/" + std::to_string(steps) + "  loss " + fixed(loss, 4)
         + "  acc " + fixed(accuracy, 4) + "  " + thousands(examples_per_second) + " ex/s";
}

void print_summary(std::ostream& out, const std::vector<epoch_metrics>& epochs) {
  out << "| epoch | train loss | train accuracy | test accuracy | seconds | examples/s |\n"
      << "|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& e : epochs)
    out << "| " << e.epoch << " | " << fixed(e.train_loss, 4) << " | "
        << fixed(e.train_accuracy, 4) << " | " << fixed(e.test_accuracy, 4) << " | "
        << fixed(e.seconds, 2) << " | " << thousands(e.examples_per_second) << " |\n";
}

std::string metrics_csv(const std::vector<epoch_metrics>& epochs) {
  std::ostringstream out;
  out << "epoch,train_loss,train_accuracy,test_accuracy,seconds,examples_per_second\n";
  for (const auto& e : epochs)
    out << e.epoch << "," << fixed(e.train_loss, 6) << "," << fixed(e.train_accuracy, 6) << ","
        << fixed(e.test_accuracy, 6) << "," << fixed(e.seconds, 3) << ","
        << fixed(e.examples_per_second, 1) << "\n";
  return out.str();
}

void write_metrics_csv(const std::filesystem::path& path, const std::vector<epoch_metrics>& epochs) {
  std::ofstream out{path, std::ios::trunc};
  out << metrics_csv(epochs);
  out.flush();
  if (!out)
    throw lockstep::io_error("cannot write the metrics to '" + printable(path.native()) + "'");
}

std::vector<epoch_metrics> read_metrics_csv(const std::filesystem::path& path) {
  std::vector<epoch_metrics> rows;
  std::ifstream in{path};
  if (!in)
    return rows;
  std::string line;
  std::getline(in, line); // header
  for (int number = 2; std::getline(in, line); ++number) {
    if (line.empty())
      continue;
    epoch_metrics e;
    char c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0;
    std::istringstream fields{line};
    fields >> e.epoch >> c1 >> e.train_loss >> c2 >> e.train_accuracy >> c3 >> e.test_accuracy
        >> c4 >> e.seconds >> c5 >> e.examples_per_second;
    if (!fields || c1 != ',' || c2 != ',' || c3 != ',' || c4 != ',' || c5 != ',')
      throw lockstep::data_loss_error(printable(path.native()) + " line "
                                      + std::to_string(number) + ": not a metrics row: '"
                                      + printable(line) + "'");
    rows.push_back(e);
  }
  return rows;
}

} // namespace fashion_mnist
