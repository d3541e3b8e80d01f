// algorithm_choice: the α-β costs of each algorithm against the closed
// forms of docs/algorithms.md (powers of two and the fold), the choice as
// the cheapest call on a grid of world sizes and bytes, the cases the
// issue names (a 4-byte all-reduce on 64 workers goes to recursive
// doubling, 64 MiB on 3 workers stays on the ring, 1 MiB on 16 workers
// takes halving-doubling), and LOCKSTEP_ALGORITHM's parsing and errors;
// link_probe over the in-memory link (every rank gets rank 0's α and β)
// and LOCKSTEP_LINK_COSTS's parsing. No actor system: suite 'unit'.

#include "collectives/algorithm_choice.hpp"
#include "collectives/link_probe.hpp"

#include "memory_link.hpp"
#include "test_support.hpp"

#include "lockstep/error.hpp"

#include <cmath>
#include <string>
#include <thread>
#include <vector>

using namespace lockstep;
using namespace lockstep::detail;

namespace {

constexpr std::size_t mib = 1 << 20;

/// 50 µs and 10 Gb/s: a cluster's TCP.
constexpr link_costs tcp{.alpha_s = 50e-6, .beta_bytes_per_s = 1.25e9};

void check_cost(collective_kind kind, algorithm a, std::size_t ranks, std::size_t bytes,
                std::size_t steps, double critical_bytes) {
  const auto cost = cost_of(kind, a, ranks, bytes);
  INFO(to_string(kind), " ", to_string(a), " on ", ranks, " ranks, ", bytes, " bytes");
  CHECK(cost.steps == steps);
  CHECK(cost.bytes == critical_bytes);
}

} // namespace

TEST_CASE("costs on a power of two are the closed forms") {
  const std::size_t s = mib;
  const double d = s;
  check_cost(collective_kind::all_reduce, algorithm::ring, 8, s, 14, 2 * 7 * d / 8);
  check_cost(collective_kind::all_reduce, algorithm::recursive_doubling, 8, s, 3, 3 * d);
  check_cost(collective_kind::all_reduce, algorithm::halving_doubling, 8, s, 6, 2 * 7 * d / 8);
  check_cost(collective_kind::all_gather, algorithm::ring, 8, s, 7, 7 * d / 8);
  check_cost(collective_kind::all_gather, algorithm::recursive_doubling, 8, s, 3, 7 * d / 8);
  check_cost(collective_kind::broadcast, algorithm::ring, 8, s, 7, 7 * d);
  check_cost(collective_kind::broadcast, algorithm::binomial_tree, 8, s, 3, 3 * d);
  // The ring's small path: (world - 1) * bytes <= 64 KiB passes whole buffers.
  check_cost(collective_kind::all_reduce, algorithm::ring, 8, 4, 7, 7 * 4.0);
}

TEST_CASE("costs off a power of two add the fold") {
  const std::size_t s = mib;
  const double d = s;
  // 5 = 4 + 1: rank 0 folds into rank 1 and takes the result back; the
  // fold overlaps the core's first step (its last partner is ahead), but
  // not on 7 = 4 + 3, whose last partners folded in too.
  check_cost(collective_kind::all_reduce, algorithm::recursive_doubling, 5, s, 3, 4 * d);
  check_cost(collective_kind::all_reduce, algorithm::recursive_doubling, 7, s, 4, 4 * d);
  check_cost(collective_kind::all_reduce, algorithm::halving_doubling, 5, s, 6,
             2 * 3 * d / 4 + 2 * d);
  check_cost(collective_kind::all_reduce, algorithm::ring, 5, s, 8, 8 * double((s + 4) / 5));
  // Blocks of 1 MiB / 5 rounded up: the fold's block in, virtual rank 0
  // (two ranks) swaps 2 then 3 blocks, the whole 5 blocks back.
  const double block = (s + 4) / 5;
  check_cost(collective_kind::all_gather, algorithm::recursive_doubling, 5, s, 3, 11 * block);
  check_cost(collective_kind::broadcast, algorithm::binomial_tree, 5, s, 3, 3 * d);
  check_cost(collective_kind::broadcast, algorithm::binomial_tree, 1024, s, 10, 10 * d);
  check_cost(collective_kind::all_reduce, algorithm::ring, 1, s, 0, 0);
}

