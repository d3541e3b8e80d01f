// LOCKSTEP_FAULT: see fault_injection.hpp.

#include "runtime/fault_injection.hpp"

#include "lockstep/error.hpp"

#include <atomic>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace lockstep::detail {

namespace {

struct fault {
  std::string phase; // empty: no fault
  int signal = 0;
  long remaining = 0; // arrivals at `phase` until it fires
};

fault parse(const char* text) {
  if (text == nullptr || *text == '\0')
    return {};
  const std::string spec = text;
  const auto malformed = [&] {
    return value_error("LOCKSTEP_FAULT must be <phase>:<kill|stop>[:<n>] with phase agree, "
                       "reduce-scatter, all-gather or fan-out and n >= 1, got '"
                       + spec + "'");
  };
  const auto colon = spec.find(':');
  if (colon == std::string::npos)
    throw malformed();
  fault f;
  f.phase = spec.substr(0, colon);
  if (f.phase != "agree" && f.phase != "reduce-scatter" && f.phase != "all-gather"
      && f.phase != "fan-out")
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
  return f;
}

} // namespace

void fault_point(std::string_view phase) {
  static fault armed = parse(std::getenv("LOCKSTEP_FAULT"));
  static std::atomic<long> remaining{armed.remaining};
  if (armed.phase.empty() || phase != armed.phase) [[likely]]
    return;
  if (remaining.fetch_sub(1) != 1)
    return;
  std::fprintf(stderr, "LOCKSTEP_FAULT: %s at %s\n",
               armed.signal == SIGKILL ? "killed" : "stopped", armed.phase.c_str());
  std::fflush(stderr);
  std::raise(armed.signal);
}

} // namespace lockstep::detail
