#include "collectives/algorithm_choice.hpp"

#include "collectives/core_pacing.hpp"
#include "collectives/power_of_two_core.hpp"
#include "collectives/ring_collectives.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace lockstep::detail {

namespace {

constexpr std::array<algorithm, 3> all_reduce_algorithms{
  algorithm::ring, algorithm::recursive_doubling, algorithm::halving_doubling};
constexpr std::array<algorithm, 2> all_gather_algorithms{algorithm::ring,
                                                         algorithm::recursive_doubling};
constexpr std::array<algorithm, 2> broadcast_algorithms{algorithm::ring, algorithm::binomial_tree};
constexpr std::array<algorithm, 1> reduce_scatter_algorithms{algorithm::ring};

constexpr std::array<std::string_view, collective_kinds> kind_names{
  "all_reduce", "all_gather", "broadcast", "reduce_scatter"};
constexpr std::array<std::string_view, algorithm_count> algorithm_names{
  "ring", "recursive_doubling", "halving_doubling", "binomial_tree"};

double ceil_div(std::size_t bytes, std::size_t parts) {
  return static_cast<double>((bytes + parts - 1) / parts);
}

/// The latencies of a log-step core with its fold, unpaced: a rank that
/// folds in receives the fold while its partners ahead already send it
/// their first messages, so the fold costs one α where its last partner
/// is ahead (extra <= core / 2) and two where that partner folded in too.
std::size_t folded_latencies(const power_of_two_core& core) {
  if (core.extra == 0)
    return core.steps();
  return core.steps() + (2 * core.extra <= core.core ? 1 : 2);
}

/// Recursive doubling over the power-of-two core, each rank starting with
/// `unit` bytes and gathering the others' (an all-gather of blocks, the
/// agreement of records): in step k the largest message holds the units
/// of 2^k virtual ranks, the first of which stand for two ranks each; the
/// fold hands one unit in and the whole (ranks units) back.
algorithm_cost doubling_gather(std::size_t ranks, double unit) {
  const power_of_two_core core(ranks);
  algorithm_cost cost;
  cost.steps = folded_latencies(core);
  for (std::size_t m = 1; m < core.core; m *= 2)
    cost.bytes += static_cast<double>(m + std::min(m, core.extra)) * unit;
  if (core.extra > 0)
    cost.bytes += unit + static_cast<double>(ranks) * unit;
  return cost;
}

algorithm_cost operator+(algorithm_cost a, const algorithm_cost& b) {
  a.steps += b.steps;
  a.bytes += b.bytes;
  a.combined += b.combined;
  a.paced_steps += b.paced_steps;
  a.unpaced_bytes += b.unpaced_bytes;
  a.call_bytes = std::max(a.call_bytes, b.call_bytes);
  return a;
}

/// Paced (core_pacing.hpp), a folded core loses the overlap of its fold
/// (log2 core + 2 latencies) and waits one α in each step that paces.
std::size_t paced_latencies(const power_of_two_core& core, std::size_t pacing_steps) {
  if (pacing_steps == 0)
    return 0;
  return core.steps() + 2 - folded_latencies(core) + pacing_steps;
}

bool ring_small_path(std::size_t ranks, std::size_t bytes) {
  return (ranks - 1) * bytes <= small_all_reduce_bytes;
}

[[noreturn]] void cannot_run(collective_kind kind, algorithm a) {
  throw value_error("algorithm " + std::string{to_string(a)} + " cannot run "
                    + std::string{to_string(kind)});
}

std::string names_list() {
  std::string names;
  for (const auto name : algorithm_names)
    names += std::string{names.empty() ? "" : ", "} + std::string{name};
  return names;
}

} // namespace

std::string_view to_string(collective_kind kind) noexcept {
  return kind_names[static_cast<std::size_t>(kind)];
}

std::string_view to_string(algorithm a) noexcept {
  return algorithm_names[static_cast<std::size_t>(a)];
}

