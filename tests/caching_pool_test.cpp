// caching_pool (src/devices/caching_pool.hpp) over a fake device memory:
// malloc-backed, counting its allocations and frees, and out of memory
// (a null block) past a byte budget. Size classes, reuse last freed first,
// the statistics, foreign pointers, out of memory (the cache given back,
// then device_error), release_cached, and four threads at once.
// No device, no actor system: suite 'unit' (also under ThreadSanitizer).

#include "devices/caching_pool.hpp"

#include "lockstep/error.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

using lockstep::device_error;
using lockstep::detail::caching_pool;
using lockstep::detail::pool_statistics;
using lockstep::detail::raw_memory;

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

/// Device memory from malloc, with a budget: a block that would take the
/// bytes held past it is refused (null), as cudaMalloc's out of memory.
class fake_memory {
public:
  explicit fake_memory(std::size_t budget = std::numeric_limits<std::size_t>::max())
    : budget_(budget) {}

  ~fake_memory() {
    for (auto& [block, bytes] : live_)
      std::free(block);
  }

  fake_memory(const fake_memory&) = delete;
  fake_memory& operator=(const fake_memory&) = delete;

  raw_memory raw() {
    return {[](void* context, std::size_t bytes) {
              return static_cast<fake_memory*>(context)->allocate(bytes);
            },
            [](void* context, void* memory) noexcept {
              static_cast<fake_memory*>(context)->release(memory);
            },
            this};
  }

  /// Makes the next allocation throw (a failure other than out of memory).
  void fail_next() {
    std::lock_guard guard{mutex_};
    fail_next_ = true;
  }

  void set_budget(std::size_t budget) {
    std::lock_guard guard{mutex_};
    budget_ = budget;
  }

  std::size_t allocations() const {
    std::lock_guard guard{mutex_};
    return allocations_;
  }
  std::size_t frees() const {
    std::lock_guard guard{mutex_};
    return frees_;
  }
  std::size_t refusals() const {
    std::lock_guard guard{mutex_};
    return refusals_;
  }
  std::size_t bytes_held() const {
    std::lock_guard guard{mutex_};
    return held_;
  }
  std::size_t blocks_held() const {
    std::lock_guard guard{mutex_};
    return live_.size();
  }
  /// Frees of pointers this memory never gave out (or gave back already).
  std::size_t bad_frees() const {
    std::lock_guard guard{mutex_};
    return bad_frees_;
  }

private:
  void* allocate(std::size_t bytes) {
    std::lock_guard guard{mutex_};
    if (fail_next_) {
      fail_next_ = false;
      throw std::runtime_error("fake device failure");
    }
    if (bytes > budget_ || held_ > budget_ - bytes) {
      ++refusals_;
      return nullptr;
    }
    void* block = std::malloc(bytes);
    REQUIRE(block != nullptr);
    live_.emplace(block, bytes);
    held_ += bytes;
    ++allocations_;
    return block;
  }

  void release(void* memory) noexcept {
    std::lock_guard guard{mutex_};
    const auto found = live_.find(memory);
    if (found == live_.end()) {
      ++bad_frees_;
      return;
    }
    held_ -= found->second;
    live_.erase(found);
    std::free(memory);
    ++frees_;
  }

  mutable std::mutex mutex_;
  std::size_t budget_;
  bool fail_next_ = false;
  std::unordered_map<void*, std::size_t> live_;
  std::size_t held_ = 0;
  std::size_t allocations_ = 0;
  std::size_t frees_ = 0;
  std::size_t refusals_ = 0;
  std::size_t bad_frees_ = 0;
};

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void check_same(const pool_statistics& a, const pool_statistics& b) {
  CHECK(a.bytes_in_use == b.bytes_in_use);
  CHECK(a.peak_bytes_in_use == b.peak_bytes_in_use);
  CHECK(a.bytes_cached == b.bytes_cached);
  CHECK(a.allocations == b.allocations);
  CHECK(a.device_allocations == b.device_allocations);
  CHECK(a.device_frees == b.device_frees);
}

} // namespace

// -- size classes -----------------------------------------------------------------

