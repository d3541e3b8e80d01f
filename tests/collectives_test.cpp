// The in-process collective core without CAF: collective_group (rendezvous
// with fingerprints, barrier, timeouts, flight recorder, sleeping waits) and
// allreduce_slices, run on plain std::threads, so it also runs under
// ThreadSanitizer.

#include "collectives/allreduce_slices.hpp"
#include "collectives/collective_group.hpp"

#include "lockstep/error.hpp"
#include "lockstep/tensor.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

using namespace lockstep;
using namespace lockstep::detail;
using namespace std::chrono_literals;

namespace {

// What one rank's call ended with: "" on success, else the error's kind and text.
struct outcome {
  std::string kind;
  std::string what;
};

// Runs `body(rank)` on `n` threads at once and returns each rank's outcome.
std::vector<outcome> run_ranks(std::size_t n, const std::function<void(std::size_t)>& body) {
  std::vector<outcome> outcomes(n);
  std::vector<std::thread> threads;
  for (std::size_t rank = 0; rank < n; ++rank)
    threads.emplace_back([&, rank] {
      try {
        body(rank);
      } catch (const timeout_error& e) {
        outcomes[rank] = {"timeout_error", e.what()};
      } catch (const dtype_error& e) {
        outcomes[rank] = {"dtype_error", e.what()};
      } catch (const value_error& e) {
        outcomes[rank] = {"value_error", e.what()};
      } catch (const std::exception& e) {
        outcomes[rank] = {"other", e.what()};
      }
    });
  for (auto& thread : threads)
    thread.join();
  return outcomes;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Input r element i for the sweep: r + i + 1, or 1 or 2 for prod.
double input_value(collective_op op, std::size_t r, std::size_t i) {
  if (op == collective_op::prod)
    return 1.0 + static_cast<double>((r + i) % 2);
  return static_cast<double>(r + i + 1);
}

template <class T>
T expected_value(collective_op op, std::size_t n, std::size_t i) {
  const auto sum = static_cast<std::int64_t>(n * (i + 1) + n * (n - 1) / 2);
  switch (op) {
    case collective_op::sum:
      return static_cast<T>(sum);
    case collective_op::mean:
      if constexpr (std::is_floating_point_v<T>)
        return static_cast<T>(sum) / static_cast<T>(n);
      else
        return static_cast<T>(sum / static_cast<std::int64_t>(n));
    case collective_op::min:
      return static_cast<T>(i + 1);
    case collective_op::max:
      return static_cast<T>(i + n);
    case collective_op::prod: {
      // Inputs with (r + i) odd hold 2: N/2 of them for even i, (N+1)/2 for odd i.
      const auto twos = i % 2 == 0 ? n / 2 : (n + 1) / 2;
      return static_cast<T>(std::int64_t{1} << twos);
    }
  }
  return T{};
}

tensor make_input(dtype type, std::int64_t count, const std::function<double(std::size_t)>& value) {
  auto t = tensor::zeros(type, {count});
  visit_dtype(type, [&]<class T>(T) {
    auto data = t.data<T>();
    for (std::size_t i = 0; i < data.size(); ++i)
      data[i] = static_cast<T>(value(i));
  });
  return t;
}

struct sweep_case {
  collective_op op;
  dtype type;
  std::int64_t count;
  std::size_t chunk_bytes;
  bool in_place;
  std::vector<tensor> inputs;
  std::vector<tensor> outputs;
};

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

} // namespace

TEST_CASE("allreduce_slices: every op, dtype and size against closed forms") {
  const dtype types[] = {dtype::f32, dtype::f64, dtype::i32, dtype::i64};
  const collective_op ops[] = {collective_op::sum, collective_op::mean, collective_op::min,
                               collective_op::max, collective_op::prod};
  for (std::size_t n : {1u, 2u, 3u, 4u, 7u}) {
    // 997 with 64-byte chunks: many chunks per slice, not divisible by any n > 1;
    // 12343 with the default chunk: more than one default chunk for n = 1.
    const std::pair<std::int64_t, std::size_t> sizes[] = {
        {0, 0}, {1, 0}, {7, 0}, {static_cast<std::int64_t>(n) + 1, 0}, {997, 64}, {12343, 0}};
    std::vector<sweep_case> cases;
    for (auto [count, chunk_bytes] : sizes)
      for (auto type : types)
        for (auto op : ops)
          for (bool in_place : {false, true}) {
            sweep_case c{op, type, count, chunk_bytes, in_place, {}, {}};
            for (std::size_t r = 0; r < n; ++r) {
              c.inputs.push_back(
                  make_input(type, count, [&](std::size_t i) { return input_value(op, r, i); }));
              c.outputs.push_back(in_place ? c.inputs.back()
                                           : tensor::filled(type, {count}, -99.0));
            }
            cases.push_back(std::move(c));
          }

    collective_group group{n, "sweep"};
    auto outcomes = run_ranks(n, [&](std::size_t rank) {
      for (auto& c : cases)
        allreduce_slices(group, rank, c.op, c.inputs, c.outputs,
                         {.timeout = 20s, .tag = "", .chunk_bytes = c.chunk_bytes});
    });
    for (std::size_t rank = 0; rank < n; ++rank)
      CHECK_MESSAGE(outcomes[rank].kind.empty(), outcomes[rank].what);

    for (const auto& c : cases) {
      visit_dtype(c.type, [&]<class T>(T) {
        std::size_t wrong = 0;
        for (std::size_t r = 0; r < n; ++r) {
          const auto data = c.outputs[r].data<T>();
          for (std::size_t i = 0; i < data.size(); ++i)
            if (data[i] != expected_value<T>(c.op, n, i))
              ++wrong;
        }
        INFO("n=" << n << " op=" << to_string(c.op) << " dtype=" << to_string(c.type)
                  << " count=" << c.count << " chunk_bytes=" << c.chunk_bytes
                  << " in_place=" << c.in_place);
        CHECK(wrong == 0);
      });
    }
    CHECK(group.next_seq(0) == cases.size() + 1);
  }
}

TEST_CASE("allreduce_slices: mean of integers truncates toward zero") {
  collective_group group{2, "mean"};
  std::vector<tensor> inputs{tensor::from<std::int32_t>({-7, 7, 3}),
                             tensor::from<std::int32_t>({0, 0, 0})};
  std::vector<tensor> outputs{inputs[0], inputs[1]};
  auto outcomes = run_ranks(2, [&](std::size_t rank) {
    allreduce_slices(group, rank, collective_op::mean, inputs, outputs, {.timeout = 10s});
  });
  CHECK(outcomes[0].kind.empty());
  CHECK(outcomes[1].kind.empty());
  for (const auto& t : outputs)
    CHECK(t == tensor::from<std::int32_t>({-3, 3, 1}));
}

TEST_CASE("allreduce_slices: floating results are bit-identical across runs and ranks") {
  for (std::size_t n : {2u, 3u, 4u, 7u})
    for (auto type : {dtype::f32, dtype::f64})
      for (auto op : {collective_op::sum, collective_op::mean}) {
        // Values of mixed sign and magnitude, so the order of additions shows.
        std::vector<tensor> inputs;
        std::uint64_t state = 12345 + n;
        for (std::size_t r = 0; r < n; ++r)
          inputs.push_back(make_input(type, 997, [&](std::size_t i) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            const auto unit = static_cast<double>(state >> 11) / 9007199254740992.0;
            return (unit - 0.5) * (i % 3 == 0 ? 1e6 : 1e-3);
          }));
        // The reference: the same fixed order, input 0 to input N-1, serially.
        tensor reference = inputs[0].copy();
        for (std::size_t r = 1; r < n; ++r)
          add_into(reference, inputs[r]);
        if (op == collective_op::mean)
          divide_into(reference, static_cast<std::int64_t>(n));

        collective_group group{n, "bits"};
        for (int run = 0; run < 3; ++run) {
          std::vector<tensor> outputs;
          for (std::size_t r = 0; r < n; ++r)
            outputs.push_back(tensor::zeros(type, {997}));
          auto outcomes = run_ranks(n, [&](std::size_t rank) {
            allreduce_slices(group, rank, op, inputs, outputs,
                             {.timeout = 10s, .tag = "bits", .chunk_bytes = 96});
          });
          for (std::size_t r = 0; r < n; ++r) {
            CHECK(outcomes[r].kind.empty());
            CHECK(std::memcmp(outputs[r].raw_data(), reference.raw_data(), reference.byte_size())
                  == 0);
          }
        }
      }
}