TEST_CASE("off a power of two, a call of at least α·β bytes is paced: an α more in each step "
          "that paces; below, those steps' messages share a link") {
  const link_costs net{.alpha_s = 2e-6, .beta_bytes_per_s = 3.125e9}; // α·β 6,250 bytes
  CHECK(paced_from_bytes(net) == 6250);
  CHECK(paced_from_bytes(link_costs{}) == SIZE_MAX);
  const double alpha = net.alpha_s;
  const double beta = net.beta_bytes_per_s;
  // Recursive doubling on 5 ranks: both core steps pace (rank 1 behind
  // first, then its pair); paced it loses the fold's overlap (3 -> 4
  // latencies) and waits two words.
  for (const std::size_t s : {std::size_t{4096}, std::size_t{65536}}) {
    const auto cost = cost_of(collective_kind::all_reduce, algorithm::recursive_doubling, 5, s);
    CHECK(cost.paced_steps == 3);
    CHECK(cost.unpaced_bytes == 2.0 * double(s));
    const bool paced = s >= 6250;
    const double want = paced ? 6 * alpha + 4.0 * double(s) / beta
                              : 3 * alpha + 6.0 * double(s) / beta;
    CHECK(cost.seconds(net) == doctest::Approx(want).epsilon(1e-12));
  }
  // Halving-doubling on 13 = 8 + 5: its reduce-scatter steps of mask 4
  // (4 segments of 8) pace, the others (5 >= 2m) are behind on both sides.
  const auto hd = cost_of(collective_kind::all_reduce, algorithm::halving_doubling, 13, 8000);
  CHECK(hd.paced_steps == 1);
  CHECK(hd.unpaced_bytes == 4 * 1000.0);
  // On a power of two nothing paces.
  const auto core = cost_of(collective_kind::all_reduce, algorithm::recursive_doubling, 8, mib);
  CHECK(core.paced_steps == 0);
  CHECK(core.unpaced_bytes == 0);
}

TEST_CASE("a call adds the agreement; small all-reduces carry their data in it") {
  const double record = default_record_bytes;
  // The ring's small path: one pass of the records with the data.
  auto cost = call_cost(collective_kind::all_reduce, algorithm::ring, 64, 4);
  CHECK(cost.steps == 63);
  CHECK(cost.bytes == 63 * (4 + record));
  // Recursive doubling's: one recursive-doubling gather of records with the data.
  cost = call_cost(collective_kind::all_reduce, algorithm::recursive_doubling, 64, 4);
  CHECK(cost.steps == 6);
  CHECK(cost.bytes == 63 * (4 + record));
  // Larger: the agreement, then the data.
  cost = call_cost(collective_kind::all_reduce, algorithm::halving_doubling, 64, mib);
  CHECK(cost.steps == 6 + 12);
  CHECK(cost.bytes == 63 * record + 2 * 63 * double(mib / 64));
  cost = call_cost(collective_kind::broadcast, algorithm::ring, 4, mib);
  CHECK(cost.steps == 3 + 3);
  CHECK(cost.bytes == 3 * record + 3 * double(mib));
}

TEST_CASE("with combining costed, two workers keep the ring for large buffers") {
  // Both move S bytes; recursive doubling combines all of them, the ring half.
  const link_costs loopback{.alpha_s = 10e-6, .beta_bytes_per_s = 4e9, .gamma_bytes_per_s = 8e9};
  CHECK(cost_of(collective_kind::all_reduce, algorithm::ring, 2, mib).combined == mib / 2);
  CHECK(cost_of(collective_kind::all_reduce, algorithm::recursive_doubling, 2, mib).combined ==
        mib);
  CHECK(choose_algorithm(collective_kind::all_reduce, 2, 64 * mib, loopback) == algorithm::ring);
  // Without γ the plain α-β model prefers the one step.
  CHECK(choose_algorithm(collective_kind::all_reduce, 2, 64 * mib, tcp) ==
        algorithm::recursive_doubling);
}