TEST_CASE("size classes: multiples of 512 bytes up to 1 MiB, of 2 MiB above") {
  CHECK(caching_pool::class_size(0) == 512);
  CHECK(caching_pool::class_size(1) == 512);
  CHECK(caching_pool::class_size(511) == 512);
  CHECK(caching_pool::class_size(512) == 512);
  CHECK(caching_pool::class_size(513) == 1024);
  CHECK(caching_pool::class_size(1000) == 1024);
  CHECK(caching_pool::class_size(MiB - 1) == MiB);
  CHECK(caching_pool::class_size(MiB) == MiB);
  CHECK(caching_pool::class_size(MiB + 1) == 2 * MiB);
  CHECK(caching_pool::class_size(2 * MiB) == 2 * MiB);
  CHECK(caching_pool::class_size(2 * MiB + 1) == 4 * MiB);
  CHECK(caching_pool::class_size(3 * MiB + 5) == 4 * MiB);
  CHECK(caching_pool::class_size(64 * MiB) == 64 * MiB);
}

TEST_CASE("a block is at least as large as asked, and the class is what the device gave") {
  fake_memory memory;
  caching_pool pool{memory.raw(), "fake memory of /gpu:0"};
  std::vector<void*> blocks;
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{513}, MiB + 1}) {
    CAPTURE(bytes);
    const auto before = memory.bytes_held();
    void* block = pool.allocate(bytes);
    REQUIRE(block != nullptr);
    blocks.push_back(block);
    CHECK(memory.bytes_held() - before == caching_pool::class_size(bytes));
    // Every byte of the class is the caller's to write.
    std::memset(block, 0xab, caching_pool::class_size(bytes));
  }
  for (void* block : blocks)
    CHECK(pool.free(block));
}

// -- reuse ----------------------------------------------------------------------

TEST_CASE("the same size allocated and freed 100 times takes one device block") {
  fake_memory memory;
  caching_pool pool{memory.raw(), "fake memory of /gpu:0"};
  void* first = pool.allocate(1000);
  CHECK(pool.free(first));
  for (int i = 1; i < 100; ++i) {
    void* again = pool.allocate(1000);
    CHECK(again == first);
    CHECK(pool.free(again));
  }
  const auto s = pool.statistics();
  CHECK(s.allocations == 100);
  CHECK(s.device_allocations == 1);
  CHECK(s.device_frees == 0);
  CHECK(s.bytes_in_use == 0);
  CHECK(s.bytes_cached == 1024);
  CHECK(memory.allocations() == 1);
  CHECK(memory.frees() == 0);
}

TEST_CASE("a freed block serves any size of its class, and no other class") {
  fake_memory memory;
  caching_pool pool{memory.raw(), "fake memory of /gpu:0"};
  void* block = pool.allocate(600); // class 1024
  CHECK(pool.free(block));
  CHECK(pool.allocate(1024) == block);
  CHECK(pool.free(block));
  CHECK(pool.allocate(513) == block);
  CHECK(pool.free(block));
  // Classes 512 and 1536: new blocks; the cached one stays cached.
  void* smaller = pool.allocate(512);
  void* larger = pool.allocate(1025);
  CHECK(smaller != block);
  CHECK(larger != block);
  CHECK(pool.statistics().device_allocations == 3);
  CHECK(pool.statistics().bytes_cached == 1024);
  // Large classes too: 1 MiB + 1 and 2 MiB are one class.
  void* large = pool.allocate(MiB + 1);
  CHECK(pool.free(large));
  CHECK(pool.allocate(2 * MiB) == large);
  CHECK(pool.statistics().device_allocations == 4);
}

TEST_CASE("a class's free blocks are reused last freed first") {
  fake_memory memory;
  caching_pool pool{memory.raw(), "fake memory of /gpu:0"};
  void* a = pool.allocate(100);
  void* b = pool.allocate(100);
  void* c = pool.allocate(100);
  CHECK(a != b);
  CHECK(b != c);
  CHECK(a != c);
  CHECK(pool.free(a));
  CHECK(pool.free(c));
  CHECK(pool.free(b));
  CHECK(pool.allocate(1) == b);
  CHECK(pool.allocate(1) == c);
  CHECK(pool.allocate(1) == a);
  CHECK(pool.statistics().device_allocations == 3);
  void* d = pool.allocate(1); // none cached: a new one
  CHECK(pool.statistics().device_allocations == 4);
  for (void* p : {a, b, c, d})
    CHECK(pool.free(p));
}