TEST_CASE("allreduce_slices: invalid arguments are rejected before the rendezvous") {
  collective_group group{2, "args"};
  std::vector<tensor> two{tensor::from<float>({1, 2}), tensor::from<float>({3, 4})};
  std::vector<tensor> outputs{tensor::zeros(dtype::f32, {2}), tensor::zeros(dtype::f32, {2})};

  std::vector<tensor> one{two[0]};
  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 0, collective_op::sum, one, outputs, {.timeout = 1s}),
      "allreduce_slices in group 'args' (rank 0): expected 2 inputs and outputs, got 1 inputs "
      "and 2 outputs",
      value_error);

  std::vector<tensor> mixed_types{two[0], tensor::from<double>({3, 4})};
  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 1, collective_op::sum, mixed_types, outputs, {.timeout = 1s}),
      "allreduce_slices in group 'args' (rank 1): input of rank 1 is float64, input of rank 0 "
      "is float32",
      dtype_error);

  std::vector<tensor> mixed_counts{two[0], tensor::from<float>({3, 4, 5})};
  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 0, collective_op::sum, mixed_counts, outputs, {.timeout = 1s}),
      "allreduce_slices in group 'args' (rank 0): input of rank 1 has 3 elements, input of rank "
      "0 has 2",
      value_error);

  std::vector<tensor> short_output{outputs[0], tensor::zeros(dtype::f32, {1})};
  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 0, collective_op::sum, two, short_output, {.timeout = 1s}),
      "allreduce_slices in group 'args' (rank 0): output of rank 1 has 1 elements, input of "
      "rank 0 has 2",
      value_error);

  CHECK_THROWS_AS(allreduce_slices(group, 2, collective_op::sum, two, outputs, {.timeout = 1s}),
                  value_error);
  CHECK_THROWS_AS(collective_group(0, "empty"), value_error);

  // Nothing reached the rendezvous: the first collective still works.
  auto outcomes = run_ranks(2, [&](std::size_t rank) {
    allreduce_slices(group, rank, collective_op::sum, two, outputs, {.timeout = 10s});
  });
  CHECK(outcomes[0].kind.empty());
  CHECK(outcomes[1].kind.empty());
  CHECK(outputs[1] == tensor::from<float>({4, 6}));
  CHECK(group.next_seq(0) == 2);
}

