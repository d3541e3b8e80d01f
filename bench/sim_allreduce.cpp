// sim_allreduce: lockstep's all-reduce algorithms (ring, recursive
// doubling, Rabenseifner's halving-doubling: src/collectives/) on simulated
// clusters (tests/sim: SimGrid, docs/algorithms.md "A simulated
// cluster"), the table of their simulated time per size and host count
// with the α-β model's figure beside each:
//
//   bare    the algorithm alone, against its cost_of(...).seconds
//   agreed  with the agreement the communicator runs first, against
//           call_cost(...).seconds; `chosen` marks choose_algorithm's pick
//
//   sim_allreduce [--hosts 2,16,128,1024] [--sizes 4,256,...] [--topology star|fat_tree]
//                 [--gbits 25] [--latency-us 1] [--max-work BYTES] [--max-messages N]
//                 [--json FILE]
//
// Each run is one simulation (its own process: sim_cluster.hpp), every
// rank starting at simulated time 0, sizes only (the link moves no bytes
// for the data; every rank combines in one buffer, so the host's memory
// holds any size; tests/sim checks the results). A run whose work on this
// machine is over the limits is skipped and shown so: --max-work bounds
// hosts × the model's critical bytes (what the hosts combine and copy in
// all, about), --max-messages hosts × the model's steps (the simulator's
// context switches). Targets (--json's `targets`): on the star, every
// algorithm's bare time within 1.25x of its model; the chosen algorithm's
// agreed time within 1.1x of the best other's, at every (size, hosts) run.

#include "../tests/sim/sim_calls.hpp"
#include "../tests/sim/sim_cluster.hpp"

#include "bench_support.hpp"

#include "collectives/algorithm_choice.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

using namespace lockstep::detail;
using namespace lockstep::detail::sim;
using lockstep::bench::size_string;