// -- statistics -------------------------------------------------------------------

TEST_CASE("statistics count whole classes: in use, peak, reset_peak, cached, allocations") {
  fake_memory memory;
  caching_pool pool{memory.raw(), "fake memory of /gpu:0"};
  check_same(pool.statistics(), pool_statistics{});

  void* small = pool.allocate(100);        // 512
  void* medium = pool.allocate(1000);      // 1024
  void* large = pool.allocate(2 * MiB + 1); // 4 MiB
  auto s = pool.statistics();
  CHECK(s.bytes_in_use == 512 + 1024 + 4 * MiB);
  CHECK(s.peak_bytes_in_use == 512 + 1024 + 4 * MiB);
  CHECK(s.bytes_cached == 0);
  CHECK(s.allocations == 3);
  CHECK(s.device_allocations == 3);

  CHECK(pool.free(large));
  s = pool.statistics();
  CHECK(s.bytes_in_use == 512 + 1024);
  CHECK(s.peak_bytes_in_use == 512 + 1024 + 4 * MiB); // the peak stays
  CHECK(s.bytes_cached == 4 * MiB);

  pool.reset_peak();
  CHECK(pool.statistics().peak_bytes_in_use == 512 + 1024);

  void* again = pool.allocate(3 * MiB + 5); // class 4 MiB: the cached block
  CHECK(again == large);
  s = pool.statistics();
  CHECK(s.bytes_in_use == 512 + 1024 + 4 * MiB);
  CHECK(s.peak_bytes_in_use == 512 + 1024 + 4 * MiB);
  CHECK(s.bytes_cached == 0);
  CHECK(s.allocations == 4);
  CHECK(s.device_allocations == 3);

  for (void* p : {small, medium, again})
    CHECK(pool.free(p));
  s = pool.statistics();
  CHECK(s.bytes_in_use == 0);
  CHECK(s.bytes_cached == 512 + 1024 + 4 * MiB);
  CHECK(s.device_frees == 0);
  pool.reset_peak();
  CHECK(pool.statistics().peak_bytes_in_use == 0);
  // The device holds exactly what the pool counts.
  CHECK(memory.bytes_held() == s.bytes_in_use + s.bytes_cached);
}

// -- ownership ------------------------------------------------------------------

TEST_CASE("a foreign pointer, or a block freed twice, is not freed: false, nothing changes") {
  fake_memory memory;
  caching_pool pool{memory.raw(), "fake memory of /gpu:0"};
  void* block = pool.allocate(4000);
  const auto before = pool.statistics();
  int on_stack = 0;
  std::vector<char> on_heap(4000);
  CHECK_FALSE(pool.free(&on_stack));
  CHECK_FALSE(pool.free(on_heap.data()));
  CHECK_FALSE(pool.free(nullptr));
  CHECK_FALSE(pool.free(static_cast<char*>(block) + 1)); // inside a block is not the block
  check_same(pool.statistics(), before);

  CHECK(pool.free(block));
  const auto after = pool.statistics();
  CHECK_FALSE(pool.free(block)); // twice
  check_same(pool.statistics(), after);
  CHECK(memory.frees() == 0);
  CHECK(memory.bad_frees() == 0);

  // A block of another pool is foreign too.
  caching_pool other{memory.raw(), "fake memory of /gpu:1"};
  void* theirs = other.allocate(10);
  CHECK_FALSE(pool.free(theirs));
  CHECK(other.owns(theirs));
  CHECK(other.free(theirs));
}

TEST_CASE("owns: blocks in use only") {
  fake_memory memory;
  caching_pool pool{memory.raw(), "fake memory of /gpu:0"};
  void* block = pool.allocate(10);
  int on_stack = 0;
  CHECK(pool.owns(block));
  CHECK_FALSE(pool.owns(&on_stack));
  CHECK_FALSE(pool.owns(nullptr));
  CHECK(pool.free(block));
  CHECK_FALSE(pool.owns(block)); // cached, not in use
  CHECK(pool.allocate(10) == block);
  CHECK(pool.owns(block));
  CHECK(pool.free(block));
}

// -- out of memory ---------------------------------------------------------------

