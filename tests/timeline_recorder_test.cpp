// The timeline's recorder without a strategy (no CAF, so it also runs
// under ThreadSanitizer): threads record at once into their own rings
// while the writer drains them; every event is written or counted as
// dropped, each thread's in order; a recording ends when its last holder
// lets go, and a new one starts afresh.

#include "runtime/timeline.hpp"

#include "lockstep/error.hpp"
#include "lockstep/runtime_options.hpp"

#include "file_support.hpp"
#include "timeline_support.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace lockstep;
using namespace lockstep::detail;
using json = nlohmann::json;

namespace {

json lockstep_record(const json& trace) {
  for (const auto& e : trace)
    if (e["name"] == "lockstep")
      return e;
  FAIL("no lockstep record");
  return {};
}

} // namespace

TEST_CASE("timeline recorder: threads record at once; nothing is lost unaccounted") {
  temporary_directory dir{"lockstep-timeline-recorder"};
  const auto path = dir.path() / "trace.json";
  constexpr int threads = 4;
  constexpr int spans_each = 20'000; // more than a ring holds: the writer drains while they run
  {
    timeline_options on{path.string(), "0-0"}; // every event is in step 0
    auto recording = timeline_hold();
    REQUIRE(recording);
    CHECK(timeline_on());
    CHECK(timeline_begin_steps(1) == 0);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t)
      workers.emplace_back([t] {
        const auto track = timeline_track(track_kind::replica, static_cast<std::uint32_t>(t));
        timeline_set_thread_step(0);
        for (int i = 0; i < spans_each; ++i) {
          timeline_args args;
          args.seq = i;
          timeline_span(track, "work", "test", timeline_now(), timeline_now(), args);
          if (i % 1000 == 999)
            std::this_thread::sleep_for(std::chrono::milliseconds{1});
        }
      });
    for (auto& w : workers)
      w.join();
  }
  CHECK_FALSE(timeline_on());
  const auto trace = read_trace(path);
  std::map<int, std::vector<std::int64_t>> seqs; // by track
  for (const auto& e : trace)
    if (e["ph"] == "X")
      seqs[e["tid"].get<int>()].push_back(e["args"]["seq"].get<std::int64_t>());
  std::size_t written = 0;
  for (const auto& [tid, s] : seqs) {
    CAPTURE(tid);
    CHECK(std::is_sorted(s.begin(), s.end())); // each thread's events in order
    written += s.size();
  }
  const auto record = lockstep_record(trace);
  CHECK(record["args"]["written_events"].get<std::size_t>() == written);
  CHECK(written + record["args"]["dropped_events"].get<std::size_t>()
        == std::size_t{threads} * spans_each);
  CHECK(written > 0);
}

TEST_CASE("timeline recorder: one recording per run of holders; off without a file") {
  temporary_directory dir{"lockstep-timeline-recorder"};
  const auto path = dir.path() / "trace.json";
  {
    timeline_options off{""};
    CHECK_FALSE(timeline_hold());
    CHECK_FALSE(timeline_on());
  }
  timeline_options on{path.string()};
  for (int run = 0; run < 2; ++run) {
    CAPTURE(run);
    {
      auto first = timeline_hold();
      auto second = timeline_hold();
      CHECK(first == second); // the same recording
      const auto track = timeline_track(track_kind::process, 0);
      timeline_span(track, "checkpoint save", "checkpoint", timeline_now(), timeline_now());
      first.reset();
      CHECK(timeline_on()); // still held
    }
    CHECK_FALSE(timeline_on());
    const auto trace = read_trace(path); // rewritten by each recording
    std::size_t spans = 0;
    for (const auto& e : trace)
      spans += e["ph"] == "X";
    CHECK(spans == 1);
  }
  auto ranked = timeline_hold(3);
  ranked.reset();
  CHECK(std::filesystem::exists(path.string() + ".rank-3"));
  CHECK(read_trace(path.string() + ".rank-3").front()["pid"] == 3);
}

TEST_CASE("timeline_window: forms and errors") {
  CHECK(timeline_window::parse("").at_head(49));
  CHECK_FALSE(timeline_window::parse("").at_head(50));
  CHECK(timeline_window::parse("first:0,last:5").last == 5);
  CHECK(timeline_window::parse("3-5").at_head(3));
  CHECK_FALSE(timeline_window::parse("3-5").at_head(6));
  CHECK(timeline_window::parse("every:3").at_head(6));
  CHECK_FALSE(timeline_window::parse("every:3").at_head(7));
  for (const auto* bad : {"every:0", "every:", "first:1", "first:x,last:2", "9-3", "-3", "3-",
                          "a-b", "every:-2", "1-2-3", "steps"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(timeline_window::parse(bad), value_error);
  }
}