std::optional<algorithm> algorithm_named(std::string_view name) {
  for (std::size_t i = 0; i < algorithm_count; ++i)
    if (algorithm_names[i] == name)
      return static_cast<algorithm>(i);
  return std::nullopt;
}

bool runs(collective_kind kind, algorithm a) {
  const auto list = algorithms_for(kind);
  return std::find(list.begin(), list.end(), a) != list.end();
}

std::span<const algorithm> algorithms_for(collective_kind kind) noexcept {
  switch (kind) {
    case collective_kind::all_reduce:
      return all_reduce_algorithms;
    case collective_kind::all_gather:
      return all_gather_algorithms;
    case collective_kind::broadcast:
      return broadcast_algorithms;
    case collective_kind::reduce_scatter:
      break;
  }
  return reduce_scatter_algorithms;
}

algorithm_cost cost_of(collective_kind kind, algorithm a, std::size_t ranks, std::size_t bytes) {
  if (!runs(kind, a))
    cannot_run(kind, a);
  if (ranks <= 1)
    return {};
  const auto n = static_cast<double>(ranks);
  const auto size = static_cast<double>(bytes);
  const power_of_two_core core(ranks);
  const auto levels = static_cast<std::size_t>(std::countr_zero(core.core));
  const auto fold = core.extra > 0 ? std::size_t{2} : std::size_t{0};
  switch (kind) {
    case collective_kind::reduce_scatter: // the ring's all-reduce of the input, then a copy
    case collective_kind::all_reduce: {
      const auto folded = fold > 0 ? size : 0.0; // the fold combines one buffer
      if (a == algorithm::recursive_doubling) {
        const auto pacing = doubling_paced_steps(core);
        return {folded_latencies(core), static_cast<double>(levels + fold) * size,
                static_cast<double>(levels) * size + folded, paced_latencies(core, pacing),
                static_cast<double>(pacing) * size, bytes};
      }
      if (a == algorithm::halving_doubling) {
        const auto segment = ceil_div(bytes, core.core);
        const auto halves = static_cast<double>(core.core - 1) * segment;
        return {2 * levels + fold, 2 * halves + static_cast<double>(fold) * size,
                halves + folded, halving_paced_steps(core),
                static_cast<double>(halving_paced_segments(core)) * segment, bytes};
      }
      if (ring_small_path(ranks, bytes))
        return {ranks - 1, (n - 1) * size, (n - 1) * size};
      const auto segments = (n - 1) * ceil_div(bytes, ranks);
      return {2 * (ranks - 1), 2 * segments, segments};
    }
    case collective_kind::all_gather:
      if (a == algorithm::recursive_doubling)
        return doubling_gather(ranks, ceil_div(bytes, ranks));
      return {ranks - 1, (n - 1) * ceil_div(bytes, ranks)};
    case collective_kind::broadcast:
      if (a == algorithm::binomial_tree) {
        const auto steps = static_cast<std::size_t>(std::bit_width(ranks - 1));
        return {steps, static_cast<double>(steps) * size};
      }
      return {ranks - 1, (n - 1) * size};
  }
  return {};
}

double algorithm_cost::seconds(const link_costs& link) const {
  const bool paced = paced_steps > 0 && call_bytes >= paced_from_bytes(link);
  const auto latencies = static_cast<double>(steps + (paced ? paced_steps : 0));
  return latencies * link.alpha_s + (bytes + (paced ? 0 : unpaced_bytes)) / link.beta_bytes_per_s
         + (link.gamma_bytes_per_s > 0 ? combined / link.gamma_bytes_per_s : 0.0);
}

std::size_t paced_from_bytes(const link_costs& link) {
  const auto product = link.alpha_s * link.beta_bytes_per_s;
  if (!(product > 0) || product >= 0x1p62)
    return SIZE_MAX;
  return static_cast<std::size_t>(std::ceil(product));
}

