// dump_flight_recorders and the dump signal (lockstep/diagnostics.hpp):
// the strategies alive in the process register here, and a dump writes
// each one's flight recorder and stall report as trace-event JSON.

#include "lockstep/diagnostics.hpp"

#include "io/atomic_file.hpp"
#include "runtime/log.hpp"
#include "runtime/thread_start.hpp"
#include "runtime/timeline.hpp"
#include "strategies/flight_dump.hpp"
#include "replication/strategy_state.hpp"

#include "lockstep/error.hpp"
#include "lockstep/runtime_options.hpp"

#include <nlohmann/json.hpp>

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace lockstep::detail {

namespace {

struct dump_registry {
  std::mutex mutex;
  std::vector<std::weak_ptr<strategy_state>> strategies;
  std::atomic<int> dumps{0};
};

dump_registry& registry() {
  static auto* r = new dump_registry; // threads may dump until exit
  return *r;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      lines.push_back(line);
  return lines;
}

} // namespace

void register_for_dumps(const std::shared_ptr<strategy_state>& state) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock{r.mutex};
  std::erase_if(r.strategies, [](const auto& weak) { return weak.expired(); });
  r.strategies.push_back(state);
}

} // namespace lockstep::detail

namespace lockstep {

std::filesystem::path dump_flight_recorders() {
  using nlohmann::json;
  auto& r = detail::registry();
  std::vector<std::shared_ptr<detail::strategy_state>> alive;
  {
    std::lock_guard<std::mutex> lock{r.mutex};
    for (const auto& weak : r.strategies)
      if (auto s = weak.lock())
        alive.push_back(std::move(s));
  }
  const auto pid = static_cast<long long>(::getpid());
  // On the timeline's clock (time 0 when its recording started), so that
  // the two open side by side.
  const double now_us =
    static_cast<double>(detail::timeline_now() - detail::timeline_origin()) / 1e3;
  json events = json::array();
  events.push_back(json{{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
                    {"args", {{"name", "flight recorder of pid " + std::to_string(pid)}}}});
  for (std::size_t k = 0; k < alive.size(); ++k) {
    const auto& state = *alive[k];
    const auto tid = static_cast<long long>(k + 1);
    events.push_back(json{{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                      {"args", {{"name", state.name()}}}});
    const auto& communicator = state.collectives.communicator;
    if (!communicator)
      continue; // its all_reduce goes through merge_call: nothing recorded
    const auto records = detail::lines_of(communicator->session().dump());
    // One instant event per collective, oldest first, spaced 1 us apart
    // before the dump's time so that viewers keep their order.
    const auto instant = [&](const char* name, double ts, json args) {
      events.push_back(json{{"name", name}, {"ph", "i"}, {"s", "t"}, {"pid", pid}, {"tid", tid},
                            {"ts", ts}, {"args", std::move(args)}});
    };
    for (std::size_t i = 0; i < records.size(); ++i)
      instant("collective", now_us - static_cast<double>(records.size() - i),
              {{"record", records[i]}, {"index", i}});
    if (const auto stall = communicator->session().stall_report(0); !stall.empty())
      instant("waiting", now_us, {{"report", stall}});
  }
  events.push_back(json{{"name", "lockstep"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
                    {"args", {{"strategies", alive.size()}, {"dumped_at_us", now_us}}}});

  auto folder = std::filesystem::path{get_runtime_options().timeline}.parent_path();
  if (folder.empty())
    folder = "."; // no timeline, or one in the current directory
  const auto path = folder / ("flight-" + std::to_string(pid) + "-"
                              + std::to_string(r.dumps.fetch_add(1)) + ".json");
  detail::write_file_atomically(path, events.dump(1) + "\n"); // io_error naming the file
  return path;
}

bool watch_dump_signal() {
  const int signal = get_runtime_options().dump_signal;
  if (signal == 0)
    return false;
  static std::mutex mutex;
  static int watched = 0;
  std::lock_guard<std::mutex> lock{mutex};
  if (watched == signal)
    return true;
  if (watched != 0) {
    LOCKSTEP_LOG_WARN("dump signal {} is watched already; {} is not", watched, signal);
    return false;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signal);
  // Blocked here first, so the watcher, which inherits the mask, and any
  // thread started from here on leave it to sigwait.
  sigset_t before;
  if (const int error = ::pthread_sigmask(SIG_BLOCK, &set, &before); error != 0)
    throw resource_error(std::string{"watch_dump_signal: pthread_sigmask failed: "}
                         + std::strerror(error));
  const auto watch = [set] {
    for (;;) {
      int got = 0;
      if (::sigwait(&set, &got) != 0)
        continue;
      try {
        const auto path = dump_flight_recorders();
        LOCKSTEP_LOG_WARN("signal {}: flight recorders written to {}", got, path.string());
      } catch (const std::exception& e) {
        LOCKSTEP_LOG_ERROR("signal {}: the flight recorders could not be written: {}", got,
                           e.what());
      }
    }
  };
  try {
    detail::start_thread("the dump-signal watcher (signal " + std::to_string(signal) + ")", watch)
      .detach(); // for the life of the process
  } catch (...) {
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr); // nobody would take the signal
    throw; // resource_error
  }
  watched = signal;
  return true;
}

} // namespace lockstep