TEST_CASE("out of memory: the pool gives its cached blocks back and tries once more") {
  fake_memory memory{4 * MiB};
  caching_pool pool{memory.raw(), "fake memory of /gpu:3"};
  void* a = pool.allocate(MiB);
  void* b = pool.allocate(MiB);
  void* c = pool.allocate(MiB);
  CHECK(pool.free(a));
  CHECK(pool.free(b)); // 2 MiB cached in class 1 MiB, 3 MiB held
  // Class 2 MiB has no block, and 3 + 2 MiB is past the budget: refused,
  // the two cached blocks go back, the second try fits.
  void* d = pool.allocate(2 * MiB);
  REQUIRE(d != nullptr);
  CHECK(memory.refusals() == 1);
  CHECK(memory.frees() == 2);
  auto s = pool.statistics();
  CHECK(s.bytes_cached == 0);
  CHECK(s.device_frees == 2);
  CHECK(s.device_allocations == 4);
  CHECK(s.allocations == 4);
  CHECK(s.bytes_in_use == 3 * MiB);
  CHECK(memory.bytes_held() == 3 * MiB);
  CHECK(pool.owns(c));
  CHECK(pool.owns(d));
  CHECK(pool.free(c));
  CHECK(pool.free(d));
}

TEST_CASE("out of memory after the cache was given back: device_error with the pool's name "
          "and the bytes") {
  fake_memory memory{4 * MiB};
  caching_pool pool{memory.raw(), "fake memory of /gpu:3"};
  void* a = pool.allocate(MiB);
  void* b = pool.allocate(2 * MiB);

  SUBCASE("nothing cached: one refusal") {
    const auto before = pool.statistics();
    const auto message = error_of<device_error>([&] { pool.allocate(3 * MiB + 5); });
    CHECK(has(message, "out of memory"));
    CHECK(has(message, "fake memory of /gpu:3"));
    CHECK(has(message, "3145733 bytes")); // what was asked
    CHECK(has(message, "4194304"));       // the class
    CHECK(memory.refusals() == 1);
    check_same(pool.statistics(), before);
  }
  SUBCASE("a block cached: given back, refused again") {
    CHECK(pool.free(a)); // 1 MiB cached, 3 MiB held
    const auto before = pool.statistics();
    const auto message = error_of<device_error>([&] { pool.allocate(3 * MiB + 5); });
    CHECK(has(message, "fake memory of /gpu:3"));
    CHECK(has(message, "3145733 bytes"));
    CHECK(memory.refusals() == 2);
    const auto s = pool.statistics();
    CHECK(s.bytes_cached == 0);
    CHECK(s.device_frees == before.device_frees + 1);
    CHECK(s.bytes_in_use == before.bytes_in_use);
    CHECK(s.allocations == before.allocations);
    CHECK(s.device_allocations == before.device_allocations);
    CHECK(memory.bytes_held() == 2 * MiB);
    a = pool.allocate(MiB); // room again
  }
  // The pool goes on after a failure: a block that fits.
  CHECK(pool.free(a));
  void* small = pool.allocate(100);
  CHECK(pool.owns(small));
  CHECK(pool.free(small));
  CHECK(pool.free(b));
}

TEST_CASE("a device failure other than out of memory propagates and changes nothing") {
  fake_memory memory;
  caching_pool pool{memory.raw(), "fake memory of /gpu:0"};
  void* kept = pool.allocate(10);
  const auto before = pool.statistics();
  memory.fail_next();
  CHECK_THROWS_AS(pool.allocate(5000), std::runtime_error);
  check_same(pool.statistics(), before);
  void* next = pool.allocate(5000);
  CHECK(pool.owns(next));
  CHECK(pool.free(next));
  CHECK(pool.free(kept));
}

// -- giving memory back ---------------------------------------------------------

