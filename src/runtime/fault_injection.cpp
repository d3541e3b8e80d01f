// LOCKSTEP_FAULT: see fault_injection.hpp.

#include "runtime/fault_injection.hpp"

#include "lockstep/error.hpp"

#include <atomic>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace lockstep::detail {

namespace {

struct fault {
  std::string phase; // empty: no fault
  int signal = 0;
  long remaining = 0; // arrivals at `phase` until it fires
  std::optional<std::uint64_t> rank, generation; // the worker it is for
};

/// The whole number in `name`, if set; value_error naming it otherwise.
std::optional<std::uint64_t> worker_filter(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0')
    return std::nullopt;
  const std::string_view value = text;
  std::uint64_t number = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
  if (error != std::errc{} || end != value.data() + value.size())
    throw value_error(std::string(name) + " must be a whole number, got '" + text + "'");
  return number;
}

/// Who this process is; set by set_fault_worker.
std::atomic<bool> worker_known{false};
std::atomic<std::uint64_t> worker_rank{0}, worker_generation{0};

bool is_for_this_worker(const fault& f) {
  if (!f.rank && !f.generation)
    return true;
  if (!worker_known.load())
    return false;
  return (!f.rank || *f.rank == worker_rank.load())
         && (!f.generation || *f.generation == worker_generation.load());
}

fault parse(const char* text) {
  if (text == nullptr || *text == '\0')
    return {};
  const std::string spec = text;
  const auto malformed = [&] {
    return value_error("LOCKSTEP_FAULT must be <phase>:<kill|stop>[:<n>] with phase agree, "
                       "reduce-scatter, all-gather, fan-out or ring-connect and n >= 1, got '"
                       + spec + "'");
  };
  const auto colon = spec.find(':');
  if (colon == std::string::npos)
    throw malformed();
  fault f;
  f.phase = spec.substr(0, colon);
  if (f.phase != "agree" && f.phase != "reduce-scatter" && f.phase != "all-gather"
      && f.phase != "fan-out" && f.phase != "ring-connect")
    throw malformed();
  const auto rest = spec.substr(colon + 1);
  const auto second = rest.find(':');
  const auto action = rest.substr(0, second);
  if (action != "kill" && action != "stop")
    throw malformed();
  f.signal = action == "kill" ? SIGKILL : SIGSTOP;
  f.remaining = 1;
  if (second != std::string::npos) {
    const auto count = rest.substr(second + 1);
    const auto [end, error]
      = std::from_chars(count.data(), count.data() + count.size(), f.remaining);
    if (error != std::errc{} || end != count.data() + count.size() || f.remaining < 1)
      throw malformed();
  }
  f.rank = worker_filter("LOCKSTEP_FAULT_RANK");
  f.generation = worker_filter("LOCKSTEP_FAULT_GENERATION");
  return f;
}

} // namespace

namespace {
thread_local int pauses = 0; // live faults_paused on this thread
} // namespace

faults_paused::faults_paused() noexcept {
  ++pauses;
}

faults_paused::~faults_paused() {
  --pauses;
}

void fault_point(std::string_view phase) {
  static fault armed = parse(std::getenv("LOCKSTEP_FAULT"));
  static std::atomic<long> remaining{armed.remaining};
  if (armed.phase.empty() || phase != armed.phase || pauses != 0) [[likely]]
    return;
  if (!is_for_this_worker(armed) || remaining.fetch_sub(1) != 1)
    return;
  std::fprintf(stderr, "LOCKSTEP_FAULT: %s at %s\n",
               armed.signal == SIGKILL ? "killed" : "stopped", armed.phase.c_str());
  std::fflush(stderr);
  std::raise(armed.signal);
}

void set_fault_worker(std::size_t rank, std::uint64_t generation) {
  worker_rank = rank;
  worker_generation = generation;
  worker_known = true;
}

} // namespace lockstep::detail