TEST_CASE("a collective issued differently by one rank fails on every rank, then the group "
          "recovers") {
  collective_group group{3, "m"};
  std::vector<tensor> four, five, outputs;
  for (std::size_t r = 0; r < 3; ++r) {
    four.push_back(tensor::filled(dtype::f32, {4}, static_cast<double>(r + 1)));
    five.push_back(tensor::filled(dtype::f32, {5}, 1.0));
    outputs.push_back(four.back());
  }
  std::vector<tensor> five_outputs = five;

  SUBCASE("a different shape") {
    auto outcomes = run_ranks(3, [&](std::size_t rank) {
      if (rank == 1)
        allreduce_slices(group, rank, collective_op::sum, five, five_outputs, {.timeout = 10s});
      else
        allreduce_slices(group, rank, collective_op::sum, four, outputs, {.timeout = 10s});
    });
    for (const auto& o : outcomes) {
      CHECK(o.kind == "value_error");
      CHECK(o.what
            == "collective mismatch in group 'm': rank 0 issued all_reduce #1 sum float32 [4], "
               "rank 1 issued all_reduce #1 sum float32 [5], rank 2 issued all_reduce #1 sum "
               "float32 [4]");
    }
  }
  SUBCASE("a different op") {
    auto outcomes = run_ranks(3, [&](std::size_t rank) {
      allreduce_slices(group, rank, rank == 2 ? collective_op::max : collective_op::sum, four,
                       outputs, {.timeout = 10s});
    });
    for (const auto& o : outcomes) {
      CHECK(o.kind == "value_error");
      CHECK(o.what
            == "collective mismatch in group 'm': rank 0 issued all_reduce #1 sum float32 [4], "
               "rank 1 issued all_reduce #1 sum float32 [4], rank 2 issued all_reduce #1 max "
               "float32 [4]");
    }
  }
  SUBCASE("a different tag") {
    auto outcomes = run_ranks(3, [&](std::size_t rank) {
      allreduce_slices(group, rank, collective_op::sum, four, outputs,
                       {.timeout = 10s, .tag = rank == 0 ? "a" : "b"});
    });
    for (const auto& o : outcomes) {
      CHECK(o.kind == "value_error");
      CHECK(contains(o.what, "rank 0 issued all_reduce #1 sum float32 [4] tag 'a', rank 1 "
                             "issued all_reduce #1 sum float32 [4] tag 'b'"));
    }
  }
  CHECK(contains(group.dump(), "#1 all_reduce"));
  CHECK(contains(group.dump(), ": mismatch"));

  // The next collective, issued alike, runs: 1 + 2 + 3 in every element.
  auto outcomes = run_ranks(3, [&](std::size_t rank) {
    allreduce_slices(group, rank, collective_op::sum, four, outputs, {.timeout = 10s});
  });
  for (const auto& o : outcomes)
    CHECK_MESSAGE(o.kind.empty(), o.what);
  for (const auto& t : outputs)
    CHECK(t == tensor::filled(dtype::f32, {4}, 6.0));
  CHECK(contains(group.dump(), "#2 all_reduce sum float32 [4] 16 B: completed"));
}

