// device_executor and variable_copy without CAF, so this also runs under
// ThreadSanitizer: the executor's FIFO order, drain and shutdown; a
// variable's copies applying writes in sequence order however many threads
// post them and in whatever order they arrive; snapshots that never change
// (copy on write) and buffers reused only after every snapshot's last
// read; local writes after a given write, nested local writes;
// failures recorded with their write; and timeouts that name what they
// waited for. Every expected value is computed in closed form or by
// applying the same writes sequentially. No assertion depends on timing, and
// every wait ends at a deadline of a few seconds.

#include "devices/device_executor.hpp"
#include "variables/variable_copy.hpp"

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "lockstep/device_spec.hpp"
#include "lockstep/dtype.hpp"
#include "lockstep/error.hpp"
#include "lockstep/tensor.hpp"

using namespace lockstep;
using lockstep::detail::device_executor;
using lockstep::detail::variable_copy;
using lockstep::detail::variable_write;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

/// How long any wait of this test may take before it fails.
constexpr auto patience = 5s;

clock_type::time_point deadline() {
  return clock_type::now() + patience;
}

/// A task or a thread that waits for the test to let it go, at most
/// `patience`, so a broken component fails the test instead of hanging it.
class gate {
public:
  void open() { opened_.set_value(); }
  bool wait() const { return ready_.wait_for(patience) == std::future_status::ready; }

private:
  std::promise<void> opened_;
  std::shared_future<void> ready_ = opened_.get_future().share();
};

std::shared_ptr<variable_copy> make_copy(std::size_t copy, tensor initial,
                                          device_executor* executor) {
  return std::make_shared<variable_copy>("w", copy, std::move(initial), executor);
}

std::int64_t element(const tensor& t, std::size_t i) {
  return t.data<std::int64_t>()[i];
}

bool all_equal(const tensor& t, std::int64_t expected) {
  for (auto x : t.data<std::int64_t>())
    if (x != expected)
      return false;
  return true;
}

// -- writes -------------------------------------------------------------------

/// A write given as a function of the value.
class lambda_write final : public variable_write {
public:
  using function = std::function<void(tensor&)>;

  explicit lambda_write(function fn, bool reads_value = true, bool overwrites = false)
    : fn_(std::move(fn)), reads_value_(reads_value), overwrites_(overwrites) {}

  void apply(std::size_t, tensor& value) const override { fn_(value); }
  bool reads_value() const noexcept override { return reads_value_; }
  bool overwrites() const noexcept override { return overwrites_; }

private:
  function fn_;
  bool reads_value_;
  bool overwrites_;
};

std::shared_ptr<const variable_write> write_of(lambda_write::function fn,
                                               bool reads_value = true,
                                               bool overwrites = false) {
  return std::make_shared<lambda_write>(std::move(fn), reads_value, overwrites);
}

/// x = 10 x + digit on an int64 scalar: the digits of the result list the
/// writes in the order they were applied.
std::shared_ptr<const variable_write> append_digit(std::int64_t digit) {
  return write_of([digit](tensor& v) { v.data<std::int64_t>()[0] = 10 * element(v, 0) + digit; });
}

constexpr std::int64_t prime = 1'000'000'007;

/// The ordering test's write `seq` on an int64 tensor of `affine_elements`:
/// element 0 holds the last applied seq and must be `seq - 1` when the write
/// arrives; element i > 0 becomes (3 x + seq + i) mod prime, which no two
/// writes with different seqs commute in.
constexpr std::size_t affine_elements = 4;

void apply_affine(std::uint64_t seq, std::span<std::int64_t> x) {
  x[0] = static_cast<std::int64_t>(seq);
  for (std::size_t i = 1; i < x.size(); ++i)
    x[i] = (3 * x[i] + static_cast<std::int64_t>(seq + i)) % prime;
}

class affine_write final : public variable_write {
public:
  affine_write(std::uint64_t seq, std::atomic<int>& out_of_order)
    : seq_(seq), out_of_order_(out_of_order) {}

  void apply(std::size_t, tensor& value) const override {
    auto x = value.data<std::int64_t>();
    if (x[0] != static_cast<std::int64_t>(seq_) - 1)
      ++out_of_order_;
    apply_affine(seq_, x);
  }

private:
  std::uint64_t seq_;
  std::atomic<int>& out_of_order_;
};

