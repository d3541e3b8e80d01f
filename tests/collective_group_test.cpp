// collective_group, the rendezvous of the in-process collective core,
// without CAF: fingerprints, barrier, inline copies, claims, timeouts,
// cancellation, departures, failures, the flight recorder and sleeping
// waits, driven through allreduce_slices (allreduce_slices_test.cpp checks
// its results) and through arrive itself, each rank passing only its own
// buffers, on plain std::threads, so it also runs under ThreadSanitizer.

#include "collectives/allreduce_slices.hpp"
#include "collectives/collective_group.hpp"

#include "lockstep/error.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"

#include "rank_threads.hpp"
#include "reduce_values.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

using namespace lockstep;
using namespace lockstep::detail;
using namespace std::chrono_literals;

namespace {

collective_fingerprint fingerprint(std::uint64_t seq, dtype type, shape_t shape) {
  return {.seq = seq, .op = "all_reduce", .reduction = "sum", .dtype = type,
          .shape = std::move(shape)};
}

// Polls until `ready()`; the meson timeout ends a test that never gets there.
template <class Ready>
void wait_for(Ready ready) {
  while (!ready())
    std::this_thread::sleep_for(1ms);
}

// The message of the timeout_error `f` throws ("" if it throws none).
template <class F>
std::string error_of_timeout(F&& f) {
  try {
    f();
  } catch (const timeout_error& e) {
    return e.what();
  }
  return "";
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

} // namespace

TEST_CASE("a group of no ranks or of more than max_participants is refused") {
  CHECK_THROWS_AS(collective_group(0, "empty"), value_error);
  CHECK_THROWS_AS(collective_group(collective_group::max_participants + 1, "huge"), value_error);
}

TEST_CASE("a collective issued differently by one rank fails on every rank, then the group "
          "recovers") {
  collective_group group{3, "m"};
  std::vector<tensor> four, outputs;
  for (std::size_t r = 0; r < 3; ++r) {
    four.push_back(tensor::filled(dtype::f32, {4}, static_cast<double>(r + 1)));
    outputs.push_back(four.back());
  }
  tensor five = tensor::filled(dtype::f32, {5}, 1.0);
  tensor four_f64 = tensor::filled(dtype::f64, {4}, 1.0);

  SUBCASE("a different shape: shape_error") {
    auto outcomes = run_ranks(3, [&](std::size_t rank) {
      if (rank == 1)
        allreduce_slices(group, rank, reduce_op::sum, five, five, {.timeout = 10s});
      else
        allreduce_slices(group, rank, reduce_op::sum, four[rank], outputs[rank], {.timeout = 10s});
    });
    for (const auto& o : outcomes) {
      CHECK(o.kind == "shape_error");
      CHECK(o.what
            == "cannot reduce across ranks: rank 0 has shape [4] but rank 1 has shape [5] "
               "(collective mismatch in group 'm': rank 0 issued all_reduce #1 sum float32 [4], "
               "rank 1 issued all_reduce #1 sum float32 [5], rank 2 issued all_reduce #1 sum "
               "float32 [4])");
    }
  }
  SUBCASE("a different dtype: dtype_error") {
    auto outcomes = run_ranks(3, [&](std::size_t rank) {
      if (rank == 2)
        allreduce_slices(group, rank, reduce_op::sum, four_f64, four_f64, {.timeout = 10s});
      else
        allreduce_slices(group, rank, reduce_op::sum, four[rank], outputs[rank], {.timeout = 10s});
    });
    for (const auto& o : outcomes) {
      CHECK(o.kind == "dtype_error");
      CHECK(o.what
            == "cannot reduce across ranks: rank 0 has dtype float32 but rank 2 has dtype "
               "float64 (collective mismatch in group 'm': rank 0 issued all_reduce #1 sum "
               "float32 [4], rank 1 issued all_reduce #1 sum float32 [4], rank 2 issued "
               "all_reduce #1 sum float64 [4])");
    }
  }
  SUBCASE("a different op: value_error") {
    auto outcomes = run_ranks(3, [&](std::size_t rank) {
      allreduce_slices(group, rank, rank == 2 ? reduce_op::max : reduce_op::sum, four[rank],
                       outputs[rank], {.timeout = 10s});
    });
    for (const auto& o : outcomes) {
      CHECK(o.kind == "value_error");
      CHECK(o.what
            == "ranks issued different collectives (collective mismatch in group 'm': rank 0 "
               "issued all_reduce #1 sum float32 [4], rank 1 issued all_reduce #1 sum float32 "
               "[4], rank 2 issued all_reduce #1 max float32 [4])");
    }
  }
  SUBCASE("a different tag: value_error") {
    auto outcomes = run_ranks(3, [&](std::size_t rank) {
      allreduce_slices(group, rank, reduce_op::sum, four[rank], outputs[rank],
                       {.timeout = 10s, .tag = rank == 0 ? "a" : "b"});
    });
    for (const auto& o : outcomes) {
      CHECK(o.kind == "value_error");
      CHECK(contains(o.what, "ranks issued different collectives (collective mismatch in group "
                             "'m': rank 0 issued all_reduce #1 sum float32 [4] tag 'a', rank 1 "
                             "issued all_reduce #1 sum float32 [4] tag 'b'"));
    }
  }
  CHECK(contains(group.dump(), "#1 all_reduce"));
  CHECK(contains(group.dump(), ": mismatch"));

  // The next collective, issued alike, runs: 1 + 2 + 3 in every element.
  auto outcomes = run_ranks(3, [&](std::size_t rank) {
    allreduce_slices(group, rank, reduce_op::sum, four[rank], outputs[rank], {.timeout = 10s});
  });
  for (const auto& o : outcomes)
    CHECK_MESSAGE(o.kind.empty(), o.what);
  for (const auto& t : outputs)
    CHECK(t == tensor::filled(dtype::f32, {4}, 6.0));
  CHECK(contains(group.dump(), "#2 all_reduce sum float32 [4] 16 B: completed"));
}

TEST_CASE("inline collectives: ranks that run ahead never overwrite a copy another rank reads") {
  // Ranks meet once per inline collective and the fastest ones go on at
  // once, so a slow rank may still read the copies of collective k while the
  // others publish k + 1. Sizes alternate between inline (1 to 60 floats) and
  // sliced (500 floats) collectives, and one rank in turn dawdles, so every
  // interleaving of the two paths comes up; each result is checked.
  for (std::size_t n : {2u, 3u, 4u, 7u}) {
    constexpr int collectives = 1500;
    collective_group group{n, "ahead"};
    std::vector<std::size_t> wrong(n, 0);
    const auto value = [](std::size_t rank, int k, std::size_t i) {
      return static_cast<double>((rank + 1) * 1000 + static_cast<std::size_t>(k % 97) + i);
    };
    auto outcomes = run_ranks(n, [&](std::size_t rank) {
      for (int k = 0; k < collectives; ++k) {
        const std::int64_t count = k % 5 == 4 ? 500 : 1 + (k * 7) % 60;
        auto t = make_input(dtype::f64, count, [&](std::size_t i) { return value(rank, k, i); });
        if (static_cast<std::size_t>(k) % n == rank && k % 3 == 0)
          std::this_thread::yield();
        allreduce_slices(group, rank, reduce_op::sum, t, t, {.timeout = 20s});
        const auto data = t.data<double>();
        for (std::size_t i = 0; i < data.size(); ++i) {
          double expected = 0;
          for (std::size_t r = 0; r < n; ++r)
            expected += value(r, k, i);
          wrong[rank] += data[i] == expected ? 0 : 1;
        }
      }
    });
    for (std::size_t rank = 0; rank < n; ++rank) {
      CHECK_MESSAGE(outcomes[rank].kind.empty(), outcomes[rank].what);
      INFO("n=" << n << " rank=" << rank);
      CHECK(wrong[rank] == 0);
    }
  }
}

// `t` reduced in place, as allreduce_buffers.
allreduce_buffers buffers_of(tensor& t) {
  return {{&t, 1}, {&t, 1}};
}

TEST_CASE("an inline collective a rank withdrew from leaves its next copies intact") {
  // Rank 0 arrives alone at #1 and times out; rank 1 then arrives late and is
  // refused. The next collectives, with new data, give exact results: the
  // copy rank 0 published for #1 (which nobody read) is written again, and
  // the copies of collectives that ran are not.
  collective_group group{2, "withdrawn"};
  auto t0 = tensor::from<float>({1, 2});
  CHECK_THROWS_AS(allreduce_slices(group, 0, reduce_op::sum, t0, t0, {.timeout = 20ms}),
                  timeout_error);
  auto t1 = tensor::from<float>({10, 20});
  CHECK_THROWS_AS(allreduce_slices(group, 1, reduce_op::sum, t1, t1, {.timeout = 10s}),
                  timeout_error);
  for (int k = 2; k < 40; ++k) {
    std::vector<tensor> inputs{tensor::from<float>({static_cast<float>(k), 1}),
                               tensor::from<float>({static_cast<float>(100 * k), 2})};
    // Before every fifth collective, rank 0 withdraws from one on its own
    // (#2k - 1) while rank 1 waits; then both issue #2k.
    const auto seq = static_cast<std::uint64_t>(2 * k);
    std::atomic<bool> withdrawn{k % 5 != 0};
    auto outcomes = run_ranks(2, [&](std::size_t rank) {
      if (!withdrawn.load() && rank == 0) {
        CHECK_THROWS_AS(allreduce_slices(group, 0, reduce_op::sum, buffers_of(inputs[0]),
                                         {.timeout = 1ms}, seq - 1),
                        timeout_error);
        withdrawn.store(true);
      }
      wait_for([&] { return withdrawn.load(); });
      allreduce_slices(group, rank, reduce_op::sum, buffers_of(inputs[rank]), {.timeout = 10s},
                       seq);
    });
    for (const auto& o : outcomes)
      CHECK_MESSAGE(o.kind.empty(), o.what);
    for (const auto& t : inputs)
      CHECK(t == tensor::from<float>({static_cast<float>(101 * k), 3}));
  }
}

TEST_CASE("ranks whose chunk sizes put one collective inline and another not fail alike") {
  // 16 bytes fit a rank's inline area, but not rank 1's 8-byte chunks.
  collective_group group{3, "chunks"};
  std::vector<tensor> inputs;
  for (std::size_t r = 0; r < 3; ++r)
    inputs.push_back(tensor::filled(dtype::f32, {4}, 1.0));
  auto outcomes = run_ranks(3, [&](std::size_t rank) {
    allreduce_slices(group, rank, reduce_op::sum, inputs[rank], inputs[rank],
                     {.timeout = 10s, .chunk_bytes = rank == 1 ? 8u : 0u});
  });
  for (const auto& o : outcomes) {
    CHECK(o.kind == "value_error");
    CHECK(contains(o.what, "ranks issued the same collective with different chunk sizes, so "
                           "some published their data inline and some did not"));
  }
  outcomes = run_ranks(3, [&](std::size_t rank) {
    allreduce_slices(group, rank, reduce_op::sum, inputs[rank], inputs[rank], {.timeout = 10s});
  });
  for (const auto& o : outcomes)
    CHECK_MESSAGE(o.kind.empty(), o.what);
  for (const auto& t : inputs)
    CHECK(t == tensor::filled(dtype::f32, {4}, 3.0));
}

TEST_CASE("claim hands out each piece of a collective once, and starts at 0 in the next") {
  // Rank 0 takes every piece before the others look; the counts restart in
  // each collective however many pieces the last one handed out.
  constexpr std::size_t n = 3;
  constexpr std::size_t pieces = 50;
  collective_group group{n, "claims"};
  const auto now = collective_group::clock::now;
  for (std::uint64_t seq = 1; seq <= 20; ++seq) {
    std::vector<std::vector<std::size_t>> claimed(n);
    std::atomic<bool> rank0_done{false};
    auto outcomes = run_ranks(n, [&](std::size_t rank) {
      group.arrive(rank, fingerprint(seq, dtype::f32, {1}), now() + 20s);
      if (seq % 2 == 1 && rank != 0)
        wait_for([&] { return rank0_done.load(); });
      for (auto piece = group.claim(seq); piece < pieces; piece = group.claim(seq))
        claimed[rank].push_back(piece);
      rank0_done.store(true);
      group.wait_all_done(rank, seq, now() + 20s);
    });
    for (const auto& o : outcomes)
      CHECK_MESSAGE(o.kind.empty(), o.what);
    std::vector<int> times(pieces, 0);
    for (const auto& mine : claimed)
      for (auto piece : mine)
        ++times[piece];
    INFO("collective #" << seq);
    CHECK(std::count(times.begin(), times.end(), 1) == static_cast<long>(pieces));
    if (seq % 2 == 1)
      CHECK(claimed[0].size() == pieces);
  }
}

TEST_CASE("a rank still claiming in a timed-out collective gets nothing more") {
  // Rank 0 finishes #1 and times out at its barrier while rank 1 still
  // works; rank 0 then arrives at #2, which resets the count. Rank 1's
  // next claim in #1 is refused instead of starting #1 over on buffers
  // that may be gone.
  collective_group group{2, "straggler"};
  const auto now = collective_group::clock::now;
  std::atomic<int> stage{0};
  std::size_t late_claim = 0;
  std::thread rank1{[&] {
    group.arrive(1, fingerprint(1, dtype::f32, {8}), now() + 20s);
    CHECK(group.claim(1) != collective_group::no_claim);
    stage.store(1);
    wait_for([&] { return stage.load() == 2; });
    late_claim = group.claim(1);
    CHECK_THROWS_AS(group.wait_all_done(1, 1, now() + 20s), timeout_error);
  }};
  group.arrive(0, fingerprint(1, dtype::f32, {8}), now() + 20s);
  wait_for([&] { return stage.load() == 1; });
  CHECK_THROWS_AS(group.wait_all_done(0, 1, now() + 10ms), timeout_error);
  CHECK_THROWS_AS(group.arrive(0, fingerprint(2, dtype::f32, {8}), now() + 10ms), timeout_error);
  stage.store(2);
  rank1.join();
  CHECK(late_claim == collective_group::no_claim);
}

TEST_CASE("ranks whose chunk sizes cut a collective into different slices fail alike") {
  collective_group group{3, "slices"};
  std::vector<tensor> inputs;
  for (std::size_t r = 0; r < 3; ++r)
    inputs.push_back(tensor::filled(dtype::f32, {1000}, 1.0));
  auto outcomes = run_ranks(3, [&](std::size_t rank) {
    allreduce_slices(group, rank, reduce_op::sum, inputs[rank], inputs[rank],
                     {.timeout = 10s, .chunk_bytes = rank == 2 ? 64u : 0u});
  });
  for (const auto& o : outcomes) {
    CHECK(o.kind == "value_error");
    CHECK(contains(o.what, "ranks issued the same collective with different chunk sizes"));
  }
  for (const auto& t : inputs)
    CHECK(t == tensor::filled(dtype::f32, {1000}, 1.0));
}

TEST_CASE("arrive_inline takes at most inline_capacity bytes") {
  collective_group group{1, "capacity"};
  std::vector<std::byte> data(collective_group::inline_capacity + 1);
  auto f = fingerprint(1, dtype::f32, {1});
  f.inline_data = true;
  CHECK_THROWS_WITH_AS(group.arrive_inline(0, f, collective_group::clock::now() + 1s, data.data(),
                                           data.size()),
                       "collective_group 'capacity': arrive_inline of 241 bytes, more than the "
                       "240 a rank can publish inline",
                       value_error);
  group.arrive_inline(0, f, collective_group::clock::now() + 1s, data.data(), data.size() - 1);
  CHECK(group.inline_data(0, 1) != nullptr);
  CHECK(group.next_seq(0) == 2);
}

TEST_CASE("a rank that never arrives: the others time out naming it, then all ranks succeed") {
  collective_group group{4, "stall"};
  std::vector<tensor> inputs;
  for (std::size_t r = 0; r < 4; ++r)
    inputs.push_back(tensor::filled(dtype::f32, {4}, static_cast<double>(r)));

  auto outcomes = run_ranks(4, [&](std::size_t rank) {
    if (rank != 3)
      allreduce_slices(group, rank, reduce_op::sum, inputs[rank], inputs[rank],
                       {.timeout = 100ms});
  });
  for (std::size_t rank = 0; rank < 3; ++rank) {
    CHECK(outcomes[rank].kind == "timeout_error");
    CHECK(contains(outcomes[rank].what, "collective timed out in group 'stall': rank 3 did not "
                                        "reach all_reduce #1 sum float32 [4]; rank 3 has "
                                        "issued no collective yet"));
    CHECK(contains(outcomes[rank].what, "recent collectives in group 'stall':\n#1 all_reduce "
                                        "sum float32 [4] 16 B: timed out"));
    // Every waiting rank throws the same message.
    CHECK(outcomes[rank].what == outcomes[0].what);
  }
  CHECK(outcomes[3].kind.empty());
  // The collective never started: no rank's buffer was written.
  for (std::size_t r = 0; r < 4; ++r)
    CHECK(inputs[r] == tensor::filled(dtype::f32, {4}, static_cast<double>(r)));

  // Rank 3 arrives late at collective #1: it learns at once (not after its
  // 10 s) that #1 failed, and its arrival does not count toward the next
  // collective.
  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 3, reduce_op::sum, inputs[3], inputs[3], {.timeout = 10s}),
      doctest::Contains("collective timed out in group 'stall': rank 3 arrived at all_reduce #1 "
                        "sum float32 [4] after it had timed out. collective timed out in group "
                        "'stall': rank 3 did not reach"),
      timeout_error);

  outcomes = run_ranks(4, [&](std::size_t rank) {
    allreduce_slices(group, rank, reduce_op::sum, inputs[rank], inputs[rank], {.timeout = 10s});
  });
  for (const auto& o : outcomes)
    CHECK_MESSAGE(o.kind.empty(), o.what);
  for (const auto& t : inputs)
    CHECK(t == tensor::filled(dtype::f32, {4}, 6.0));
  const auto dump = group.dump();
  // #1 never started: the recorder says when it timed out.
  CHECK(contains(dump, "#1 all_reduce sum float32 [4] 16 B: timed out at +"));
  CHECK(contains(dump, "#2 all_reduce sum float32 [4] 16 B: completed, started at +"));
}