TEST_CASE("a rank that never arrives: the others time out naming it, then all ranks succeed") {
  collective_group group{4, "stall"};
  std::vector<tensor> inputs;
  for (std::size_t r = 0; r < 4; ++r)
    inputs.push_back(tensor::filled(dtype::f32, {4}, static_cast<double>(r)));
  std::vector<tensor> outputs = inputs;

  auto outcomes = run_ranks(4, [&](std::size_t rank) {
    if (rank != 3)
      allreduce_slices(group, rank, collective_op::sum, inputs, outputs, {.timeout = 100ms});
  });
  for (std::size_t rank = 0; rank < 3; ++rank) {
    CHECK(outcomes[rank].kind == "timeout_error");
    CHECK(contains(outcomes[rank].what, "collective timed out in group 'stall': rank 3 did not "
                                        "reach all_reduce #1 sum float32 [4]; rank 3 has "
                                        "issued no collective yet"));
    CHECK(contains(outcomes[rank].what, "recent collectives in group 'stall':\n#1 all_reduce "
                                        "sum float32 [4] 16 B: timed out"));
  }
  CHECK(outcomes[3].kind.empty());

  // Rank 3 arrives late at collective #1: it learns at once that #1 failed,
  // and its arrival does not count toward the next collective.
  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 3, collective_op::sum, inputs, outputs, {.timeout = 10s}),
      doctest::Contains("rank 3 arrived at all_reduce #1 sum float32 [4] after it had timed out"),
      timeout_error);

  outcomes = run_ranks(4, [&](std::size_t rank) {
    allreduce_slices(group, rank, collective_op::sum, inputs, outputs, {.timeout = 10s});
  });
  for (const auto& o : outcomes)
    CHECK_MESSAGE(o.kind.empty(), o.what);
  for (const auto& t : outputs)
    CHECK(t == tensor::filled(dtype::f32, {4}, 6.0));
  const auto dump = group.dump();
  CHECK(contains(dump, "#1 all_reduce sum float32 [4] 16 B: timed out"));
  CHECK(contains(dump, "#2 all_reduce sum float32 [4] 16 B: completed"));
}

TEST_CASE("a timeout names where a missing rank waits instead") {
  collective_group group{2, "skip"};
  const collective_fingerprint first{1, "all_reduce", "sum", dtype::f32, {4}, ""};
  const collective_fingerprint second{2, "all_reduce", "sum", dtype::f32, {4}, ""};
  const auto now = collective_group::clock::now;
  // Rank 1 skipped collective #1 and waits in #2.
  std::thread rank1{[&] {
    group.arrive(1, second, now() + 10s);
    group.wait_all_done(1, 2, now() + 10s);
  }};
  while (!contains(group.dump(), "#2 all_reduce"))
    std::this_thread::sleep_for(1ms);
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
  CHECK_THROWS_AS(group.arrive(1, first, now() + 1s), value_error);
}

