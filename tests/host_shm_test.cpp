// host_shm_communicator: worker processes of one host meeting in a shared
// segment. Most cases run each rank on a thread of its own with its own
// mapping of the segment (the memory is shared exactly as between
// processes, and ThreadSanitizer sees the ranks); the last ones fork real
// processes: a killed one, and nothing left in /dev/shm. Every op and
// dtype against closed forms and, bit for bit, against the in-process
// slice algorithm (shm_communicator); packs of several dtypes; all-gather,
// broadcast and reduce-scatter across many chunks; mismatches and failures
// agreed on by every rank, after which the group still works; a timeout
// naming the worker that did not come; a group broken by the node.

#include "communicators/host_shm_communicator.hpp"

#include "communicators/shm_communicator.hpp"
#include "transport/shm/shared_segment.hpp"

#include "reduce_values.hpp"
#include "test_support.hpp"

#include "lockstep/error.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

using namespace lockstep;
using namespace lockstep::detail;
using namespace std::chrono_literals;

namespace {

/// Small slots, so that a few thousand elements take many chunks.
constexpr std::size_t test_slot_bytes = 4096;

/// A segment for `ranks` ranks and one communicator per rank, each over
/// its own mapping; the segment's name is gone once all are mapped.
struct host_group {
  std::vector<std::shared_ptr<host_shm_communicator>> ranks;
  std::string name;

  explicit host_group(std::size_t n, std::size_t slot_bytes = test_slot_bytes) {
    name = new_segment_name("test");
    auto created = shared_segment::create(name, host_shm_communicator::segment_bytes(n, slot_bytes));
    host_shm_communicator::initialize(created, n, slot_bytes);
    std::vector<shared_segment> mappings;
    for (std::size_t r = 1; r < n; ++r) {
      auto opened = shared_segment::open(name, created.size());
      REQUIRE(opened);
      mappings.push_back(std::move(*opened));
    }
    created.unlink();
    std::vector<std::size_t> workers(n);
    for (std::size_t r = 0; r < n; ++r)
      workers[r] = r;
    ranks.push_back(std::make_shared<host_shm_communicator>(std::move(created), 0, n, slot_bytes,
                                                            workers, n));
    for (std::size_t r = 1; r < n; ++r)
      ranks.push_back(std::make_shared<host_shm_communicator>(std::move(mappings[r - 1]), r, n,
                                                              slot_bytes, workers, n));
  }

  /// Runs `work(communicator, rank)` on one thread per rank; what each threw.
  std::vector<std::exception_ptr> run(
    const std::function<void(host_shm_communicator&, std::size_t)>& work) {
    std::vector<std::exception_ptr> errors(ranks.size());
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < ranks.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          work(*ranks[r], r);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    for (auto& t : threads)
      t.join();
    return errors;
  }
};

collective_options with_timeout(std::chrono::milliseconds timeout = 20s) {
  collective_options o;
  o.timeout = timeout;
  return o;
}

void require_no_errors(const std::vector<std::exception_ptr>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r)
    if (errors[r])
      FAIL("rank " << r << " threw: " << what_of(errors[r]));
}

/// Reproducible values of mixed sign and magnitude for rank r.
tensor mixed(dtype type, std::size_t count, std::size_t r) {
  return make_input(type, static_cast<std::int64_t>(count), [r](std::size_t i) {
    const auto k = static_cast<double>((i * 7 + r * 13) % 29);
    return (k - 14.0) * (1.0 + 0.37 * static_cast<double>(r)) / 3.0;
  });
}

std::vector<std::uint8_t> bits(const tensor& t) {
  const auto* data = static_cast<const std::uint8_t*>(t.raw_data());
  return {data, data + t.byte_size()};
}

/// The names in /dev/shm that a host group of this test left.
std::vector<std::string> leftovers(const std::string& name) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    if ("/" + entry.path().filename().string() == name)
      out.push_back(entry.path().string());
  return out;
}

} // namespace

