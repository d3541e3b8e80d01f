// One worker of the netns suite (each on a host of its own, a network
// namespace; the test gives it TF_CONFIG, a token and perhaps
// LOCKSTEP_LISTEN): a multi_worker_mirrored_strategy that runs all-reduces
// of closed-form values and checks every element of every result, until a
// count or until one fails.
//
//   netns_worker [--peer-timeout-ms N] [--heartbeat-ms N] [--join-timeout-ms N]
//                [--pause-ms N] COUNT ELEMENTS
//
// COUNT all-reduces (0: until one fails) of ELEMENTS float32 a replica,
// replica g's element i holding g + i + 1, so every sum is exact. After
// each it prints "done K" (K counted from 1), then waits --pause-ms.
// Exit status: 0 after COUNT, printing "ok all_reduce COUNT"; 3 when a
// lockstep error ends one (the strategy's start included), printing
//   failed in all_reduce #K at T ns: <kind>: <what>
// with T the steady (CLOCK_MONOTONIC) clock when it was caught, which the
// test compares with the time it caused the fault; 1 when a result is
// wrong or anything else fails ("worker failed: ...").
// Defaults: peer_timeout 2000 ms, heartbeat 200 ms, join 60 s, the
// collectives' timeout 60 s (longer than any fault the tests make).

#include "lockstep/lockstep.hpp"

#include "../reduce_values.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace lockstep;
using namespace std::chrono_literals;

namespace {

/// The name of `e`'s type, for the test to check.
std::string kind_of(const error& e) {
  if (dynamic_cast<const peer_lost_error*>(&e))
    return "peer_lost_error";
  if (dynamic_cast<const timeout_error*>(&e))
    return "timeout_error";
  if (dynamic_cast<const authentication_error*>(&e))
    return "authentication_error";
  if (dynamic_cast<const value_error*>(&e))
    return "value_error";
  return "error";
}

std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now().time_since_epoch())
                                      .count());
}

std::uint64_t number(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const auto value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0')
    throw std::runtime_error(what + ": '" + text + "' is not a whole number");
  return value;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  multi_worker_options options;
  options.peer_timeout = 2000ms;
  options.heartbeat_interval = 200ms;
  options.join_timeout = 60s;
  options.timeout = 60s;
  std::chrono::milliseconds pause{0};
  std::uint64_t done = 0;
  try {
    while (args.size() >= 2 && args[0].starts_with("--")) {
      const std::chrono::milliseconds ms(number(args[1], args[0]));
      if (args[0] == "--peer-timeout-ms")
        options.peer_timeout = ms;
      else if (args[0] == "--heartbeat-ms")
        options.heartbeat_interval = ms;
      else if (args[0] == "--join-timeout-ms")
        options.join_timeout = ms;
      else if (args[0] == "--pause-ms")
        pause = ms;
      else
        throw std::runtime_error("unknown option " + args[0]);
      args.erase(args.begin(), args.begin() + 2);
    }
    if (args.size() != 2)
      throw std::runtime_error("usage: netns_worker [options] COUNT ELEMENTS");
    const auto count = number(args[0], "COUNT");
    const auto elements = number(args[1], "ELEMENTS");
    // The strategy outlives the catch, so that T is when the error came,
    // not when the strategy had stopped.
    std::optional<multi_worker_mirrored_strategy> s;
    try {
      s.emplace(cluster_resolver{}, options);
      const auto replicas = s->num_replicas_in_sync();
      for (; count == 0 || done < count;) {
        const auto results = s->run([&](replica_context& ctx) {
          const auto g = ctx.replica_id_in_sync_group(); // global
          return ctx.all_reduce(reduce_op::sum,
                                make_input(dtype::f32, static_cast<std::int64_t>(elements),
                                           [&](std::size_t i) {
                                             return input_value(reduce_op::sum, g, i);
                                           }));
        });
        for (const auto& t : results.values()) {
          const auto data = t.data<float>();
          if (data.size() != elements)
            throw std::runtime_error("all_reduce #" + std::to_string(done + 1) + " gave "
                                     + std::to_string(data.size()) + " elements");
          for (std::size_t i = 0; i < elements; ++i)
            if (data[i] != expected_value<float>(reduce_op::sum, replicas, i))
              throw std::runtime_error(
                "all_reduce #" + std::to_string(done + 1) + ": element " + std::to_string(i)
                + " is " + std::to_string(data[i]) + ", expected "
                + std::to_string(expected_value<float>(reduce_op::sum, replicas, i)));
        }
        ++done;
        std::printf("done %llu\n", static_cast<unsigned long long>(done));
        std::fflush(stdout);
        std::this_thread::sleep_for(pause);
      }
      std::printf("ok all_reduce %llu\n", static_cast<unsigned long long>(done));
      return 0;
    } catch (const error& e) {
      const auto at = steady_ns();
      std::printf("failed in all_reduce #%llu at %llu ns: %s: %s\n",
                  static_cast<unsigned long long>(done + 1), static_cast<unsigned long long>(at),
                  kind_of(e).c_str(), e.what());
      std::fflush(stdout);
      return 3;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker failed: %s\n", e.what());
    return 1;
  }
}
