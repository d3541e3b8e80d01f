#include "collectives/link_probe.hpp"

#include "collectives/binomial_tree.hpp"
#include "collectives/byte_reduction.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace lockstep::detail {

namespace {

double seconds_between(link::time_point from, link::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2),
                   values.end());
  return values[values.size() / 2];
}

/// Rank 0's measurement against rank 1, which echoes.
link_costs measure(link& group, link::time_point deadline) {
  const bool measures = group.rank() == 0;
  const auto peer = measures ? std::size_t{1} : std::size_t{0};
  std::vector<std::uint8_t> small(8);
  std::vector<double> trips;
  for (std::size_t i = 0; i < probe_round_trips; ++i) {
    const auto start = group.now();
    if (measures) {
      group.send(peer, small, deadline);
      group.receive(peer, small, deadline);
    } else {
      group.receive(peer, small, deadline);
      group.send(peer, small, deadline);
    }
    trips.push_back(seconds_between(start, group.now()));
  }
  const auto alpha = median(trips) / 2;
  // Both ways at once, as the algorithms' steps move them.
  std::vector<std::uint8_t> out(probe_bytes);
  std::vector<std::uint8_t> in(probe_bytes);
  std::vector<double> transfers;
  for (std::size_t i = 0; i < probe_transfers; ++i) {
    group.exchange(peer, small, peer, small, deadline); // start together
    const auto start = group.now();
    group.exchange(peer, out, peer, in, deadline);
    transfers.push_back(seconds_between(start, group.now()));
  }
  const auto transfer = median(transfers);
  const auto beta = static_cast<double>(probe_bytes) / std::max(transfer - alpha, transfer / 100);
  if (!measures)
    return {alpha, beta};
  // γ on the clock the algorithms see, while rank 1 waits for the broadcast.
  std::vector<double> combines;
  for (std::size_t i = 0; i < probe_transfers; ++i) {
    const auto start = std::chrono::steady_clock::now();
    combine_bytes(reduce_op::sum, dtype::f32, out.data(), in.data(), probe_bytes);
    combines.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                         .count());
  }
  return {alpha, beta, static_cast<double>(probe_bytes) / std::max(median(combines), 1e-9)};
}

} // namespace

link_costs probe_link_costs(link& group, link::time_point deadline) {
  if (group.size() <= 1)
    return {0, std::numeric_limits<double>::infinity(), 0};
  link_costs costs;
  if (group.rank() <= 1)
    costs = measure(group, deadline);
  double wire[3] = {costs.alpha_s, costs.beta_bytes_per_s, costs.gamma_bytes_per_s};
  binomial_tree_broadcast(group, 0, {reinterpret_cast<std::uint8_t*>(wire), sizeof wire},
                          deadline);
  return {wire[0], wire[1], wire[2]};
}

link_costs parse_link_costs(std::string_view text) {
  const auto bad = [&](const char* why) {
    return value_error("LOCKSTEP_LINK_COSTS='" + std::string{text} + "': " + why
                       + " (expected ALPHA_US,BETA_GBPS[,GAMMA_GBPS]: the latency of a "
                         "message in microseconds, a link's bandwidth in GB/s and, optionally, "
                         "how fast a worker combines in GB/s, e.g. 30,2.5 or 30,2.5,8)");
  };
  const auto comma = text.find(',');
  if (comma == std::string_view::npos)
    throw bad("no comma");
  const auto second = text.find(',', comma + 1);
  double alpha_us = 0;
  double beta_gbps = 0;
  double gamma_gbps = 0;
  const auto number = [&](std::string_view part, double& value) {
    const auto* end = part.data() + part.size();
    const auto [at, error] = std::from_chars(part.data(), end, value);
    return error == std::errc{} && at == end && std::isfinite(value) && value > 0;
  };
  if (!number(text.substr(0, comma), alpha_us))
    throw bad("the latency is not a positive number");
  if (!number(text.substr(comma + 1, second == std::string_view::npos ? second
                                                                      : second - comma - 1),
              beta_gbps))
    throw bad("the bandwidth is not a positive number");
  if (second != std::string_view::npos && !number(text.substr(second + 1), gamma_gbps))
    throw bad("the combining rate is not a positive number");
  return {alpha_us * 1e-6, beta_gbps * 1e9, gamma_gbps * 1e9};
}

} // namespace lockstep::detail