TEST_CASE("every op and dtype, small and across many chunks, 1 to 4 ranks, against closed forms") {
  for (const std::size_t n : {1, 2, 3, 4}) {
    CAPTURE(n);
    host_group group{n};
    const auto errors = group.run([&](host_shm_communicator& c, std::size_t r) {
      for (const auto type : {dtype::f32, dtype::f64, dtype::i32, dtype::i64})
        for (const auto op : {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max,
                              reduce_op::prod})
          for (const std::size_t count : {0, 1, 100, 3001}) {
            auto in = make_input(type, static_cast<std::int64_t>(count),
                                 [&](std::size_t i) { return input_value(op, r, i); });
            auto out = tensor::zeros(type, {static_cast<std::int64_t>(count)});
            c.all_reduce(r, op, {&in, 1}, {&out, 1}, with_timeout());
            visit_dtype(type, [&]<class T>(T) {
              const auto data = out.data<T>();
              for (std::size_t i = 0; i < count; ++i)
                if (data[i] != expected_value<T>(op, n, i))
                  throw std::runtime_error(std::string(to_string(op)) + " of "
                                           + std::to_string(count) + " "
                                           + std::string(to_string(type)) + ": element "
                                           + std::to_string(i) + " is wrong");
            });
          }
    });
    require_no_errors(errors);
  }
}

TEST_CASE("the same bits as the in-process slice algorithm, for every dtype and op") {
  constexpr std::size_t n = 3;
  host_group group{n};
  shm_communicator threads{n, "threads"};
  for (const auto type : {dtype::f32, dtype::f64, dtype::i32, dtype::i64, dtype::f16,
                          dtype::bf16})
    for (const auto op : {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max,
                          reduce_op::prod})
      for (const std::size_t count : {5, 2500}) {
        CAPTURE(to_string(type));
        CAPTURE(to_string(op));
        CAPTURE(count);
        std::vector<tensor> across(n), within(n);
        require_no_errors(group.run([&](host_shm_communicator& c, std::size_t r) {
          const auto in = mixed(type, count, r);
          across[r] = tensor::zeros(type, {static_cast<std::int64_t>(count)});
          c.all_reduce(r, op, {&in, 1}, {&across[r], 1}, with_timeout());
        }));
        std::vector<std::thread> ranks;
        std::vector<std::exception_ptr> errors(n);
        for (std::size_t r = 0; r < n; ++r)
          ranks.emplace_back([&, r] {
            try {
              const auto in = mixed(type, count, r);
              within[r] = tensor::zeros(type, {static_cast<std::int64_t>(count)});
              threads.all_reduce(r, op, {&in, 1}, {&within[r], 1}, with_timeout());
            } catch (...) {
              errors[r] = std::current_exception();
            }
          });
        for (auto& t : ranks)
          t.join();
        require_no_errors(errors);
        for (std::size_t r = 0; r < n; ++r) {
          CHECK(bits(across[r]) == bits(within[0]));
          CHECK(bits(within[r]) == bits(within[0]));
        }
      }
}

TEST_CASE("a pack of several dtypes, all-gather, broadcast and reduce-scatter") {
  constexpr std::size_t n = 3;
  host_group group{n};
  require_no_errors(group.run([&](host_shm_communicator& c, std::size_t r) {
    // f32, i64, f32: three collectives, each through its own buffer.
    std::vector<tensor> in{make_input(dtype::f32, 2000, [&](std::size_t i) { return input_value(reduce_op::sum, r, i); }),
                           make_input(dtype::i64, 3, [&](std::size_t i) { return input_value(reduce_op::sum, r, i); }),
                           make_input(dtype::f32, 7, [&](std::size_t i) { return input_value(reduce_op::sum, r, i); })};
    std::vector<tensor> out{tensor::zeros(dtype::f32, {2000}), tensor::zeros(dtype::i64, {3}),
                            tensor::zeros(dtype::f32, {7})};
    const auto seq = c.session().next_seq(r);
    c.all_reduce(r, reduce_op::sum, in, out, with_timeout());
    if (c.session().next_seq(r) != seq + 3)
      throw std::runtime_error("a pack of 3 dtype runs takes 3 sequence numbers");
    for (std::size_t i = 0; i < 2000; ++i)
      if (out[0].data<float>()[i] != expected_value<float>(reduce_op::sum, n, i))
        throw std::runtime_error("pack: f32 element " + std::to_string(i));
    for (std::size_t i = 0; i < 3; ++i)
      if (out[1].data<std::int64_t>()[i] != expected_value<std::int64_t>(reduce_op::sum, n, i))
        throw std::runtime_error("pack: i64 element " + std::to_string(i));

    // All-gather of 3000 floats a rank: 3 chunks of a 4 KiB slot.
    const auto mine = make_input(dtype::f32, 3000, [&](std::size_t i) { return 10000.0 * r + i; });
    auto gathered = tensor::zeros(dtype::f32, {3000 * n});
    c.all_gather(r, mine, gathered, with_timeout());
    for (std::size_t k = 0; k < n * 3000; ++k)
      if (gathered.data<float>()[k] != static_cast<float>(10000.0 * (k / 3000) + k % 3000))
        throw std::runtime_error("all_gather element " + std::to_string(k));

    // Broadcast of two tensors from rank 1.
    std::vector<tensor> buffers{make_input(dtype::i32, 2500, [&](std::size_t i) { return r == 1 ? i : 0; }),
                                make_input(dtype::f64, 4, [&](std::size_t i) { return r == 1 ? 0.5 * i : -1; })};
    c.broadcast(r, 1, buffers, with_timeout());
    for (std::size_t i = 0; i < 2500; ++i)
      if (buffers[0].data<std::int32_t>()[i] != static_cast<std::int32_t>(i))
        throw std::runtime_error("broadcast element " + std::to_string(i));
    if (buffers[1].data<double>()[3] != 1.5)
      throw std::runtime_error("broadcast of the second tensor");

    // Reduce-scatter: block r of the sum, small and across chunks (blocks
    // of 1500 int64 start and end inside 4 KiB chunks).
    for (const std::size_t per_rank : {6, 1500}) {
      const auto whole = make_input(dtype::i64, static_cast<std::int64_t>(per_rank * n),
                                    [&](std::size_t i) { return input_value(reduce_op::sum, r, i); });
      auto block = tensor::zeros(dtype::i64, {static_cast<std::int64_t>(per_rank)});
      c.reduce_scatter(r, reduce_op::sum, whole, block, with_timeout());
      for (std::size_t i = 0; i < per_rank; ++i)
        if (block.data<std::int64_t>()[i]
            != expected_value<std::int64_t>(reduce_op::sum, n, per_rank * r + i))
          throw std::runtime_error("reduce_scatter of " + std::to_string(per_rank)
                                   + " a rank, element " + std::to_string(i));
    }
  }));
}