TEST_CASE("a rank that does not finish its share: the barrier times out, then all succeed") {
  collective_group group{3, "barrier"};
  const auto now = collective_group::clock::now;
  auto fingerprint = [](std::uint64_t seq) {
    return collective_fingerprint{seq, "all_reduce", "sum", dtype::i64, {2, 3}, ""};
  };
  auto outcomes = run_ranks(3, [&](std::size_t rank) {
    group.arrive(rank, fingerprint(1), now() + 10s);
    if (rank != 2)
      group.wait_all_done(rank, 1, now() + 100ms);
  });
  for (std::size_t rank = 0; rank < 2; ++rank) {
    CHECK(outcomes[rank].kind == "timeout_error");
    CHECK(contains(outcomes[rank].what, "rank 2 did not finish all_reduce #1 sum int64 [2, 3]"));
  }
  CHECK(outcomes[2].kind.empty());
  CHECK_THROWS_WITH_AS(group.wait_all_done(2, 1, now() + 10s),
                       doctest::Contains("rank 2 finished #1 after it had timed out"),
                       timeout_error);
  CHECK(contains(group.dump(), "#1 all_reduce sum int64 [2, 3] 48 B: timed out"));

  outcomes = run_ranks(3, [&](std::size_t rank) {
    group.arrive(rank, fingerprint(2), now() + 10s);
    group.wait_all_done(rank, 2, now() + 10s);
  });
  for (const auto& o : outcomes)
    CHECK_MESSAGE(o.kind.empty(), o.what);
  CHECK(contains(group.dump(), "#2 all_reduce sum int64 [2, 3] 48 B: completed"));
  CHECK_THROWS_AS(group.wait_all_done(0, 2, now() + 1s), value_error);
}

TEST_CASE("abort wakes waiting ranks with its reason and breaks the group for good") {
  collective_group group{2, "abort"};
  const auto now = collective_group::clock::now;
  const collective_fingerprint first{1, "all_reduce", "sum", dtype::f32, {1}, ""};
  std::string seen;
  std::thread rank0{[&] {
    try {
      group.arrive(0, first, now() + 20s);
    } catch (const context_error& e) {
      seen = e.what();
    }
  }};
  while (!contains(group.dump(), "#1 all_reduce"))
    std::this_thread::sleep_for(1ms);
  group.abort(std::make_exception_ptr(context_error("replica 1 failed")));
  rank0.join();
  CHECK(seen == "replica 1 failed");
  CHECK_THROWS_WITH_AS(group.arrive(1, first, now() + 20s), "replica 1 failed", context_error);
}

TEST_CASE("the flight recorder keeps the last 64 collectives") {
  collective_group group{1, "recorder"};
  CHECK(group.dump() == "(no collectives yet)\n");
  std::vector<tensor> inputs{tensor::from<float>({1, 2, 3})};
  std::vector<tensor> outputs{tensor::zeros(dtype::f32, {3})};
  for (int i = 0; i < 70; ++i)
    allreduce_slices(group, 0, collective_op::max, inputs, outputs,
                     {.timeout = 1s, .tag = "fr"});
  CHECK(outputs[0] == inputs[0]);
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

TEST_CASE("ranks waiting for a late rank sleep instead of burning CPU") {
  collective_group group{4, "cpu"};
  std::vector<tensor> inputs;
  for (std::size_t r = 0; r < 4; ++r)
    inputs.push_back(tensor::filled(dtype::f32, {16}, 1.0));
  std::vector<tensor> outputs = inputs;

  const auto cpu_before = cpu_seconds();
  const auto wall_before = std::chrono::steady_clock::now();
  auto outcomes = run_ranks(4, [&](std::size_t rank) {
    if (rank == 3)
      std::this_thread::sleep_for(300ms);
    allreduce_slices(group, rank, collective_op::sum, inputs, outputs, {.timeout = 20s});
  });
  const auto cpu_used = cpu_seconds() - cpu_before;
  const auto waited = std::chrono::steady_clock::now() - wall_before;
  for (const auto& o : outcomes)
    CHECK_MESSAGE(o.kind.empty(), o.what);
  CHECK(outputs[0] == tensor::filled(dtype::f32, {16}, 4.0));
  // Three ranks waited about 300 ms each; spinning through it would cost ~900 ms.
  CHECK(waited >= 300ms);
  INFO("CPU time used: " << cpu_used << " s");
  CHECK(cpu_used < 0.1);
}