/// Sets every element to `seq`; reads_value() is false for even seqs.
class set_to_seq_write final : public variable_write {
public:
  explicit set_to_seq_write(std::uint64_t seq) : seq_(seq) {}

  void apply(std::size_t, tensor& value) const override {
    for (auto& x : value.data<std::int64_t>())
      x = static_cast<std::int64_t>(seq_);
  }
  bool reads_value() const noexcept override { return seq_ % 2 == 1; }

private:
  std::uint64_t seq_;
};

} // namespace

// -- device_executor ----------------------------------------------------------

TEST_CASE("device_executor runs tasks in posting order on its one thread") {
  for (auto spin : {0us, 50us}) {
    CAPTURE(spin.count());
    constexpr int tasks = 1000;
    device_executor executor{cpu_device(0), spin};
    CHECK(executor.device() == cpu_device(0));
    CHECK_FALSE(executor.on_this_thread());
    // Touched only by the executor's thread until drain() returns.
    std::vector<int> order;
    std::vector<std::thread::id> threads;
    int on_own_thread = 0;
    for (int i = 0; i < tasks; ++i)
      executor.post([&, i] {
        order.push_back(i);
        threads.push_back(std::this_thread::get_id());
        on_own_thread += executor.on_this_thread() ? 1 : 0;
      });
    REQUIRE(executor.drain(deadline()));
    REQUIRE(order.size() == tasks);
    for (int i = 0; i < tasks; ++i)
      CHECK(order[static_cast<std::size_t>(i)] == i);
    CHECK(threads.front() != std::this_thread::get_id());
    for (auto id : threads)
      CHECK(id == threads.front());
    CHECK(on_own_thread == tasks);
  }
}

TEST_CASE("device_executor drain waits for every task posted before it") {
  device_executor executor{cpu_device(0), 0us};
  gate blocked;
  int ran = 0; // the executor's thread writes it; drain() publishes it
  bool gate_opened = false;
  executor.post([&] { gate_opened = blocked.wait(); });
  for (int i = 0; i < 100; ++i)
    executor.post([&] { ++ran; });

  // The first task cannot finish before the gate opens.
  CHECK_FALSE(executor.drain(clock_type::now() + 20ms));
  CHECK_FALSE(executor.drain(clock_type::now()));

  std::thread opener{[&] {
    std::this_thread::sleep_for(5ms); // so drain() is probably waiting already
    blocked.open();
  }};
  CHECK(executor.drain(deadline()));
  opener.join();
  CHECK(gate_opened);
  CHECK(ran == 100);

  // Tasks posted after a drain started are not waited for, but a later
  // drain waits for them too.
  for (int i = 0; i < 50; ++i)
    executor.post([&] { ++ran; });
  CHECK(executor.drain(deadline()));
  CHECK(ran == 150);
  CHECK(executor.drain(clock_type::now())); // nothing pending: true at once
}

TEST_CASE("device_executor drain called by one of its tasks returns true at once") {
  device_executor executor{cpu_device(0), 0us};
  int ran_before = 0;
  bool drained = false;
  int seen_before = -1;
  int ran_after = 0;
  for (int i = 0; i < 10; ++i)
    executor.post([&] { ++ran_before; });
  // A deadline already past: waiting at all would return false.
  executor.post([&] {
    drained = executor.drain(clock_type::now() - 1s);
    seen_before = ran_before;
  });
  executor.post([&] { ++ran_after; });
  REQUIRE(executor.drain(deadline()));
  CHECK(drained);
  CHECK(seen_before == 10);
  CHECK(ran_after == 1);
}

TEST_CASE("device_executor destructor runs every queued task") {
  for (auto spin : {0us, 50us}) {
    CAPTURE(spin.count());
    gate blocked;
    int ran = 0; // published by the destructor's join
    bool gate_opened = false;
    auto executor = std::make_unique<device_executor>(cpu_device(1), spin);
    executor->post([&] { gate_opened = blocked.wait(); });
    for (int i = 0; i < 500; ++i)
      executor->post([&] { ++ran; });
    std::thread opener{[&] {
      std::this_thread::sleep_for(5ms); // so the destructor probably waits already
      blocked.open();
    }};
    executor.reset();
    opener.join();
    CHECK(gate_opened);
    CHECK(ran == 500);
  }

  // An idle executor (asleep or polling) stops at once.
  for (auto spin : {0us, 1000us}) {
    int ran = 0;
    {
      device_executor executor{cpu_device(0), spin};
      executor.post([&] { ++ran; });
      REQUIRE(executor.drain(deadline()));
    }
    CHECK(ran == 1);
  }
}