TEST_CASE("ranks that issue different collectives, or pass a failure, all throw the same; the "
          "group goes on") {
  constexpr std::size_t n = 3;
  host_group group{n};
  for (const std::size_t count : {4, 2000}) { // through the records, through the slots
    CAPTURE(count);
    const auto errors = group.run([&](host_shm_communicator& c, std::size_t r) {
      const auto in = tensor::zeros(dtype::f32, {static_cast<std::int64_t>(r == 1 ? count + 1 : count)});
      auto out = in.copy();
      c.all_reduce(r, reduce_op::sum, {&in, 1}, {&out, 1}, with_timeout());
    });
    for (std::size_t r = 0; r < n; ++r) {
      REQUIRE(errors[r]);
      CHECK_THROWS_AS(std::rethrow_exception(errors[r]), shape_error);
      CHECK(what_of(errors[r]) == what_of(errors[0]));
    }
    CHECK(what_of(errors[0]).find("worker 1") != std::string::npos);
  }
  const auto failed = group.run([&](host_shm_communicator& c, std::size_t r) {
    auto options = with_timeout();
    if (r == 2)
      options.failure = std::make_exception_ptr(io_error("rank 2 could not read its input"));
    const auto in = tensor::zeros(dtype::f32, {3000});
    auto out = in.copy();
    c.all_reduce(r, reduce_op::sum, {&in, 1}, {&out, 1}, options);
  });
  for (std::size_t r = 0; r < n; ++r) {
    REQUIRE(failed[r]);
    CHECK_THROWS_AS(std::rethrow_exception(failed[r]), io_error);
    CHECK(what_of(failed[r]) == "rank 2 could not read its input");
  }
  require_no_errors(group.run([&](host_shm_communicator& c, std::size_t r) {
    auto t = make_input(dtype::f32, 3000, [&](std::size_t i) { return input_value(reduce_op::max, r, i); });
    c.all_reduce(r, reduce_op::max, {&t, 1}, {&t, 1}, with_timeout());
    if (t.data<float>()[2999] != expected_value<float>(reduce_op::max, n, 2999))
      throw std::runtime_error("the group works after the errors");
  }));
}