TEST_CASE("a timeout names where a missing rank waits instead") {
  collective_group group{2, "skip"};
  const auto first = fingerprint(1, dtype::f32, {4});
  const auto second = fingerprint(2, dtype::f32, {4});
  const auto now = collective_group::clock::now;
  // Rank 1 skipped collective #1 and waits in #2.
  std::thread rank1{[&] {
    group.arrive(1, second, now() + 10s);
    group.wait_all_done(1, 2, now() + 10s);
  }};
  wait_for([&] { return !group.stall_report(1).empty(); });
  CHECK_THROWS_WITH_AS(group.arrive(0, first, now() + 50ms),
                       doctest::Contains("rank 1 did not reach all_reduce #1 sum float32 [4]; "
                                         "rank 1 is waiting in all_reduce #2 sum float32 [4]"),
                       timeout_error);
  // Rank 0 goes on to #2 and meets rank 1 there.
  group.arrive(0, second, now() + 10s);
  group.wait_all_done(0, 2, now() + 10s);
  rank1.join();
  CHECK(group.next_seq(0) == 3);
  CHECK(group.next_seq(1) == 3);
  // Rank 1 never passes #1 again: sequence numbers only increase.
  CHECK_THROWS_WITH_AS(group.arrive(1, first, now() + 1s),
                       "collective_group 'skip': rank 1 issued all_reduce #1 sum float32 [4] "
                       "after #2; sequence numbers must increase",
                       value_error);
}