TEST_CASE("an algorithm that cannot run a collective is refused") {
  CHECK_THROWS_WITH_AS(cost_of(collective_kind::broadcast, algorithm::halving_doubling, 4, 8),
                       "algorithm halving_doubling cannot run broadcast", value_error);
  CHECK_THROWS_AS(cost_of(collective_kind::all_reduce, algorithm::binomial_tree, 4, 8),
                  value_error);
}

TEST_CASE("the choice is the cheapest call, the same for the same inputs") {
  for (const auto kind : {collective_kind::all_reduce, collective_kind::all_gather,
                          collective_kind::broadcast, collective_kind::reduce_scatter})
    for (std::size_t ranks = 1; ranks <= 70; ranks += ranks < 10 ? 1 : 7)
      for (std::size_t bytes = 4; bytes <= 256 * mib; bytes *= 8) {
        const auto chosen = choose_algorithm(kind, ranks, bytes, tcp);
        const auto chosen_seconds = call_cost(kind, chosen, ranks, bytes).seconds(tcp);
        for (const auto a : algorithms_for(kind)) {
          INFO(to_string(kind), " on ", ranks, " ranks, ", bytes, " bytes: chose ",
               to_string(chosen), " over ", to_string(a));
          CHECK(chosen_seconds <= call_cost(kind, a, ranks, bytes).seconds(tcp));
        }
      }
}

TEST_CASE("small messages on many workers take recursive doubling, large ones the ring") {
  CHECK(choose_algorithm(collective_kind::all_reduce, 64, 4, tcp) ==
        algorithm::recursive_doubling);
  CHECK(choose_algorithm(collective_kind::all_reduce, 3, 64 * mib, tcp) == algorithm::ring);
  CHECK(choose_algorithm(collective_kind::all_reduce, 16, mib, tcp) ==
        algorithm::halving_doubling);
  CHECK(choose_algorithm(collective_kind::broadcast, 64, mib, tcp) == algorithm::binomial_tree);
  CHECK(choose_algorithm(collective_kind::all_gather, 1024, 4096, tcp) ==
        algorithm::recursive_doubling);
  // Two ranks: every algorithm is one exchange; the ring is preferred.
  CHECK(choose_algorithm(collective_kind::all_reduce, 2, 4, tcp) == algorithm::ring);
  CHECK(choose_algorithm(collective_kind::broadcast, 2, mib, tcp) == algorithm::ring);
}

TEST_CASE("LOCKSTEP_ALGORITHM forces algorithms for all or some collectives") {
  auto forced = parse_algorithm_override("ring");
  for (const auto kind : {collective_kind::all_reduce, collective_kind::all_gather,
                          collective_kind::broadcast, collective_kind::reduce_scatter})
    CHECK(forced.for_kind(kind) == algorithm::ring);

  // For all: the collectives it cannot run keep the choice.
  forced = parse_algorithm_override("recursive_doubling");
  CHECK(forced.for_kind(collective_kind::all_reduce) == algorithm::recursive_doubling);
  CHECK(forced.for_kind(collective_kind::all_gather) == algorithm::recursive_doubling);
  CHECK_FALSE(forced.for_kind(collective_kind::broadcast));
  CHECK(pick_algorithm(collective_kind::broadcast, 64, mib, tcp, forced) ==
        algorithm::binomial_tree);
  CHECK(pick_algorithm(collective_kind::all_reduce, 3, 64 * mib, tcp, forced) ==
        algorithm::recursive_doubling);

  forced = parse_algorithm_override("broadcast=binomial_tree,all_reduce=halving_doubling");
  CHECK(forced.for_kind(collective_kind::broadcast) == algorithm::binomial_tree);
  CHECK(forced.for_kind(collective_kind::all_reduce) == algorithm::halving_doubling);
  CHECK_FALSE(forced.for_kind(collective_kind::all_gather));

  forced = parse_algorithm_override("ring,all_reduce=auto");
  CHECK_FALSE(forced.for_kind(collective_kind::all_reduce));
  CHECK(forced.for_kind(collective_kind::broadcast) == algorithm::ring);
  CHECK(to_string(forced) == "all_gather=ring,broadcast=ring,reduce_scatter=ring");
  CHECK(to_string(parse_algorithm_override("recursive_doubling")) ==
        "all_reduce=recursive_doubling,all_gather=recursive_doubling");
  CHECK(to_string(parse_algorithm_override("")) == "auto");
  CHECK_FALSE(parse_algorithm_override("").for_kind(collective_kind::all_reduce));
  CHECK_FALSE(parse_algorithm_override("auto").for_kind(collective_kind::all_reduce));
}

