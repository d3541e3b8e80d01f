#pragma once

// sim_platform: the simulated clusters that tests/sim and bench/sim_allreduce
// run lockstep's algorithms on (docs/algorithms.md, "A simulated cluster"),
// built with SimGrid's NetZone API, and the SimGrid settings that make a
// transfer of S bytes between two hosts cost exactly α + S/β:
//
//   network/model:CM02            the plain max-min model (no TCP factors)
//   network/latency-factor:1      latency as the platform says
//   network/bandwidth-factor:1    bandwidth as the platform says
//   network/weight-S:0            flows share a link evenly (no RTT bias)
//   network/TCP-gamma:0           no TCP window bound on a flow's rate
//   network/crosstraffic:0        no reverse flow of acknowledgements
//   contexts/factory:thread       each actor a thread (the algorithms keep
//                                 thread_local scratch)
//
// Platforms (every link split-duplex: each direction has the whole
// bandwidth, so an exchange sends and receives at once):
//   star      each host one link to a central router: a route between two
//             hosts is 2 links, α = 2 × link latency, β = link bandwidth
//   fat tree  two levels (SimGrid's fat-tree zone): leaves of k hosts, each
//             leaf switch with one link up to each of k top switches (full
//             bisection); a route is 2 links inside a leaf, 4 between
//             leaves; α = 4 × link latency (the longest route), β = link
//             bandwidth

#include "collectives/algorithm_choice.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace simgrid::s4u {
class Host;
}

namespace lockstep::detail::sim {

enum class topology { star, fat_tree };

std::string to_string(topology shape);

struct platform_spec {
  topology shape = topology::star;
  std::size_t hosts = 2;
  double link_bytes_per_s = 25e9 / 8; ///< 25 Gb/s
  double link_latency_s = 1e-6;
};

/// Gigabits per second as bytes per second.
constexpr double gbit_per_s(double gbits) { return gbits * 1e9 / 8; }

/// The α (longest route's latency) and β (a route's bandwidth) of `spec`.
link_costs costs_of(const platform_spec& spec);

/// The fat tree's hosts per leaf for `hosts` hosts: the largest divisor of
/// `hosts` at most its square root (a prime count: one leaf of all).
std::size_t leaf_hosts(std::size_t hosts);

/// The settings of the file comment ("network/model:CM02", ...), which
/// the engine takes on its command line (--cfg=...): the context factory
/// must be chosen before the engine starts.
std::vector<std::string> engine_settings();

/// Builds `spec`'s platform on the running engine; its hosts by rank.
/// Throws value_error for fewer than 2 hosts, or a bandwidth or latency
/// that is not positive.
std::vector<simgrid::s4u::Host*> build_platform(const platform_spec& spec);

} // namespace lockstep::detail::sim