TEST_CASE("a rank whose last collective timed out is not said to wait in it") {
  // Rank 1 comes late to #1, which timed out, and throws at once; it waits
  // nowhere. When #2 then times out for want of rank 1, the message must
  // not say that rank 1 is waiting in #1.
  collective_group group{2, "idle"};
  const auto now = collective_group::clock::now;
  CHECK_THROWS_AS(group.arrive(0, fingerprint(1, dtype::f32, {4}), now() + 50ms), timeout_error);
  CHECK_THROWS_WITH_AS(group.arrive(1, fingerprint(1, dtype::f32, {4}), now() + 60s),
                       doctest::Contains("rank 1 arrived at all_reduce #1 sum float32 [4] after "
                                         "it had timed out"),
                       timeout_error);
  const auto message = error_of_timeout([&] {
    group.arrive(0, fingerprint(2, dtype::f32, {4}), now() + 50ms);
  });
  CHECK_MESSAGE(contains(message, "rank 1 did not reach all_reduce #2 sum float32 [4]; rank 1 "
                                  "last issued #1"),
                message);
  CHECK_MESSAGE(!contains(message, "rank 1 is waiting in"), message);
}

TEST_CASE("stall_report names the ranks that did not reach a collective") {
  collective_group group{3, "report", "replica"};
  CHECK(group.stall_report(0).empty());
  std::vector<tensor> inputs;
  for (std::size_t r = 0; r < 3; ++r)
    inputs.push_back(tensor::filled(dtype::i32, {4}, static_cast<double>(r + 1)));
  std::vector<std::thread> threads;
  std::vector<outcome> outcomes(3);
  for (std::size_t rank : {0u, 2u})
    threads.emplace_back([&, rank] {
      try {
        allreduce_slices(group, rank, reduce_op::sum, inputs[rank], inputs[rank],
                         {.timeout = 60s, .tag = "step"});
      } catch (const std::exception& e) {
        outcomes[rank] = {"error", e.what()};
      }
    });
  // Once ranks 0 and 2 wait, only replica 1 is missing.
  wait_for([&] { return contains(group.stall_report(1), "replica 1 did not reach"); });
  const auto report = group.stall_report(1);
  CHECK(report.starts_with("replica 1 did not reach all_reduce #1 sum int32 [4] tag 'step'; "
                           "replica 1 has issued no collective yet\nrecent collectives in group "
                           "'report':\n"));
  CHECK(group.stall_report(2).empty()); // nothing waits at #2 or later

  allreduce_slices(group, 1, reduce_op::sum, inputs[1], inputs[1], {.timeout = 60s, .tag = "step"});
  for (auto& thread : threads)
    thread.join();
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK_MESSAGE(outcomes[r].kind.empty(), outcomes[r].what);
    CHECK(inputs[r] == tensor::filled(dtype::i32, {4}, 6.0));
  }
  CHECK(group.stall_report(0).empty()); // nobody waits any more
}