TEST_CASE("a worker that does not come: a timeout naming it, then the same error for it") {
  host_group group{2};
  const auto in = tensor::zeros(dtype::f32, {8});
  auto out = in.copy();
  require_no_errors(group.run([&](host_shm_communicator& c, std::size_t r) {
    auto mine = in.copy();
    c.all_reduce(r, reduce_op::sum, {&mine, 1}, {&mine, 1}, with_timeout());
  }));
  const auto text = error_of<timeout_error>([&] {
    group.ranks[0]->all_reduce(0, reduce_op::sum, {&in, 1}, {&out, 1}, with_timeout(200ms));
  });
  CHECK(text == "all_reduce #2 between the workers (sum float32 [8]) timed out on worker 0 "
                "after 200 ms (its timeout): worker 1 did not reach it (worker 1 last issued #1)");
  CHECK(error_of<timeout_error>([&] {
          group.ranks[1]->all_reduce(1, reduce_op::sum, {&in, 1}, {&out, 1}, with_timeout());
        })
        == text);
  CHECK(group.ranks[0]->session().dump().find("all_reduce #2 sum float32 [8]: group broken")
        != std::string::npos);
}

TEST_CASE("a group the node breaks: the waiting rank and every later call throw its reason") {
  host_group group{3};
  const error_value lost{error_kind::peer_lost_error, "worker 2 was lost (test)", ""};
  std::thread breaker([&] {
    std::this_thread::sleep_for(100ms);
    group.ranks[2]->break_group(lost);
  });
  const auto errors = group.run([&](host_shm_communicator& c, std::size_t r) {
    if (r == 2)
      return; // never comes
    auto t = tensor::zeros(dtype::f64, {5000});
    c.all_reduce(r, reduce_op::sum, {&t, 1}, {&t, 1}, with_timeout(60s));
  });
  breaker.join();
  for (std::size_t r = 0; r < 2; ++r) {
    REQUIRE(errors[r]);
    CHECK_THROWS_AS(std::rethrow_exception(errors[r]), peer_lost_error);
    CHECK(what_of(errors[r]) == "worker 2 was lost (test)");
  }
  auto t = tensor::zeros(dtype::f32, {1});
  CHECK(error_of<peer_lost_error>([&] {
          group.ranks[0]->broadcast(0, 0, {&t, 1}, with_timeout());
        })
        == "worker 2 was lost (test)");
}

TEST_CASE("real processes: one killed mid-collective, the other fails once the group is broken; "
          "nothing is left in /dev/shm") {
  constexpr std::size_t n = 2;
  const auto name = new_segment_name("test");
  const auto bytes = host_shm_communicator::segment_bytes(n, test_slot_bytes);
  auto created = shared_segment::create(name, bytes);
  host_shm_communicator::initialize(created, n, test_slot_bytes);
  // The children map the segment by its name, then the parent unlinks it.
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  std::vector<pid_t> children;
  for (std::size_t r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int status = 3;
      try {
        auto mapping = shared_segment::open(name, bytes);
        if (!mapping)
          ::_exit(4);
        const char one = 1;
        (void) !::write(ready[1], &one, 1);
        host_shm_communicator c{std::move(*mapping), r, n, test_slot_bytes, {0, 1}, n};
        auto t = tensor::zeros(dtype::f32, {3000});
        c.all_reduce(r, reduce_op::sum, {&t, 1}, {&t, 1}, with_timeout());
        if (r == 1)
          ::raise(SIGKILL); // dies between two collectives; rank 0 waits in the next
        c.all_reduce(r, reduce_op::sum, {&t, 1}, {&t, 1}, with_timeout(60s));
        status = 5; // the collective should have failed
      } catch (const peer_lost_error& e) {
        status = std::string(e.what()) == "worker 1 was lost (killed)" ? 0 : 6;
      } catch (...) {
        status = 7;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  for (std::size_t r = 0; r < n; ++r) {
    char one = 0;
    REQUIRE(::read(ready[0], &one, 1) == 1);
  }
  created.unlink();
  CHECK(leftovers(name).empty());
  // The node's part: it learns that worker 1 is gone and breaks the group.
  int status = 0;
  REQUIRE(::waitpid(children[1], &status, 0) == children[1]);
  CHECK(WIFSIGNALED(status));
  host_shm_communicator parent{std::move(created), 0, n, test_slot_bytes, {0, 1}, n};
  parent.break_group({error_kind::peer_lost_error, "worker 1 was lost (killed)", ""});
  const auto limit = std::chrono::steady_clock::now() + 30s;
  pid_t done = 0;
  while ((done = ::waitpid(children[0], &status, WNOHANG)) == 0
         && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(10ms);
  if (done == 0)
    ::kill(children[0], SIGKILL);
  REQUIRE(done == children[0]);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  ::close(ready[0]);
  ::close(ready[1]);
  CHECK(leftovers(name).empty());
}