namespace {

constexpr double model_limit = 1.25;
constexpr double choice_limit = 1.1;

struct options {
  std::vector<std::size_t> hosts{2, 16, 128, 1024};
  std::vector<std::size_t> sizes{4,         256,         4096,         64 * 1024,
                                 1u << 20,  16u << 20,   256u << 20};
  topology shape = topology::star;
  double gbits = 25;
  double latency_us = 1;
  double max_work = 64.0 * (1ull << 30);
  double max_messages = 2e6;
  std::string json;
};

constexpr const char* usage =
  "sim_allreduce [--hosts 2,16,128,1024] [--sizes 4,256,4096,65536,1048576,16777216,268435456]\n"
  "              [--topology star|fat_tree] [--gbits 25] [--latency-us 1]\n"
  "              [--max-work 68719476736] [--max-messages 2000000] [--json FILE]\n"
  "The all-reduce algorithms' simulated time on a SimGrid cluster against the\n"
  "alpha-beta model (docs/algorithms.md, \"A simulated cluster\").\n";

double parse_number(std::string_view flag, std::string_view text) {
  try {
    std::size_t used = 0;
    const auto value = std::stod(std::string{text}, &used);
    if (used == text.size() && value > 0)
      return value;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(std::string{flag} + ": expected a positive number, got '"
                              + std::string{text} + "'");
}

options parse(int argc, char** argv) {
  options o;
  lockstep::bench::parse_flags(argc, argv, usage, [&](std::string_view flag, std::string_view v) {
    if (flag == "--hosts")
      o.hosts = lockstep::bench::parse_list(flag, v, 2);
    else if (flag == "--sizes")
      o.sizes = lockstep::bench::parse_list(flag, v, 4);
    else if (flag == "--topology" && (v == "star" || v == "fat_tree"))
      o.shape = v == "star" ? topology::star : topology::fat_tree;
    else if (flag == "--topology")
      throw std::invalid_argument("--topology: star or fat_tree, not '" + std::string{v} + "'");
    else if (flag == "--gbits")
      o.gbits = parse_number(flag, v);
    else if (flag == "--latency-us")
      o.latency_us = parse_number(flag, v);
    else if (flag == "--max-work")
      o.max_work = parse_number(flag, v);
    else if (flag == "--max-messages")
      o.max_messages = parse_number(flag, v);
    else if (flag == "--json")
      o.json = std::string{v};
    else
      return false;
    return true;
  });
  for (const auto bytes : o.sizes)
    if (bytes % 4 != 0)
      throw std::invalid_argument("--sizes: " + std::to_string(bytes)
                                  + " is not a whole number of int32 elements");
  return o;
}

struct row {
  std::size_t hosts = 0;
  std::size_t bytes = 0;
  algorithm a = algorithm::ring;
  bool chosen = false;
  std::optional<double> bare_s;   ///< none: skipped
  double model_s = 0;             ///< cost_of(...).seconds
  std::optional<double> agreed_s; ///< none: skipped
  double call_model_s = 0;        ///< call_cost(...).seconds
};

/// Whether a run of `cost` on `hosts` hosts is within the limits.
bool affordable(const options& o, std::size_t hosts, const algorithm_cost& cost) {
  const auto n = static_cast<double>(hosts);
  return n * cost.bytes <= o.max_work && n * static_cast<double>(cost.steps) <= o.max_messages;
}

/// One simulated all-reduce; its simulated seconds.
double simulate_once(const platform_spec& spec, algorithm a, bool agreed, std::size_t bytes) {
  std::vector<std::uint8_t> shared(bytes);
  sim_network network;
  network.carry_payloads = false;
  const auto sim = simulate(spec, network, [&](sim_link& link) -> std::string {
    run_call(link, collective_kind::all_reduce, a, agreed, shared,
             link.now() + std::chrono::hours(1));
    return "";
  });
  if (const auto problem = sim.first_problem(); !problem.empty())
    throw std::runtime_error(std::string{to_string(a)} + " on " + std::to_string(spec.hosts)
                             + " hosts, " + std::to_string(bytes) + " B: " + problem);
  return sim.seconds();
}

std::string micros(const std::optional<double>& s) {
  if (!s)
    return "skipped";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", *s * 1e6);
  return buf;
}

std::string ratio(const std::optional<double>& s, double model) {
  if (!s)
    return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", *s / model);
  return buf;
}

using target = lockstep::bench::ratio_target;

std::vector<target> evaluate(const options& o, const std::vector<row>& rows) {
  std::vector<target> out;
  for (const auto hosts : o.hosts) {
    double worst_model = 0;
    double worst_choice = 0;
    bool any_model = false;
    bool any_choice = false;
    for (const auto bytes : o.sizes) {
      std::optional<double> chosen;
      double best_other = std::numeric_limits<double>::infinity();
      bool all_agreed = true;
      for (const auto& r : rows) {
        if (r.hosts != hosts || r.bytes != bytes)
          continue;
        if (r.bare_s) {
          worst_model = std::max(worst_model, *r.bare_s / r.model_s);
          any_model = true;
        }
        all_agreed = all_agreed && r.agreed_s.has_value();
        if (r.agreed_s && r.chosen)
          chosen = r.agreed_s;
        else if (r.agreed_s)
          best_other = std::min(best_other, *r.agreed_s);
      }
      if (chosen && all_agreed && best_other < std::numeric_limits<double>::infinity()) {
        worst_choice = std::max(worst_choice, *chosen / best_other);
        any_choice = true;
      }
    }
    const auto where = to_string(o.shape) + ", " + std::to_string(hosts) + " hosts";
    if (o.shape == topology::star && any_model)
      out.push_back({where + ": every algorithm's time / its cost_of (worst size)", worst_model,
                     model_limit});
    if (any_choice)
      out.push_back({where + ": the chosen algorithm's time / the best other's (worst size)",
                     worst_choice, choice_limit});
  }
  return out;
}

} // namespace

int main(int argc, char** argv) try {
  const auto o = parse(argc, argv);
  std::vector<row> rows;
  const auto started = std::chrono::steady_clock::now();
  for (const auto hosts : o.hosts) {
    const platform_spec spec{o.shape, hosts, gbit_per_s(o.gbits), o.latency_us * 1e-6};
    const auto costs = costs_of(spec);
    for (const auto bytes : o.sizes) {
      const auto chosen = choose_algorithm(collective_kind::all_reduce, hosts, bytes, costs);
      for (const auto a : algorithms_for(collective_kind::all_reduce)) {
        row r;
        r.hosts = hosts;
        r.bytes = bytes;
        r.a = a;
        r.chosen = a == chosen;
        const auto bare = cost_of(collective_kind::all_reduce, a, hosts, bytes);
        const auto call = call_cost(collective_kind::all_reduce, a, hosts, bytes);
        r.model_s = bare.seconds(costs);
        r.call_model_s = call.seconds(costs);
        if (affordable(o, hosts, bare))
          r.bare_s = simulate_once(spec, a, false, bytes);
        if (affordable(o, hosts, call))
          r.agreed_s = simulate_once(spec, a, true, bytes);
        std::fprintf(stderr, "%zu hosts, %s, %s: %s us\n", hosts, size_string(bytes).c_str(),
                     std::string{to_string(a)}.c_str(), micros(r.bare_s).c_str());
        rows.push_back(r);
      }
    }
  }
  const double wall_s =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  std::printf("## sim_allreduce: %s, %.0f Gb/s links, %.1f us a link (alpha %.1f us, beta %.3g "
              "GB/s)\n\n",
              to_string(o.shape).c_str(), o.gbits, o.latency_us,
              costs_of({o.shape, 1024, 1, o.latency_us * 1e-6}).alpha_s * 1e6,
              gbit_per_s(o.gbits) / 1e9);
  std::printf("| hosts | size | algorithm | bare us | cost_of us | ratio | agreed us | "
              "call_cost us | ratio | chosen |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---|\n");
  for (const auto& r : rows)
    std::printf("| %zu | %s | %s | %s | %.2f | %s | %s | %.2f | %s | %s |\n", r.hosts,
                size_string(r.bytes).c_str(), std::string{to_string(r.a)}.c_str(),
                micros(r.bare_s).c_str(), r.model_s * 1e6, ratio(r.bare_s, r.model_s).c_str(),
                micros(r.agreed_s).c_str(), r.call_model_s * 1e6,
                ratio(r.agreed_s, r.call_model_s).c_str(), r.chosen ? "yes" : "");
  const auto targets = evaluate(o, rows);
  std::printf("\n| target | measured | limit | |\n|---|---:|---:|---|\n");
  for (const auto& t : targets)
    std::printf("| %s | %.3f | <= %.2f | %s |\n", t.what.c_str(), t.measured, t.limit,
                t.pass() ? "pass" : "FAIL");
  std::printf("\n(%.0f s of wall time)\n", wall_s);

  if (!o.json.empty()) {
    nlohmann::json out;
    out["benchmark"] = "sim_allreduce";
    out["platform"] = {{"topology", to_string(o.shape)},
                       {"link_gbits", o.gbits},
                       {"link_latency_us", o.latency_us},
                       {"settings", engine_settings()}};
    out["rows"] = nlohmann::json::array();
    for (const auto& r : rows) {
      nlohmann::json j{{"hosts", r.hosts},
                       {"bytes", r.bytes},
                       {"algorithm", to_string(r.a)},
                       {"chosen", r.chosen},
                       {"cost_of_us", r.model_s * 1e6},
                       {"call_cost_us", r.call_model_s * 1e6}};
      j["bare_us"] = r.bare_s ? nlohmann::json(*r.bare_s * 1e6) : nlohmann::json(nullptr);
      j["agreed_us"] = r.agreed_s ? nlohmann::json(*r.agreed_s * 1e6) : nlohmann::json(nullptr);
      out["rows"].push_back(j);
    }
    out["targets"] = lockstep::bench::targets_json(targets);
    out["wall_s"] = wall_s;
    lockstep::bench::write_json_file(o.json, out.dump(2));
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "sim_allreduce: " << e.what() << "\n";
  return 2;
}