TEST_CASE("a rank that withdraws on timeout never lets the collective start without it") {
  // Rank 0 gives up after 0 to 1 ms while ranks 1 and 2 would wait 20 s.
  // Either all three arrive before rank 0 gives up and the collective runs,
  // or it never starts and every rank throws timeout_error: ranks 1 and 2
  // never run it with rank 0 missing.
  constexpr std::size_t n = 3;
  collective_group group{n, "withdraw"};
  const auto now = collective_group::clock::now;
  for (std::uint64_t seq = 1; seq <= 200; ++seq) {
    const auto patience = std::chrono::microseconds{(seq * 37) % 1000};
    std::atomic<int> started{0};
    auto outcomes = run_ranks(n, [&](std::size_t rank) {
      group.arrive(rank, fingerprint(seq, dtype::f32, {1}),
                   now() + (rank == 0 ? std::chrono::microseconds{patience} : 20s));
      started.fetch_add(1);
      group.wait_all_done(rank, seq, now() + 20s);
    });
    std::size_t succeeded = 0;
    for (const auto& o : outcomes) {
      succeeded += o.kind.empty() ? 1 : 0;
      if (!o.kind.empty())
        CHECK_MESSAGE(o.kind == "timeout_error", o.what);
    }
    INFO("collective #" << seq << ", rank 0 waited " << patience.count() << " us");
    CHECK((succeeded == 0 || succeeded == n));
    CHECK((started.load() == 0 || started.load() == static_cast<int>(n)));
  }

  // The deterministic case: rank 1 waits, rank 0 gives up while rank 2 has
  // not come; rank 1 sees rank 0's timeout, and rank 2 learns of it on arrival.
  const std::uint64_t seq = group.next_seq(0);
  std::string seen_by_1;
  std::thread rank1{[&] {
    try {
      group.arrive(1, fingerprint(seq, dtype::f32, {1}), now() + 60s);
      seen_by_1 = "started";
    } catch (const timeout_error& e) {
      seen_by_1 = e.what();
    }
  }};
  wait_for([&] { return !group.stall_report(seq).empty(); });
  const auto message = [&] {
    try {
      group.arrive(0, fingerprint(seq, dtype::f32, {1}), now() + 50ms);
    } catch (const timeout_error& e) {
      return std::string{e.what()};
    }
    return std::string{"started"};
  }();
  rank1.join();
  CHECK_MESSAGE(contains(message, "rank 2 did not reach all_reduce #" + std::to_string(seq)
                                      + " sum float32 [1]; rank 2 "),
                message);
  CHECK(seen_by_1 == message);
  CHECK_THROWS_WITH_AS(group.arrive(2, fingerprint(seq, dtype::f32, {1}), now() + 60s),
                       doctest::Contains(("rank 2 arrived at all_reduce #" + std::to_string(seq)
                                          + " sum float32 [1] after it had timed out")
                                             .c_str()),
                       timeout_error);
}