TEST_CASE("release_cached gives every cached block back and returns their bytes") {
  fake_memory memory;
  std::vector<void*> kept;
  {
    caching_pool pool{memory.raw(), "fake memory of /gpu:0"};
    CHECK(pool.release_cached() == 0); // nothing cached
    std::vector<void*> blocks;
    for (std::size_t bytes : {std::size_t{1}, std::size_t{1}, std::size_t{513}, MiB, MiB + 1,
                              3 * MiB + 5})
      blocks.push_back(pool.allocate(bytes));
    kept.push_back(pool.allocate(700)); // in use: stays
    for (void* block : blocks)
      CHECK(pool.free(block));
    const std::size_t cached = 512 + 512 + 1024 + MiB + 2 * MiB + 4 * MiB;
    CHECK(pool.statistics().bytes_cached == cached);
    CHECK(pool.release_cached() == cached);
    CHECK(memory.frees() == blocks.size());
    CHECK(memory.bytes_held() == 1024);
    const auto s = pool.statistics();
    CHECK(s.bytes_cached == 0);
    CHECK(s.device_frees == blocks.size());
    CHECK(s.bytes_in_use == 1024);
    CHECK(pool.owns(kept.front()));
    CHECK(pool.release_cached() == 0);
    // The next buffer of a released class needs the device again.
    void* again = pool.allocate(1);
    CHECK(pool.statistics().device_allocations == blocks.size() + 2);
    CHECK(pool.free(again)); // cached when the pool goes
  }
  // The pool's end gave its cached block back, not the one in use.
  CHECK(memory.frees() == 7);
  CHECK(memory.blocks_held() == 1);
  CHECK(memory.bad_frees() == 0);
}

// -- threads ----------------------------------------------------------------------

TEST_CASE("four threads allocating and freeing mixed sizes: blocks are never shared, the "
          "figures add up") {
  fake_memory memory;
  caching_pool pool{memory.raw(), "fake memory of /gpu:0"};
  constexpr int threads = 4;
  constexpr int rounds = 3000;
  constexpr std::size_t sizes[] = {1, 100, 700, 4096, 70000, MiB + 1};
  std::vector<std::thread> workers;
  std::vector<int> failures(threads, 0);
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      // Each thread holds up to three blocks, stamped with its id and round,
      // and checks the stamp before it frees one.
      struct held {
        void* block;
        std::uint64_t stamp;
      };
      std::vector<held> mine;
      std::uint64_t state = 12345 + static_cast<std::uint64_t>(t);
      for (int round = 0; round < rounds; ++round) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const auto pick = static_cast<std::size_t>(state >> 33);
        if (mine.size() < 3 && (pick % 3 != 0 || mine.empty())) {
          void* block = pool.allocate(sizes[pick % std::size(sizes)]);
          const std::uint64_t stamp = (static_cast<std::uint64_t>(t) << 32)
                                      | static_cast<std::uint64_t>(round);
          std::memcpy(block, &stamp, sizeof stamp);
          mine.push_back({block, stamp});
        } else {
          const auto at = pick % mine.size();
          std::uint64_t seen = 0;
          std::memcpy(&seen, mine[at].block, sizeof seen);
          failures[static_cast<std::size_t>(t)] += seen == mine[at].stamp ? 0 : 1;
          failures[static_cast<std::size_t>(t)] += pool.free(mine[at].block) ? 0 : 1;
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(at));
        }
      }
      for (const auto& h : mine) {
        std::uint64_t seen = 0;
        std::memcpy(&seen, h.block, sizeof seen);
        failures[static_cast<std::size_t>(t)] += seen == h.stamp ? 0 : 1;
        failures[static_cast<std::size_t>(t)] += pool.free(h.block) ? 0 : 1;
      }
    });
  for (auto& w : workers)
    w.join();
  for (int t = 0; t < threads; ++t)
    CHECK(failures[static_cast<std::size_t>(t)] == 0);

  const auto s = pool.statistics();
  CHECK(s.bytes_in_use == 0);
  CHECK(s.allocations > 0);
  CHECK(s.device_allocations <= s.allocations);
  // Every block the device gave out is cached now, none given back.
  CHECK(s.device_allocations == memory.allocations());
  CHECK(s.device_frees == 0);
  CHECK(memory.frees() == 0);
  CHECK(s.bytes_cached == memory.bytes_held());
  // Never more than three blocks per thread, at most 2 MiB each.
  CHECK(s.peak_bytes_in_use <= threads * 3 * 2 * MiB);
  CHECK(s.peak_bytes_in_use >= 2 * MiB);
  const auto held = memory.bytes_held();
  CHECK(pool.release_cached() == held);
  CHECK(memory.bytes_held() == 0);
  CHECK(memory.bad_frees() == 0);
}