TEST_CASE("device_executor loses no task posted by many threads at once") {
  for (auto spin : {0us, 20us}) {
    CAPTURE(spin.count());
    constexpr int posters = 8;
    constexpr int per_poster = 500;
    device_executor executor{cpu_device(0), spin};
    // Touched only by the executor's thread until drain() returns.
    int ran = 0;
    std::array<int, posters> next{}; // each poster's next expected task
    int out_of_order = 0;
    std::vector<std::thread> pool;
    for (int p = 0; p < posters; ++p)
      pool.emplace_back([&, p] {
        for (int i = 0; i < per_poster; ++i)
          executor.post([&, p, i] {
            ++ran;
            if (next[static_cast<std::size_t>(p)] != i)
              ++out_of_order;
            next[static_cast<std::size_t>(p)] = i + 1;
          });
      });
    for (auto& t : pool)
      t.join();
    REQUIRE(executor.drain(deadline()));
    CHECK(ran == posters * per_poster);
    CHECK(out_of_order == 0); // FIFO: each poster's tasks in its own order
    for (auto n : next)
      CHECK(n == per_poster);
  }
}

TEST_CASE("device_executor when_drained runs once every task posted before it ran") {
  for (auto spin : {0us, 20us}) {
    CAPTURE(spin.count());
    device_executor executor{cpu_device(0), spin};

    // Nothing pending: the callback runs at once, on the calling thread.
    std::thread::id ran_on;
    executor.when_drained([&] { ran_on = std::this_thread::get_id(); });
    CHECK(ran_on == std::this_thread::get_id());

    // Pending tasks: on the executor's thread, after them (and perhaps after
    // later ones of the same batch).
    gate blocked;
    bool gate_opened = false;
    int ran = 0;
    executor.post([&] { gate_opened = blocked.wait(); });
    for (int i = 0; i < 100; ++i)
      executor.post([&] { ++ran; });
    std::promise<int> seen;
    std::promise<std::thread::id> seen_on;
    executor.when_drained([&] {
      seen_on.set_value(std::this_thread::get_id());
      seen.set_value(ran);
    });
    executor.post([&] { ran += 1000; });
    auto result = seen.get_future();
    CHECK(result.wait_for(20ms) == std::future_status::timeout); // the gate holds it
    blocked.open();
    REQUIRE(result.wait_for(patience) == std::future_status::ready);
    CHECK(result.get() >= 100);
    CHECK(seen_on.get_future().get() != std::this_thread::get_id());
    REQUIRE(executor.drain(deadline()));
    CHECK(gate_opened);
    CHECK(ran == 1100);

    // Called by one of its own tasks: at once (the tasks before it ran).
    bool inner = false;
    executor.post([&] { executor.when_drained([&] { inner = true; }); });
    REQUIRE(executor.drain(deadline()));
    CHECK(inner);
  }
}