TEST_CASE("a rank that does not finish its share: the barrier times out, then all succeed") {
  collective_group group{3, "barrier"};
  const auto now = collective_group::clock::now;
  auto outcomes = run_ranks(3, [&](std::size_t rank) {
    group.arrive(rank, fingerprint(1, dtype::i64, {2, 3}), now() + 10s);
    if (rank != 2)
      group.wait_all_done(rank, 1, now() + 100ms);
  });
  for (std::size_t rank = 0; rank < 2; ++rank) {
    CHECK(outcomes[rank].kind == "timeout_error");
    CHECK(contains(outcomes[rank].what, "rank 2 did not finish all_reduce #1 sum int64 [2, 3]; "
                                        "rank 2 arrived but is still working on it"));
  }
  CHECK(outcomes[2].kind.empty());
  CHECK_THROWS_WITH_AS(group.wait_all_done(2, 1, now() + 10s),
                       doctest::Contains("rank 2 finished #1 after it had timed out"),
                       timeout_error);
  // #1 started, then its barrier timed out.
  CHECK(contains(group.dump(), "#1 all_reduce sum int64 [2, 3] 48 B: timed out, started at +"));

  outcomes = run_ranks(3, [&](std::size_t rank) {
    group.arrive(rank, fingerprint(2, dtype::i64, {2, 3}), now() + 10s);
    group.wait_all_done(rank, 2, now() + 10s);
  });
  for (const auto& o : outcomes)
    CHECK_MESSAGE(o.kind.empty(), o.what);
  CHECK(contains(group.dump(), "#2 all_reduce sum int64 [2, 3] 48 B: completed"));
  CHECK_THROWS_WITH_AS(group.wait_all_done(0, 2, now() + 1s),
                       "collective_group 'barrier': rank 0 called wait_all_done for #2 without a "
                       "successful arrive()",
                       value_error);
}

