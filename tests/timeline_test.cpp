// The timeline (runtime_options::timeline): the trace of a known program
// parses as Chrome trace-event JSON, holds exactly the expected spans on
// each track, nests properly per track, and its collectives overlap
// across replicas; the window keeps the steps it names; bad settings and
// an unwritable file are errors that name the problem.

#include "lockstep/lockstep.hpp"

#include "file_support.hpp"
#include "timeline_support.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace lockstep;
using json = nlohmann::json;

namespace {

/// The known program: 2 replicas; each step one all_reduce, one merge_call
/// whose merge function updates a mirrored variable.
void run_known_program(int steps) {
  mirrored_strategy s{cpu_devices(2)};
  std::optional<variable> w;
  {
    auto scope = s.scope();
    w.emplace(tensor::scalar(0.0f), variable_options{.name = "w"});
  }
  for (int step = 0; step < steps; ++step)
    s.run([&](replica_context& ctx) {
      auto sum = ctx.all_reduce(reduce_op::sum, tensor::scalar(1.0f));
      ctx.merge_call(
        [&](strategy& st, const per_replica<tensor>&) {
          st.extended().update(*w, [](variable& copy) { copy.assign_add(tensor::scalar(1.0f)); });
        },
        sum);
    });
  CHECK(w->primary().read_value().as_double(0) == steps);
}

/// Track names by tid.
std::map<int, std::string> track_names(const json& trace) {
  std::map<int, std::string> names;
  for (const auto& e : trace)
    if (e["ph"] == "M" && e["name"] == "thread_name")
      names[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
  return names;
}

/// The spans ("X") named `name` on the track named `track`.
std::vector<json> spans(const json& trace, const std::string& track, const std::string& name) {
  const auto names = track_names(trace);
  std::vector<json> found;
  for (const auto& e : trace)
    if (e["ph"] == "X" && e["name"] == name && names.at(e["tid"].get<int>()) == track)
      found.push_back(e);
  return found;
}

std::set<std::int64_t> steps_of(const std::vector<json>& events) {
  std::set<std::int64_t> steps;
  for (const auto& e : events)
    steps.insert(e["args"]["step"].get<std::int64_t>());
  return steps;
}

} // namespace

TEST_CASE("timeline: the trace of a known program") {
  temporary_directory dir{"lockstep-timeline"};
  const auto path = dir.path() / "trace.json";
  {
    timeline_options on{path.string()};
    run_known_program(3);
  } // the strategy is gone: the file is complete
  const auto trace = read_trace(path);
  REQUIRE(trace.is_array());

  // Every event has the trace-event fields.
  for (const auto& e : trace) {
    CAPTURE(e.dump());
    REQUIRE(e.contains("name"));
    REQUIRE(e.contains("ph"));
    REQUIRE(e.contains("pid"));
    REQUIRE(e.contains("tid"));
    if (e["ph"] != "M")
      REQUIRE(e["ts"].is_number());
    if (e["ph"] == "X")
      REQUIRE(e["dur"].get<double>() >= 0);
  }

  // Exactly the expected spans on each track.
  for (const auto* replica : {"replica 0", "replica 1"}) {
    CAPTURE(replica);
    CHECK(spans(trace, replica, "run").size() == 3);
    CHECK(spans(trace, replica, "all_reduce").size() == 3);
    CHECK(spans(trace, replica, "merge_call wait").size() == 3);
    CHECK(steps_of(spans(trace, replica, "run")) == std::set<std::int64_t>{0, 1, 2});
    for (const auto& c : spans(trace, replica, "all_reduce")) {
      CHECK(c["args"]["op"] == "sum");
      CHECK(c["args"]["dtype"] == "float32");
      CHECK(c["args"]["bytes"] == 4);
      CHECK(c["args"]["algorithm"] == "slice_all_reduce"); // the default on CPU devices
      CHECK(c["args"]["wait_us"].get<double>() >= 0);
      CHECK(c["args"]["reduce_us"].get<double>() >= 0);
      CHECK(c["args"]["wait_us"].get<double>() + c["args"]["reduce_us"].get<double>()
            <= c["dur"].get<double>() + 0.002);
    }
  }
  CHECK(spans(trace, "strategy", "merge_fn").size() == 3);
  std::size_t updates = 0;
  for (const auto& [tid, name] : track_names(trace))
    if (name.starts_with("variables "))
      updates += spans(trace, name, "update").size();
  CHECK(updates == 6); // 3 steps x 2 copies
  for (const auto& [tid, name] : track_names(trace))
    if (name.starts_with("variables "))
      for (const auto& u : spans(trace, name, "update"))
        CHECK(u["args"]["label"].get<std::string>().starts_with("w")); // "w", "w/replica_1"

  // Spans nest per track: each one ends before the one it is inside does.
  std::map<int, std::vector<std::pair<double, double>>> by_track;
  for (const auto& e : trace)
    if (e["ph"] == "X")
      by_track[e["tid"].get<int>()].emplace_back(e["ts"].get<double>(),
                                                 e["ts"].get<double>() + e["dur"].get<double>());
  for (auto& [tid, intervals] : by_track) {
    std::sort(intervals.begin(), intervals.end(), [](auto a, auto b) {
      return a.first < b.first || (a.first == b.first && a.second > b.second);
    });
    std::vector<double> open_ends;
    for (const auto& [begin, end] : intervals) {
      while (!open_ends.empty() && open_ends.back() <= begin)
        open_ends.pop_back();
      CAPTURE(tid);
      CHECK((open_ends.empty() || end <= open_ends.back() + 0.001));
      open_ends.push_back(end);
    }
  }

  // The all_reduce of each step overlaps across the replicas: they meet in it.
  const auto first = spans(trace, "replica 0", "all_reduce");
  const auto second = spans(trace, "replica 1", "all_reduce");
  for (const auto& a : first)
    for (const auto& b : second)
      if (a["args"]["step"] == b["args"]["step"]) {
        const double a0 = a["ts"], a1 = a0 + a["dur"].get<double>();
        const double b0 = b["ts"], b1 = b0 + b["dur"].get<double>();
        CHECK(std::max(a0, b0) <= std::min(a1, b1) + 0.001);
      }

  // Flow arrows: each merge_call wait starts one, the merge function ends it.
  std::multiset<std::uint64_t> starts, finishes;
  for (const auto& e : trace) {
    if (e["ph"] == "s")
      starts.insert(e["id"].get<std::uint64_t>());
    if (e["ph"] == "f")
      finishes.insert(e["id"].get<std::uint64_t>());
  }
  CHECK(starts.size() == 6);
  CHECK(starts == finishes);

  // The recording's own record: nothing dropped.
  const auto meta = std::find_if(trace.begin(), trace.end(),
                                 [](const json& e) { return e["name"] == "lockstep"; });
  REQUIRE(meta != trace.end());
  CHECK((*meta)["args"]["dropped_events"] == 0);
  CHECK((*meta)["args"]["steps_begun"] == 3);
}

TEST_CASE("timeline: the window keeps the steps it names") {
  temporary_directory dir{"lockstep-timeline"};
  const auto kept = [&](const std::string& steps) {
    const auto path = dir.path() / ("trace-" + std::to_string(std::hash<std::string>{}(steps)));
    {
      timeline_options on{path.string(), steps};
      run_known_program(10);
    }
    return steps_of(spans(read_trace(path), "replica 0", "run"));
  };
  CHECK(kept("first:2,last:3") == std::set<std::int64_t>{0, 1, 7, 8, 9});
  CHECK(kept("2-4") == std::set<std::int64_t>{2, 3, 4});
  CHECK(kept("every:4") == std::set<std::int64_t>{0, 4, 8});
  CHECK(kept("") == std::set<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("dump_flight_recorders: every live strategy's last collectives, next to the timeline") {
  temporary_directory dir{"lockstep-timeline"};
  timeline_options on{(dir.path() / "trace.json").string()};
  mirrored_strategy s{cpu_devices(2)};
  for (int step = 0; step < 3; ++step)
    s.run([](replica_context& ctx) { ctx.all_reduce(reduce_op::sum, tensor::scalar(1.0f)); });
  const auto first = dump_flight_recorders();
  const auto second = dump_flight_recorders();
  CHECK(first.parent_path() == dir.path());
  CHECK(first.filename().string().starts_with("flight-" + std::to_string(::getpid()) + "-"));
  CHECK(first != second); // numbered
  const auto dump = read_trace(first);
  std::vector<std::string> records;
  for (const auto& e : dump)
    if (e["name"] == "collective")
      records.push_back(e["args"]["record"].get<std::string>());
  REQUIRE(records.size() == 3);
  for (const auto& r : records) {
    CAPTURE(r);
    CHECK(r.find("all_reduce sum float32") != std::string::npos);
    CHECK(r.find("completed") != std::string::npos);
  }
  const auto names = track_names(dump);
  CHECK(std::any_of(names.begin(), names.end(),
                    [](const auto& n) { return n.second.starts_with("mirrored_strategy("); }));
  // A folder that is gone: an io_error naming the file.
  timeline_options gone{(dir.path() / "gone" / "trace.json").string()};
  const auto message = error_of<io_error>([] { dump_flight_recorders(); });
  CHECK(message.find("gone") != std::string::npos);
}

TEST_CASE("timeline: bad settings and an unwritable file are errors that name them") {
  runtime_options bad;
  for (const auto* steps : {"every:0", "first:2", "5-3", "x", "every:-1", "1-2-3"}) {
    CAPTURE(steps);
    bad.timeline_steps = steps;
    const auto message = error_of<value_error>([&] { bad.validate(); });
    CHECK(message.find("timeline_steps") != std::string::npos);
  }
  temporary_directory dir{"lockstep-timeline"};
  timeline_options on{(dir.path() / "no-such-folder" / "trace.json").string()};
  const auto message = error_of<io_error>([] { mirrored_strategy s{cpu_devices(2)}; });
  CHECK(message.find("no-such-folder") != std::string::npos);
}