algorithm_cost call_cost(collective_kind kind, algorithm a, std::size_t ranks, std::size_t bytes,
                         std::size_t record_bytes) {
  const auto data = cost_of(kind, a, ranks, bytes);
  if (ranks <= 1)
    return data;
  const auto record = static_cast<double>(record_bytes);
  const bool all_reduce_like =
    kind == collective_kind::all_reduce || kind == collective_kind::reduce_scatter;
  const bool gathers = all_reduce_like && ring_small_path(ranks, bytes);
  if (a == algorithm::recursive_doubling && gathers) { // the data rides in the records
    auto cost = doubling_gather(ranks, record + static_cast<double>(bytes));
    cost.combined = static_cast<double>(ranks - 1) * static_cast<double>(bytes);
    return cost;
  }
  if (a != algorithm::ring)
    return doubling_gather(ranks, record) + data; // peer_agree, then the data
  if (gathers) // the data rides in the records around the ring
    return {data.steps, data.bytes + static_cast<double>(ranks - 1) * record, data.combined};
  return algorithm_cost{ranks - 1, static_cast<double>(ranks - 1) * record} + data;
}

algorithm choose_algorithm(collective_kind kind, std::size_t ranks, std::size_t bytes,
                           const link_costs& link) {
  const auto candidates = algorithms_for(kind);
  auto best = candidates.front();
  auto best_seconds = call_cost(kind, best, ranks, bytes).seconds(link);
  for (const auto a : candidates.subspan(1)) {
    const auto seconds = call_cost(kind, a, ranks, bytes).seconds(link);
    if (seconds < best_seconds) {
      best = a;
      best_seconds = seconds;
    }
  }
  return best;
}

algorithm_override parse_algorithm_override(std::string_view text) {
  algorithm_override result;
  const auto bad = [&](const std::string& why) {
    return value_error("LOCKSTEP_ALGORITHM='" + std::string{text} + "': " + why
                       + " (an algorithm for all collectives, or kind=algorithm pairs "
                         "separated by commas; kinds: all_reduce, all_gather, broadcast, "
                         "reduce_scatter; algorithms: auto, "
                       + names_list() + ")");
  };
  if (text.empty())
    return result;
  for (std::size_t at = 0; at <= text.size();) {
    auto end = text.find(',', at);
    if (end == std::string_view::npos)
      end = text.size();
    const auto item = text.substr(at, end - at);
    at = end + 1;
    const auto equals = item.find('=');
    const auto name = equals == std::string_view::npos ? item : item.substr(equals + 1);
    std::optional<algorithm> chosen;
    if (name != "auto") {
      chosen = algorithm_named(name);
      if (!chosen)
        throw bad("no algorithm '" + std::string{name} + "'");
    }
    if (equals == std::string_view::npos) { // for every collective that can run it
      for (std::size_t k = 0; k < collective_kinds; ++k)
        if (!chosen || runs(static_cast<collective_kind>(k), *chosen))
          result.forced[k] = chosen;
      continue;
    }
    const auto kind_name = item.substr(0, equals);
    const auto kind = std::find(kind_names.begin(), kind_names.end(), kind_name);
    if (kind == kind_names.end())
      throw bad("no collective '" + std::string{kind_name} + "'");
    const auto k = static_cast<collective_kind>(kind - kind_names.begin());
    if (chosen && !runs(k, *chosen))
      throw bad(std::string{name} + " cannot run " + std::string{kind_name});
    result.forced[static_cast<std::size_t>(k)] = chosen;
  }
  return result;
}

std::string to_string(const algorithm_override& forced) {
  std::string text;
  for (std::size_t k = 0; k < collective_kinds; ++k)
    if (forced.forced[k])
      text += (text.empty() ? "" : ",") + std::string{kind_names[k]} + "="
              + std::string{to_string(*forced.forced[k])};
  return text.empty() ? "auto" : text;
}

algorithm pick_algorithm(collective_kind kind, std::size_t ranks, std::size_t bytes,
                         const link_costs& link, const algorithm_override& forced) {
  if (const auto a = forced.for_kind(kind))
    return *a;
  return choose_algorithm(kind, ranks, bytes, link);
}

} // namespace lockstep::detail