TEST_CASE("LOCKSTEP_ALGORITHM's errors name what is wrong") {
  const auto fails_with = [](const char* text, const std::string& why) {
    INFO(text);
    try {
      parse_algorithm_override(text);
      FAIL("no error");
    } catch (const value_error& e) {
      const std::string message = e.what();
      CHECK_MESSAGE(message.find(why) != std::string::npos, message);
      CHECK_MESSAGE(message.find("LOCKSTEP_ALGORITHM='" + std::string{text} + "'")
                      != std::string::npos,
                    message);
    }
  };
  fails_with("tree", "no algorithm 'tree'");
  fails_with("allreduce=ring", "no collective 'allreduce'");
  fails_with("broadcast=halving_doubling", "halving_doubling cannot run broadcast");
  fails_with("ring,", "no algorithm ''");
  fails_with("all_reduce=", "no algorithm ''");
}

TEST_CASE("link_probe gives every rank rank 0's alpha and beta") {
  using namespace std::chrono_literals;
  for (const std::size_t world : {1, 2, 5}) {
    CAPTURE(world);
    lockstep::detail::test::memory_hub hub(world);
    std::vector<link_costs> costs(world);
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        lockstep::detail::test::memory_link link(hub, r);
        costs[r] = probe_link_costs(link, link.now() + 60s);
      });
    for (auto& t : threads)
      t.join();
    for (std::size_t r = 0; r < world; ++r) {
      CHECK(costs[r].alpha_s == costs[0].alpha_s);
      CHECK(costs[r].beta_bytes_per_s == costs[0].beta_bytes_per_s);
      CHECK(costs[r].gamma_bytes_per_s == costs[0].gamma_bytes_per_s);
    }
    if (world == 1) {
      CHECK(costs[0].alpha_s == 0);
      CHECK(std::isinf(costs[0].beta_bytes_per_s));
    } else {
      CHECK(costs[0].gamma_bytes_per_s > 0);
      CHECK(costs[0].alpha_s > 0);
      CHECK(std::isfinite(costs[0].beta_bytes_per_s));
      CHECK(costs[0].beta_bytes_per_s > 0);
    }
  }
}

TEST_CASE("LOCKSTEP_LINK_COSTS gives alpha in microseconds and beta in GB/s") {
  const auto costs = parse_link_costs("30,2.5");
  CHECK(costs.alpha_s == doctest::Approx(30e-6));
  CHECK(costs.beta_bytes_per_s == doctest::Approx(2.5e9));
  const auto with_gamma = parse_link_costs("30,2.5,8");
  CHECK(with_gamma.gamma_bytes_per_s == doctest::Approx(8e9));
  CHECK(costs.gamma_bytes_per_s == 0);
  for (const char* text : {"30", "x,2", "30,", "0,1", "-1,2", "30,2.5,", "30,2.5,0", "30,inf",
                           "30,2.5,8,1"}) {
    CAPTURE(text);
    CHECK_THROWS_AS(parse_link_costs(text), value_error);
  }
  CHECK_THROWS_WITH_AS(parse_link_costs("30"),
                       doctest::Contains("LOCKSTEP_LINK_COSTS='30': no comma"), value_error);
}