TEST_CASE("cancel_below wakes waiting ranks with its reason and refuses later arrivals below "
          "the mark") {
  collective_group group{2, "cancel"};
  CHECK(group.cancelled_below() == 0);
  std::vector<tensor> inputs{tensor::from<float>({1, 2, 3}), tensor::from<float>({10, 20, 30})};

  // Rank 0 waits in #1 for rank 1, which never comes to it.
  std::string seen;
  std::thread rank0{[&] {
    try {
      allreduce_slices(group, 0, reduce_op::sum, allreduce_buffers{{&inputs[0], 1}, {&inputs[0], 1}},
                       {.timeout = 60s}, 1);
      seen = "ran";
    } catch (const context_error& e) {
      seen = e.what();
    }
  }};
  wait_for([&] { return !group.stall_report(1).empty(); });
  group.cancel_below(5, std::make_exception_ptr(context_error("call 3 failed")));
  rank0.join();
  CHECK(seen == "call 3 failed");
  CHECK(group.cancelled_below() == 5);

  // A lower mark changes nothing.
  group.cancel_below(3, std::make_exception_ptr(context_error("older")));
  CHECK(group.cancelled_below() == 5);

  // Rank 1 arrives at #3, below the mark: refused at once with the reason.
  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 1, reduce_op::sum,
                       allreduce_buffers{{&inputs[1], 1}, {&inputs[1], 1}}, {.timeout = 60s}, 3),
      "call 3 failed", context_error);
  CHECK(inputs[0] == tensor::from<float>({1, 2, 3}));
  CHECK(inputs[1] == tensor::from<float>({10, 20, 30}));

  // A collective at the mark runs.
  auto outcomes = run_ranks(2, [&](std::size_t rank) {
    allreduce_slices(group, rank, reduce_op::sum,
                     allreduce_buffers{{&inputs[rank], 1}, {&inputs[rank], 1}}, {.timeout = 60s},
                     5);
  });
  for (const auto& o : outcomes)
    CHECK_MESSAGE(o.kind.empty(), o.what);
  CHECK(inputs[0] == tensor::from<float>({11, 22, 33}));
  CHECK(inputs[1] == tensor::from<float>({11, 22, 33}));
  CHECK(group.next_seq(0) == 6);
}

