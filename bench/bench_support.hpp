#pragma once

// Command-line and statistics helpers shared by the benchmarks.

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <sched.h>

#include <nlohmann/json.hpp>

namespace lockstep::bench {

/// A comma-separated list of whole numbers, each at least `minimum`.
inline std::vector<std::size_t> parse_list(std::string_view flag, std::string_view text,
                                           std::size_t minimum) {
  std::vector<std::size_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = std::min(text.find(',', start), text.size());
    const auto item = text.substr(start, comma - start);
    std::size_t value = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (ec != std::errc{} || ptr != item.data() + item.size() || value < minimum)
      throw std::invalid_argument(std::string(flag) + ": expected whole numbers >= "
                                  + std::to_string(minimum) + ", got '" + std::string(item) + "'");
    out.push_back(value);
    start = comma + 1;
  }
  return out;
}

/// Writes `text` (a benchmark's --json document) to `path`, replacing it;
/// std::runtime_error if it cannot.
inline void write_json_file(const std::string& path, const std::string& text) {
  std::ofstream file{path};
  file << text << "\n";
  if (!file)
    throw std::runtime_error("--json: cannot write " + path);
}

/// Restricts this process (and every thread it starts later) to `cpus`.
inline void pin_to(const std::vector<std::size_t>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (auto cpu : cpus)
    CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0)
    throw std::runtime_error("--cpus: sched_setaffinity failed: " + std::string(std::strerror(errno)));
}

/// One whole number of at least 1.
inline std::size_t parse_count(std::string_view flag, std::string_view text) {
  const auto values = parse_list(flag, text, 1);
  if (values.size() != 1)
    throw std::invalid_argument(std::string(flag) + ": expected one number, got '"
                                + std::string(text) + "'");
  return values[0];
}

/// Walks the `--flag value` pairs of a command line: `--help` / `-h` print
/// `usage` and exit; every other flag needs a value and goes to
/// `set(flag, value)`, which returns false for a flag it does not know.
template <class Set>
void parse_flags(int argc, char** argv, std::string_view usage, Set set) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << usage;
      std::exit(0);
    }
    if (i + 1 >= argc)
      throw std::invalid_argument(std::string(flag) + " needs a value (see --help)");
    if (!set(flag, std::string_view{argv[++i]}))
      throw std::invalid_argument("unknown option " + std::string(flag) + " (see --help)");
  }
}

/// The median (the mean of the middle two for an even count), least and
/// greatest of some repeated measurements.
struct summary {
  double median = 0;
  double min = 0;
  double max = 0;
};

/// The summary of `xs`; throws std::logic_error when it is empty.
inline summary summarize(std::vector<double> xs) {
  if (xs.empty())
    throw std::logic_error("summarize: no samples");
  std::sort(xs.begin(), xs.end());
  const auto n = xs.size();
  return {n % 2 == 1 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2, xs.front(), xs.back()};
}

/// "4 MiB", "64 KiB", "1.5 KiB", "12 B": bytes as the tables show them.
inline std::string size_string(std::size_t bytes) {
  constexpr std::size_t kib = 1024;
  constexpr std::size_t mib = 1024 * kib;
  char buf[32];
  if (bytes >= mib && bytes % mib == 0)
    std::snprintf(buf, sizeof buf, "%zu MiB", bytes / mib);
  else if (bytes >= kib && bytes % kib == 0)
    std::snprintf(buf, sizeof buf, "%zu KiB", bytes / kib);
  else if (bytes >= mib)
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / mib);
  else if (bytes >= kib)
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / kib);
  else
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  return buf;
}

/// A ratio (or time) that must stay at most `limit`.
struct ratio_target {
  std::string what;
  double measured;
  double limit;
  bool pass() const { return measured <= limit; }
};

/// `targets` as --json's "targets" array (unit "x").
inline nlohmann::json targets_json(const std::vector<ratio_target>& targets) {
  auto out = nlohmann::json::array();
  for (const auto& t : targets)
    out.push_back({{"target", t.what},
                   {"measured", t.measured},
                   {"limit", t.limit},
                   {"at_least", false},
                   {"unit", "x"},
                   {"pass", t.pass()}});
  return out;
}

} // namespace lockstep::bench
