// The simulated cluster (docs/algorithms.md, "A simulated cluster"):
// lockstep's own algorithms (src/collectives/) on SimGrid platforms of 2 to
// 1,024 hosts through sim_link. Checks: a transfer costs exactly α + S/β
// under sim_platform's settings, both ways at once as one way; every
// algorithm's results are the closed forms (the ring's, for integers) with
// payloads combined up to 1,024 hosts × 64 KiB; on the star each
// algorithm's simulated time is within 1.25x of its own cost_of(...)
// .seconds and at least it; the chosen algorithm (choose_algorithm) is
// never more than 1.1x the best of the others; a host that stops
// mid-collective fails every survivor at the deadline. A subset of sizes
// and host counts (the full sweep is bench/sim_allreduce's).

#include "sim_calls.hpp"
#include "sim_cluster.hpp"

#include "../ring_values.hpp"

#include "collectives/algorithm_choice.hpp"
#include "runtime/little_endian.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace lockstep;
using namespace lockstep::detail;
using namespace lockstep::detail::sim;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kib = 1024;
constexpr std::size_t mib = 1024 * kib;

/// |a - b| within `relative` of b.
bool close_to(double a, double b, double relative = 1e-9) {
  return std::abs(a - b) <= relative * std::abs(b);
}

/// Simulated seconds of one transfer of `bytes` from rank `from` to rank
/// `to` (and, with `both_ways`, of `bytes` back at the same time).
double transfer_seconds(const platform_spec& spec, std::size_t from, std::size_t to,
                        std::size_t bytes, bool both_ways) {
  sim_network network;
  network.carry_payloads = false;
  const auto sim = simulate(spec, network, [&](sim_link& link) -> std::string {
    std::vector<std::uint8_t> buffer(link.rank() == from || link.rank() == to ? 1 : 0);
    const std::span<std::uint8_t> sized(buffer.data(), bytes); // sizes only: nothing is read
    const auto deadline = link.now() + 1000s;
    if (link.rank() == from)
      link.exchange(to, sized, both_ways ? to : link::no_rank,
                    both_ways ? sized : std::span<std::uint8_t>{}, deadline);
    else if (link.rank() == to)
      link.exchange(both_ways ? from : link::no_rank,
                    both_ways ? sized : std::span<std::uint8_t>{}, from, sized, deadline);
    return "";
  });
  REQUIRE(sim.first_problem() == "");
  return sim.seconds();
}

} // namespace

TEST_CASE("a transfer of S bytes between two hosts costs alpha + S/beta, both ways at once as "
          "one way") {
  for (const auto shape : {topology::star, topology::fat_tree})
    for (const double gbits : {25.0, 100.0})
      for (const double latency_us : {1.0, 5.0})
        for (const std::size_t bytes : {std::size_t{4}, 64 * kib, 256 * mib}) {
          const platform_spec spec{shape, 16, gbit_per_s(gbits), latency_us * 1e-6};
          const auto costs = costs_of(spec);
          const double expected = costs.alpha_s + static_cast<double>(bytes) / costs.beta_bytes_per_s;
          CAPTURE(to_string(shape));
          CAPTURE(gbits);
          CAPTURE(latency_us);
          CAPTURE(bytes);
          // Hosts 0 and 15: under different leaves of the fat tree (4 x 4).
          CHECK(close_to(transfer_seconds(spec, 0, 15, bytes, false), expected));
          CHECK(close_to(transfer_seconds(spec, 0, 15, bytes, true), expected));
        }
}