TEST_CASE("cancel_below leaves a collective that started to run to its end") {
  collective_group group{2, "started"};
  const auto now = collective_group::clock::now;
  std::atomic<int> arrived{0};
  std::atomic<bool> cancelled{false};
  std::thread canceller{[&] {
    wait_for([&] { return arrived.load() == 2; });
    group.cancel_below(2, std::make_exception_ptr(context_error("cancelled")));
    cancelled.store(true);
  }};
  auto outcomes = run_ranks(2, [&](std::size_t rank) {
    group.arrive(rank, fingerprint(1, dtype::f32, {1}), now() + 60s);
    arrived.fetch_add(1); // arrive() returned: the collective started
    wait_for([&] { return cancelled.load(); });
    group.wait_all_done(rank, 1, now() + 60s);
  });
  canceller.join();
  for (const auto& o : outcomes)
    CHECK_MESSAGE(o.kind.empty(), o.what);
  CHECK(contains(group.dump(), "#1 all_reduce sum float32 [1] 4 B: completed"));
  CHECK_THROWS_WITH_AS(group.arrive(0, fingerprint(1, dtype::f32, {1}), now() + 60s),
                       doctest::Contains("sequence numbers must increase"), value_error);
}

TEST_CASE("a rank that departs an epoch ends the others' wait in that epoch's collectives") {
  collective_group group{3, "depart"};
  const auto now = collective_group::clock::now;
  const auto in_epoch = [](std::uint64_t seq, std::uint64_t epoch) {
    auto f = fingerprint(seq, dtype::f32, {4});
    f.epoch = epoch;
    return f;
  };
  CHECK_FALSE(group.waiting(0, 1));
  // Ranks 0 and 1 wait in #1 of epoch 7.
  std::vector<std::string> seen(2);
  std::vector<std::thread> threads;
  for (std::size_t rank : {0u, 1u})
    threads.emplace_back([&, rank] {
      try {
        group.arrive(rank, in_epoch(1, 7), now() + 60s);
        seen[rank] = "started";
      } catch (const context_error& e) {
        seen[rank] = e.what();
      }
    });
  wait_for([&] { return contains(group.stall_report(1), "rank 2 did not reach"); });
  CHECK(group.waiting(0, 1));
  CHECK(group.waiting(1, 1));
  CHECK_FALSE(group.waiting(0, 2));
  CHECK_FALSE(group.waiting(2, 1));
  // Rank 2 departs another epoch: nothing changes; then epoch 7: both give up.
  group.depart(2, 6);
  CHECK(group.waiting(0, 1));
  group.depart(2, 7);
  for (auto& thread : threads)
    thread.join();
  for (std::size_t rank : {0u, 1u})
    CHECK(seen[rank]
          == "Some ranks made a different number of collective calls: rank 2 returned from its "
             "function without reaching all_reduce #1 sum float32 [4], which rank "
             + std::to_string(rank) + " waits in");
  CHECK_FALSE(group.waiting(0, 1));
  CHECK(contains(group.dump(), "#1 all_reduce sum float32 [4] 16 B: mismatch"));

  // A rank arriving at a collective of an epoch another rank has departed
  // gives up at once.
  CHECK_THROWS_WITH_AS(group.arrive(0, in_epoch(2, 7), now() + 60s),
                       doctest::Contains("rank 2 returned from its function without reaching "
                                         "all_reduce #2 sum float32 [4], which rank 0 waits in"),
                       context_error);
  // Epoch 8 meets as usual, rank 2 included.
  auto outcomes = run_ranks(3, [&](std::size_t rank) {
    group.arrive(rank, in_epoch(3, 8), now() + 60s);
    group.wait_all_done(rank, 3, now() + 60s);
  });
  for (const auto& o : outcomes)
    CHECK_MESSAGE(o.kind.empty(), o.what);
  CHECK(contains(group.dump(), "#3 all_reduce sum float32 [4] 16 B: completed"));
}