TEST_CASE("device_executor runs tasks too large to be held in place") {
  device_executor executor{cpu_device(0), 0us};
  std::array<std::int64_t, 32> big{}; // 256 bytes: held on the heap
  for (std::size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<std::int64_t>(i);
  auto counter = std::make_shared<int>(0);
  std::int64_t sum = 0;
  executor.post([&sum, big, counter] {
    for (auto x : big)
      sum += x;
    ++*counter;
  });
  REQUIRE(executor.drain(deadline()));
  CHECK(sum == 31 * 32 / 2);
  CHECK(*counter == 1);
  CHECK(counter.use_count() == 1); // the task and its captures are gone
}

// -- ordering -----------------------------------------------------------------

TEST_CASE("variable_copy applies early writes only when the writes before them arrive") {
  auto copy = make_copy(0, tensor::scalar<std::int64_t>(0), nullptr);
  copy->post(3, append_digit(3));
  copy->post(2, append_digit(2));
  // Parked: nothing applied, the value is untouched.
  CHECK(element(copy->read(0, deadline()), 0) == 0);
  CHECK_THROWS_AS(copy->wait_applied(1, clock_type::now() + 10ms), timeout_error);
  copy->post(1, append_digit(1));
  copy->wait_applied(3, clock_type::now()); // applied by the post of 1 itself
  CHECK(element(copy->read(3, deadline()), 0) == 123);
  copy->post(5, append_digit(5));
  copy->post(4, append_digit(4));
  CHECK(element(copy->read(5, deadline()), 0) == 12345);
  CHECK_FALSE(copy->failure().has_value());

  // The same on a copy with an executor: delivery is asynchronous.
  device_executor executor{cpu_device(1), 0us};
  auto remote = make_copy(1, tensor::scalar<std::int64_t>(0, cpu_device(1)), &executor);
  for (std::int64_t seq : {3, 2, 5, 4})
    remote->post(static_cast<std::uint64_t>(seq), append_digit(seq));
  REQUIRE(executor.drain(deadline()));
  CHECK(element(remote->read(0, deadline()), 0) == 0);
  remote->post(1, append_digit(1));
  CHECK(element(remote->read(5, deadline()), 0) == 12345);
}

namespace {

struct ordering_case {
  const char* name;
  int copies;
  int executors; // the first `executors` copies have one, the others none
  int writers;
  std::uint64_t writes;
  std::chrono::microseconds spin;
};

/// The value after writes 1..writes, applied one after the other.
std::vector<std::int64_t> sequential_affine(std::uint64_t writes) {
  std::vector<std::int64_t> x(affine_elements, 0);
  for (std::uint64_t seq = 1; seq <= writes; ++seq)
    apply_affine(seq, x);
  return x;
}

} // namespace

TEST_CASE("variable_copy copies apply writes from many threads in seq order") {
  const ordering_case cases[] = {
    {"1 copy, executor", 1, 1, 4, 3000, 0us},
    {"2 copies, executors", 2, 2, 5, 3000, 0us},
    {"3 copies, executors", 3, 3, 6, 2000, 0us},
    {"4 copies, executors", 4, 4, 8, 2000, 0us},
    {"4 copies, executors that poll", 4, 4, 4, 1000, 20us},
    {"1 copy, no executor", 1, 0, 8, 3000, 0us},
    {"2 copies, no executor", 2, 0, 8, 3000, 0us},
    {"4 copies, no executor", 4, 0, 6, 2000, 0us},
    {"3 copies, 2 with executors", 3, 2, 7, 2000, 0us},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    std::vector<std::unique_ptr<device_executor>> executors;
    for (int e = 0; e < c.executors; ++e)
      executors.push_back(std::make_unique<device_executor>(cpu_device(e), c.spin));
    std::vector<std::shared_ptr<variable_copy>> copies;
    for (int i = 0; i < c.copies; ++i)
      copies.push_back(make_copy(
          static_cast<std::size_t>(i),
          tensor::zeros(dtype::i64, {static_cast<std::int64_t>(affine_elements)}, cpu_device(i)),
          i < c.executors ? executors[static_cast<std::size_t>(i)].get() : nullptr));

    std::atomic<std::uint64_t> next_seq{0};
    std::atomic<int> out_of_order{0};
    std::vector<std::thread> writers;
    for (int w = 0; w < c.writers; ++w)
      writers.emplace_back([&] {
        for (;;) {
          const auto seq = next_seq.fetch_add(1) + 1;
          if (seq > c.writes)
            return;
          auto write = std::make_shared<const affine_write>(seq, out_of_order);
          // Each writer starts at another copy, so the copies see the
          // writes arrive in different orders.
          for (std::size_t k = 0; k < copies.size(); ++k)
            copies[(seq + k) % copies.size()]->post(seq, write);
        }
      });
    for (auto& t : writers)
      t.join();

    const auto expected = sequential_affine(c.writes);
    for (const auto& copy : copies) {
      CAPTURE(copy->describe());
      copy->wait_applied(c.writes, deadline());
      const auto value = copy->read(c.writes, deadline());
      const auto x = value.data<std::int64_t>();
      CHECK(std::vector<std::int64_t>(x.begin(), x.end()) == expected);
      CHECK_FALSE(copy->failure().has_value());
    }
    CHECK(out_of_order == 0);
  }
}

// -- snapshots ----------------------------------------------------------------

TEST_CASE("variable_copy snapshots never change; unshared values are written in place") {
  for (bool with_executor : {false, true}) {
    CAPTURE(with_executor);
    device_executor executor{cpu_device(0), 0us};
    auto copy = make_copy(0, tensor::filled(dtype::i64, {4}, 1),
                          with_executor ? &executor : nullptr);

    // Inside a write the value is held by the copy alone.
    std::vector<const void*> buffers; // the buffer each write saw
    std::vector<long> use_counts;
    auto add = [&](std::int64_t amount, bool reads_value = true) {
      return write_of(
          [&buffers, &use_counts, amount, reads_value](tensor& v) {
            buffers.push_back(v.raw_data());
            use_counts.push_back(v.buffer_use_count());
            for (auto& x : v.data<std::int64_t>())
              x = (reads_value ? x : 0) + amount;
          },
          reads_value);
    };

    const void* original = nullptr;
    {
      const auto first = copy->read(0, deadline());
      original = first.raw_data();
    } // no snapshot held now

    copy->post(1, add(1));
    {
      const auto after_one = copy->read(1, deadline());
      CHECK(all_equal(after_one, 2));
      CHECK(after_one.raw_data() == original); // in place
    }

    // A held snapshot survives later writes that read the value.
    const auto held = copy->read(1, deadline());
    copy->post(2, add(10));
    copy->post(3, add(100));
    const auto after_three = copy->read(3, deadline());
    CHECK(all_equal(held, 2));
    CHECK(held.raw_data() == original);
    CHECK(all_equal(after_three, 112));
    CHECK_FALSE(after_three.same_buffer(held));

    // A write that does not read the value gets a fresh buffer when the
    // old one is shared, not a copy of it.
    const void* fresh = nullptr;
    bool fresh_was_zero = false;
    copy->post(4, write_of(
                      [&](tensor& v) {
                        fresh = v.raw_data();
                        fresh_was_zero = all_equal(v, 0);
                        for (auto& x : v.data<std::int64_t>())
                          x = 7;
                      },
                      false));
    {
      const auto after_four = copy->read(4, deadline());
      CHECK(all_equal(after_three, 112));
      CHECK(all_equal(held, 2));
      CHECK(all_equal(after_four, 7));
      CHECK(after_four.raw_data() == fresh);
      CHECK(fresh != after_three.raw_data());
      CHECK(fresh != original);
      CHECK(fresh_was_zero);
    } // no snapshot of the fresh buffer held now

    // The same write on an unshared buffer writes in place.
    copy->post(5, add(3, false));
    CHECK(all_equal(copy->read(5, deadline()), 3)); // a temporary: not held
    copy->post(6, add(4, false));
    CHECK(all_equal(copy->read(6, deadline()), 4));

    // `buffers` holds what writes 1, 2, 3, 5 and 6 saw (write 4 was not an
    // `add`). Write 1 found the original buffer unshared and wrote it in
    // place; write 2 found it held by `held` and got a copy; write 3 wrote
    // that copy in place; write 4 found it held by `after_three` and got a
    // fresh buffer; writes 5 and 6, which do not read the value either,
    // found that one unshared and wrote it in place.
    REQUIRE(buffers.size() == 5);
    CHECK(buffers[0] == original);
    CHECK(buffers[1] != original);
    CHECK(buffers[2] == buffers[1]);
    CHECK(buffers[3] == fresh);
    CHECK(buffers[4] == fresh);
    for (auto count : use_counts)
      CHECK(count == 1);
    CHECK(copy->read(6, deadline()).raw_data() == fresh);
  }
}

TEST_CASE("variable_copy readers concurrent with writers see whole writes only") {
  constexpr int writers = 4;
  constexpr int readers = 3;
  constexpr std::uint64_t writes = 1500;
  constexpr std::int64_t elements = 1024;
  for (bool with_executor : {false, true}) {
    CAPTURE(with_executor);
    device_executor executor{cpu_device(0), 0us};
    auto copy = make_copy(0, tensor::zeros(dtype::i64, {elements}),
                          with_executor ? &executor : nullptr);

    std::atomic<std::uint64_t> next_seq{0};
    std::atomic<int> torn{0};       // a snapshot with different elements
    std::atomic<int> went_back{0};  // a snapshot older than the one before
    std::atomic<int> changed{0};    // a held snapshot that changed
    std::atomic<int> timed_out{0};
    std::atomic<int> reads{0};
    std::atomic<int> started{0}; // readers that took their first snapshot
    std::vector<std::thread> pool;
    // Reader 0 drops each snapshot once it has checked it, so writers find
    // the buffer unshared again and write it in place right after a read;
    // the others hold their last snapshot and check that it never changes.
    for (int r = 0; r < readers; ++r)
      pool.emplace_back([&, holds = r != 0] {
        tensor previous = copy->read(0, deadline());
        std::int64_t previous_seq = element(previous, 0);
        if (!holds)
          previous = tensor{};
        ++started;
        const auto until = deadline();
        while (previous_seq < static_cast<std::int64_t>(writes)) {
          if (clock_type::now() > until) {
            ++timed_out;
            return;
          }
          tensor snapshot = copy->read(0, until);
          ++reads;
          const auto seq = element(snapshot, 0);
          if (!all_equal(snapshot, seq))
            ++torn;
          if (seq < previous_seq)
            ++went_back;
          if (holds && !all_equal(previous, previous_seq))
            ++changed;
          previous = holds ? std::move(snapshot) : tensor{};
          previous_seq = seq;
        }
      });
    for (int w = 0; w < writers; ++w)
      pool.emplace_back([&] {
        // Every reader reads at least once more after the writes begin.
        const auto until = deadline();
        while (started < readers && clock_type::now() < until)
          std::this_thread::yield();
        for (;;) {
          const auto seq = next_seq.fetch_add(1) + 1;
          if (seq > writes)
            return;
          copy->post(seq, std::make_shared<const set_to_seq_write>(seq));
        }
      });
    for (auto& t : pool)
      t.join();
    CHECK(timed_out == 0);
    CHECK(torn == 0);
    CHECK(went_back == 0);
    CHECK(changed == 0);
    CHECK(reads >= readers);
    CHECK(all_equal(copy->read(writes, deadline()), static_cast<std::int64_t>(writes)));
  }
}

TEST_CASE("variable_copy writes in place after a snapshot is dropped on another thread") {
  constexpr int rounds = 200;
  auto copy = make_copy(0, tensor::zeros(dtype::i64, {256}), nullptr);
  // Relaxed on purpose: the two threads tell each other nothing but how far
  // they got, as unrelated threads would; the variable must order the
  // reader's last look at its snapshot before the write that reuses it.
  std::atomic<int> dropped{-1};
  std::atomic<int> written{0};
  std::atomic<int> torn{0};
  std::atomic<int> moved{0}; // a write that did not reuse the buffer
  std::atomic<int> timed_out{0};
  const void* buffer = copy->read(0, deadline()).raw_data();
  std::thread reader{[&] {
    const auto until = deadline();
    for (int round = 0; round <= rounds; ++round) {
      while (written.load(std::memory_order_relaxed) < round) {
        if (clock_type::now() > until) {
          ++timed_out;
          return;
        }
        std::this_thread::yield();
      }
      {
        const auto snapshot = copy->read(static_cast<std::uint64_t>(round), until);
        if (!all_equal(snapshot, round))
          ++torn;
        if (snapshot.raw_data() != buffer)
          ++moved;
      }
      dropped.store(round, std::memory_order_relaxed);
    }
  }};
  const auto until = deadline();
  for (int round = 1; round <= rounds; ++round) {
    while (dropped.load(std::memory_order_relaxed) < round - 1 && clock_type::now() < until)
      std::this_thread::yield();
    copy->post(static_cast<std::uint64_t>(round),
               std::make_shared<const set_to_seq_write>(static_cast<std::uint64_t>(round)));
    written.store(round, std::memory_order_relaxed);
  }
  reader.join();
  CHECK(timed_out == 0);
  CHECK(torn == 0);
  CHECK(moved == 0); // every write found the buffer unshared
}

// -- apply_local --------------------------------------------------------------

TEST_CASE("variable_copy apply_local applies after the given write") {
  constexpr std::uint64_t writes = 200;
  device_executor executor{cpu_device(0), 0us};
  auto copy = make_copy(0, tensor::zeros(dtype::i64, {static_cast<std::int64_t>(affine_elements)}),
                        &executor);
  // Hold the executor so that none of the writes is applied yet when the
  // local write starts waiting.
  gate blocked;
  executor.post([&] { blocked.wait(); });
  std::atomic<int> out_of_order{0};
  for (std::uint64_t seq = 1; seq <= writes; ++seq)
    copy->post(seq, std::make_shared<const affine_write>(seq, out_of_order));

  std::int64_t last_seen_by_local = -1;
  std::thread local{[&] {
    copy->apply_local(
        [&](tensor& v) {
          auto x = v.data<std::int64_t>();
          last_seen_by_local = x[0];
          for (std::size_t i = 1; i < x.size(); ++i)
            x[i] = (x[i] * 5 + 1000) % prime;
        },
        writes, deadline());
  }};
  std::this_thread::sleep_for(5ms); // so apply_local probably waits already
  blocked.open();
  local.join();

  auto expected = sequential_affine(writes);
  for (std::size_t i = 1; i < expected.size(); ++i)
    expected[i] = (expected[i] * 5 + 1000) % prime;
  const auto value = copy->read(writes, deadline());
  const auto x = value.data<std::int64_t>();
  CHECK(std::vector<std::int64_t>(x.begin(), x.end()) == expected);
  CHECK(last_seen_by_local == static_cast<std::int64_t>(writes));
  CHECK(out_of_order == 0);

  // A posted write after the local one applies on top of it.
  copy->post(writes + 1, std::make_shared<const affine_write>(writes + 1, out_of_order));
  apply_affine(writes + 1, expected);
  const auto later = copy->read(writes + 1, deadline());
  const auto y = later.data<std::int64_t>();
  CHECK(std::vector<std::int64_t>(y.begin(), y.end()) == expected);
}

TEST_CASE("variable_copy apply_local inside the copy's own write applies at once") {
  for (bool with_executor : {false, true}) {
    CAPTURE(with_executor);
    device_executor executor{cpu_device(0), 0us};
    auto copy = make_copy(0, tensor::scalar<std::int64_t>(1), with_executor ? &executor : nullptr);
    variable_copy* self = copy.get();
    // ((x + 1) * 10) + 2, the middle step a nested local write that waits
    // for a write (7) that will never come: it must not wait at all.
    std::int64_t inner_saw = -1;
    copy->post(1, write_of([&](tensor& v) {
      v.data<std::int64_t>()[0] += 1;
      self->apply_local(
          [&](tensor& same) {
            inner_saw = element(same, 0);
            same.data<std::int64_t>()[0] *= 10;
          },
          7, clock_type::now() + 1s);
      v.data<std::int64_t>()[0] += 2;
    }));
    CHECK(element(copy->read(1, deadline()), 0) == 22);
    CHECK(inner_saw == 2);
    CHECK_FALSE(copy->failure().has_value());
    copy->post(2, append_digit(3));
    CHECK(element(copy->read(2, deadline()), 0) == 223);
  }
}

TEST_CASE("variable_copy apply_local lets exceptions through and stays usable") {
  for (bool with_executor : {false, true}) {
    CAPTURE(with_executor);
    device_executor executor{cpu_device(0), 0us};
    auto copy = make_copy(0, tensor::scalar<std::int64_t>(5), with_executor ? &executor : nullptr);
    const auto message = error_of<value_error>([&] {
      copy->apply_local([](tensor&) { throw value_error("local write refused"); }, 0, deadline());
    });
    CHECK(message == "local write refused");
    CHECK_FALSE(copy->failure().has_value()); // not recorded

    copy->apply_local([](tensor& v) { v.data<std::int64_t>()[0] *= 2; }, 0, deadline());
    CHECK(element(copy->read(0, deadline()), 0) == 10);
    copy->post(1, append_digit(7));
    CHECK(element(copy->read(1, deadline()), 0) == 107);

    // A write posted while the local write runs waits for it, and is
    // applied when it ends, even by a throw.
    CHECK_THROWS_AS(copy->apply_local(
                        [&](tensor& v) {
                          v.data<std::int64_t>()[0] = 4;
                          copy->post(2, append_digit(2));
                          throw std::runtime_error("after posting");
                        },
                        1, deadline()),
                    std::runtime_error);
    CHECK(element(copy->read(2, deadline()), 0) == 42);
    CHECK_FALSE(copy->failure().has_value());
  }
}

// -- failures -----------------------------------------------------------------

TEST_CASE("variable_copy records the first failed write until an overwrite or clear") {
  for (bool with_executor : {false, true}) {
    CAPTURE(with_executor);
    device_executor executor{cpu_device(0), 0us};
    auto copy = make_copy(0, tensor::scalar<std::int64_t>(0), with_executor ? &executor : nullptr);
    auto add = [](std::int64_t amount) {
      return write_of([amount](tensor& v) { v.data<std::int64_t>()[0] += amount; });
    };
    // The write constructs its exception when it throws: copies of one
    // std::runtime_error share their message through a reference count
    // that ThreadSanitizer cannot see (libstdc++ is not instrumented).
    auto fail_with = []<class E>(std::type_identity<E>, std::string message) {
      return write_of([message](tensor&) { throw E(message); });
    };
    auto assign = [](std::int64_t value, bool succeeds) {
      return write_of(
          [value, succeeds](tensor& v) {
            if (!succeeds)
              throw shape_error("assign refused");
            v.data<std::int64_t>()[0] = value;
          },
          false, true);
    };

    copy->post(1, add(1));
    copy->post(2, fail_with(std::type_identity<value_error>{}, "write 2 failed"));
    copy->post(3, add(10));
    copy->post(4, fail_with(std::type_identity<type_error>{}, "write 4 failed"));
    CHECK(element(copy->read(4, deadline()), 0) == 11); // 3 applied after 2 failed
    auto failure = copy->failure();
    REQUIRE(failure.has_value());
    CHECK(failure->seq == 2); // the first, not the latest
    CHECK(error_of<value_error>([&] { std::rethrow_exception(failure->error); })
          == "write 2 failed");

    copy->post(5, assign(50, true)); // an overwrite that succeeds clears it
    CHECK(element(copy->read(5, deadline()), 0) == 50);
    CHECK_FALSE(copy->failure().has_value());

    copy->post(6, fail_with(std::type_identity<type_error>{}, "write 6 failed"));
    copy->post(7, assign(70, false)); // an overwrite that fails keeps it
    copy->post(8, add(1));
    CHECK(element(copy->read(8, deadline()), 0) == 51);
    failure = copy->failure();
    REQUIRE(failure.has_value());
    CHECK(failure->seq == 6);
    CHECK(error_of<type_error>([&] { std::rethrow_exception(failure->error); })
          == "write 6 failed");

    copy->clear_failure();
    CHECK_FALSE(copy->failure().has_value());
    copy->post(9, fail_with(std::type_identity<shape_error>{}, "write 9 failed"));
    copy->wait_applied(9, deadline());
    failure = copy->failure();
    REQUIRE(failure.has_value());
    CHECK(failure->seq == 9);
    CHECK_THROWS_AS(std::rethrow_exception(failure->error), shape_error);
    copy->clear_failure();
    CHECK_FALSE(copy->failure().has_value());
  }
}

// -- timeouts -----------------------------------------------------------------

TEST_CASE("variable_copy waits for a write that never comes end in timeout_error") {
  for (bool with_executor : {false, true}) {
    CAPTURE(with_executor);
    device_executor executor{cpu_device(1), 0us};
    auto copy = make_copy(1, tensor::scalar<std::int64_t>(0, cpu_device(1)),
                          with_executor ? &executor : nullptr);
    const std::string names =
        "variable 'w' copy 1 (/job:localhost/replica:0/task:0/device:CPU:1)";
    CHECK(copy->describe() == names);
    copy->post(2, append_digit(2)); // parked: write 1 never comes (yet)
    auto soon = [] { return clock_type::now() + 50ms; };

    const auto read_error = error_of<timeout_error>([&] { copy->read(1, soon()); });
    CHECK(read_error.find(names) != std::string::npos);
    CHECK(read_error.find("a read") != std::string::npos);
    CHECK(read_error.find("write 1 ") != std::string::npos);

    const auto wait_error = error_of<timeout_error>([&] { copy->wait_applied(2, soon()); });
    CHECK(wait_error.find(names) != std::string::npos);
    CHECK(wait_error.find("write 2 ") != std::string::npos);

    bool local_ran = false;
    const auto local_error = error_of<timeout_error>(
        [&] { copy->apply_local([&](tensor&) { local_ran = true; }, 3, soon()); });
    CHECK(local_error.find(names) != std::string::npos);
    CHECK(local_error.find("a local write") != std::string::npos);
    CHECK(local_error.find("write 3 ") != std::string::npos);
    CHECK_FALSE(local_ran);

    // The copy goes on once the missing write arrives.
    copy->post(1, append_digit(1));
    CHECK(element(copy->read(2, deadline()), 0) == 12);
    CHECK_FALSE(copy->failure().has_value());
  }
}
