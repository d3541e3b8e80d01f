// lockstep-timeline: tools for the timelines lockstep writes
// (docs/timeline.md).
//
//   lockstep-timeline merge -o OUT.json TRACE.rank-0 TRACE.rank-1 ...
//
// merge joins the files of a multi-worker job into one trace with a
// process per worker. Every worker wrote its times on the coordinator's
// clock (measured at the rendezvous; each file's `lockstep` record says
// how closely), so the events line up as they are; merge moves time 0 to
// the earliest event, keeps every worker's events in its file's order,
// and adds a `lockstep_merge` record naming the files and each worker's
// clock error. A file that is not a worker's timeline (one process's, on
// its own clock), two files of one worker, or a file that does not parse
// is an error naming it (exit status 2).

#include "trace_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using json = nlohmann::json;

constexpr const char* usage = "usage: lockstep-timeline merge -o OUT.json TRACE.rank-0 TRACE.rank-1 ...";

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument(what);
}

/// The file's `lockstep` record, which says whose clock its times are on.
const json& lockstep_record(const json& trace, const std::string& path) {
  for (const auto& e : trace)
    if (e.is_object() && e.value("name", "") == "lockstep" && e.value("ph", "") == "M")
      return e;
  fail(path + " has no lockstep record: not a finished lockstep timeline");
}

int merge(const std::string& output, const std::vector<std::string>& inputs) {
  if (inputs.empty())
    fail(std::string{"merge: no input files\n"} + usage);
  json merged = json::array();
  std::vector<json> traces;
  std::map<long long, std::string> worker_files; // rank -> file
  json workers = json::array();
  double earliest = std::numeric_limits<double>::max();
  for (const auto& path : inputs) {
    auto trace = read_trace_file(path);
    const auto& record = lockstep_record(trace, path);
    const auto& args = record["args"];
    if (!args.contains("clock_offset_ns"))
      fail(path + " is one process's timeline, on its own clock; merge takes the files of a "
                  "multi-worker job (TRACE.rank-N)");
    const auto rank = record.value("pid", -1LL);
    if (const auto [at, added] = worker_files.emplace(rank, path); !added)
      fail(path + " and " + at->second + " are both worker " + std::to_string(rank) + "'s");
    workers.push_back({{"worker", rank},
                       {"file", path},
                       {"clock_offset_ns", args["clock_offset_ns"]},
                       {"clock_error_ns", args["clock_error_ns"]},
                       {"dropped_events", args.value("dropped_events", 0)}});
    for (const auto& e : trace)
      if (e.value("ph", "") != "M" && e.contains("ts"))
        earliest = std::min(earliest, e["ts"].get<double>());
    traces.push_back(std::move(trace));
  }
  if (earliest == std::numeric_limits<double>::max())
    earliest = 0;
  std::size_t events = 0;
  for (auto& trace : traces)
    for (auto& e : trace) {
      if (e.contains("ts") && e.value("ph", "") != "M")
        e["ts"] = e["ts"].get<double>() - earliest;
      merged.push_back(std::move(e));
      ++events;
    }
  merged.push_back({{"name", "lockstep_merge"},
                    {"ph", "M"},
                    {"pid", 0},
                    {"tid", 0},
                    {"args", {{"workers", workers}, {"time_zero_us", earliest}}}});
  std::ofstream out{output};
  if (!out)
    fail("cannot write " + output);
  out << merged.dump() << "\n";
  if (!out.flush())
    fail("writing " + output + " failed");
  std::cout << "lockstep-timeline: merged " << inputs.size() << " workers' timelines, " << events
            << " events, into " << output << "\n";
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2 || std::string{argv[1]} != "merge")
    fail(usage);
  std::string output;
  std::vector<std::string> inputs;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-o") {
      if (i + 1 >= argc)
        fail("-o: missing value");
      output = argv[++i];
    } else if (!arg.empty() && arg[0] == '-') {
      fail("unknown option '" + arg + "'\n" + usage);
    } else {
      inputs.push_back(arg);
    }
  }
  if (output.empty())
    fail(std::string{"merge: -o OUT.json is required\n"} + usage);
  return merge(output, inputs);
}

} // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "lockstep-timeline: " << e.what() << "\n";
    return 2;
  }
}