TEST_CASE("a rank that fails its share fails the collective on every rank, and the group "
          "stays usable") {
  // This test replaces the one that showed a failure breaking the group for
  // good (collective_group::abort, gone): a failure now fails only its
  // collective, on every rank.
  collective_group group{3, "fail"};
  const auto now = collective_group::clock::now;

  SUBCASE("at the barrier") {
    auto outcomes = run_ranks(3, [&](std::size_t rank) {
      group.arrive(rank, fingerprint(1, dtype::f32, {1024}), now() + 60s);
      group.wait_all_done(rank, 1, now() + 60s,
                          rank == 1 ? std::make_exception_ptr(shape_error("rank 1 could not"))
                                    : nullptr);
    });
    for (const auto& o : outcomes) {
      CHECK(o.kind == "shape_error");
      CHECK(o.what == "rank 1 could not");
    }
    CHECK(contains(group.dump(), "#1 all_reduce sum float32 [1024] 4096 B: failed"));
  }

  SUBCASE("inline") {
    const float value = 1;
    auto outcomes = run_ranks(3, [&](std::size_t rank) {
      auto f = fingerprint(1, dtype::f32, {1});
      f.inline_data = true;
      group.arrive_inline(rank, f, now() + 60s, &value, sizeof value,
                          rank == 2 ? std::make_exception_ptr(value_error("rank 2 could not"))
                                    : nullptr);
    });
    for (const auto& o : outcomes) {
      CHECK(o.kind == "value_error");
      CHECK(o.what == "rank 2 could not");
    }
    CHECK(contains(group.dump(), "#1 all_reduce sum float32 [1] 4 B: failed"));
  }

  SUBCASE("allreduce_slices with a failure from an earlier stage, large and small") {
    for (std::int64_t count : {1, 4096}) {
      auto outcomes = run_ranks(3, [&](std::size_t rank) {
        auto x = tensor::filled(dtype::f32, {count}, 1.0);
        collective_options options{.timeout = 60s};
        if (rank == 0)
          options.failure = std::make_exception_ptr(timeout_error("stage 1 timed out"));
        allreduce_slices(group, rank, reduce_op::sum, x, x, options);
      });
      for (const auto& o : outcomes) {
        CHECK(o.kind == "timeout_error");
        CHECK(o.what == "stage 1 timed out");
      }
    }
  }

  // The group is usable: the next collectives, large and small, are right.
  for (std::int64_t count : {1, 4096}) {
    std::vector<tensor> xs;
    for (std::size_t rank = 0; rank < 3; ++rank)
      xs.push_back(tensor::filled(dtype::f32, {count}, static_cast<double>(rank + 1)));
    auto outcomes = run_ranks(3, [&](std::size_t rank) {
      allreduce_slices(group, rank, reduce_op::sum, xs[rank], xs[rank], {.timeout = 60s});
    });
    for (const auto& o : outcomes)
      CHECK_MESSAGE(o.kind.empty(), o.what);
    for (const auto& x : xs)
      CHECK(x == tensor::filled(dtype::f32, {count}, 6.0));
  }
}

TEST_CASE("the flight recorder keeps the last 64 collectives") {
  collective_group group{1, "recorder"};
  CHECK(group.dump() == "(no collectives yet)\n");
  tensor input = tensor::from<float>({1, 2, 3});
  tensor output = tensor::zeros(dtype::f32, {3});
  for (int i = 0; i < 70; ++i)
    allreduce_slices(group, 0, reduce_op::max, input, output, {.timeout = 1s, .tag = "fr"});
  CHECK(output == input);
  const auto dump = group.dump();
  std::size_t lines = 0;
  for (char c : dump)
    lines += c == '\n' ? 1 : 0;
  CHECK(lines == collective_group::flight_recorder_size);
  CHECK(dump.starts_with("#7 all_reduce max float32 [3] 12 B tag 'fr': completed, started at +"));
  CHECK(contains(dump, "\n#70 all_reduce max float32 [3] 12 B tag 'fr': completed"));
  CHECK(contains(dump, " ms, took "));
  const auto last_two = group.dump(2);
  CHECK(last_two.starts_with("#69 all_reduce"));
  CHECK(contains(last_two, "\n#70 all_reduce"));
}

TEST_CASE("the flight recorder holds one entry per collective, whatever the number of ranks") {
  for (std::size_t n : {2u, 3u, 7u}) {
    collective_group group{n, "once"};
    std::vector<tensor> inputs;
    for (std::size_t r = 0; r < n; ++r)
      inputs.push_back(tensor::filled(dtype::f64, {5}, 1.0));
    auto outcomes = run_ranks(n, [&](std::size_t rank) {
      for (int i = 0; i < 5; ++i)
        allreduce_slices(group, rank, reduce_op::min, inputs[rank], inputs[rank], {.timeout = 10s});
    });
    for (const auto& o : outcomes)
      CHECK_MESSAGE(o.kind.empty(), o.what);
    const auto dump = group.dump();
    std::size_t lines = 0;
    for (char c : dump)
      lines += c == '\n' ? 1 : 0;
    CHECK(lines == 5);
    for (int seq = 1; seq <= 5; ++seq)
      CHECK(contains(dump, "#" + std::to_string(seq) + " all_reduce min float64 [5] 40 B: completed"));
  }
}

TEST_CASE("ranks waiting for a late rank sleep instead of burning CPU") {
  collective_group group{4, "cpu"};
  std::vector<tensor> inputs;
  for (std::size_t r = 0; r < 4; ++r)
    inputs.push_back(tensor::filled(dtype::f32, {16}, 1.0));

  const auto cpu_before = cpu_seconds();
  auto outcomes = run_ranks(4, [&](std::size_t rank) {
    if (rank == 3)
      std::this_thread::sleep_for(300ms);
    allreduce_slices(group, rank, reduce_op::sum, inputs[rank], inputs[rank], {.timeout = 20s});
  });
  const auto cpu_used = cpu_seconds() - cpu_before;
  for (const auto& o : outcomes)
    CHECK_MESSAGE(o.kind.empty(), o.what);
  CHECK(inputs[0] == tensor::filled(dtype::f32, {16}, 4.0));
  // Three ranks waited about 300 ms each; spinning through it would cost ~900 ms.
  INFO("CPU time used: " << cpu_used << " s");
  CHECK(cpu_used < 0.1);
}
