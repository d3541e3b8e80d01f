// The host pool: size classes, where blocks come from, reuse, and buffers
// freed by other threads. No actor system: runs under ThreadSanitizer.

#include "devices/host/host_pool.hpp"

#include "lockstep/tensor.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <utility>
#include <vector>

using lockstep::detail::host_pool;

namespace {

bool aligned(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

} // namespace

TEST_CASE("size classes: every page up to 64 KiB, then four steps a doubling up to 256 KiB") {
  CHECK(host_pool::class_size(1) == 1);       // below the pool: as asked
  CHECK(host_pool::class_size(4095) == 4095);
  CHECK(host_pool::class_size(4096) == 4096);
  CHECK(host_pool::class_size(4097) == 8192);
  CHECK(host_pool::class_size(65536) == 65536);
  CHECK(host_pool::class_size(65537) == 80 * 1024);
  CHECK(host_pool::class_size(80 * 1024) == 80 * 1024);
  CHECK(host_pool::class_size(112 * 1024 + 1) == 128 * 1024);
  CHECK(host_pool::class_size(128 * 1024 + 1) == 160 * 1024);
  CHECK(host_pool::class_size(224 * 1024 + 1) == 256 * 1024);
  CHECK(host_pool::class_size(256 * 1024) == 256 * 1024);
  CHECK(host_pool::class_size(256 * 1024 + 1) == 256 * 1024 + 1); // above: as asked
  // Every class holds what was asked, wastes less than a quarter beyond
  // 4 KiB, and is a whole number of pages.
  for (std::size_t bytes = host_pool::pooled_min; bytes <= host_pool::pooled_max; bytes += 1000) {
    const auto size = host_pool::class_size(bytes);
    CHECK(size >= bytes);
    CHECK(size % 4096 == 0);
    CHECK(size - bytes < std::max<std::size_t>(4096, bytes / 4));
  }
}

TEST_CASE("pooled blocks lie back to back in a slab, page-aligned, and do not overlap") {
  host_pool pool;
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i)
    blocks.push_back(pool.allocate(4096));
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    CHECK(aligned(blocks[i], 4096));
    std::memset(blocks[i], static_cast<int>(i), 4096);
  }
  for (std::size_t i = 1; i < blocks.size(); ++i)
    CHECK(static_cast<std::byte*>(blocks[i]) - static_cast<std::byte*>(blocks[i - 1]) == 4096);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    CHECK(static_cast<unsigned char*>(blocks[i])[4095] == i);
  for (auto* b : blocks)
    pool.free(b, 4096);
}

TEST_CASE("freed blocks come back lowest address first, whatever order they were freed in") {
  host_pool pool;
  std::vector<void*> blocks;
  for (int i = 0; i < 6; ++i)
    blocks.push_back(pool.allocate(4096));
  for (const int i : {3, 0, 5, 1, 4, 2})
    pool.free(blocks[static_cast<std::size_t>(i)], 4096);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    CHECK(pool.allocate(4096) == blocks[i]);
  for (auto* b : blocks)
    pool.free(b, 4096);
}

TEST_CASE("a freed block is the next one of its class, and only of its class") {
  host_pool pool;
  auto* a = pool.allocate(5000); // the 8 KiB class
  auto* b = pool.allocate(5000);
  CHECK(pool.free_blocks(8192) == 0);
  pool.free(a, 5000);
  CHECK(pool.free_blocks(8192) == 1);
  CHECK(pool.free_blocks(4096) == 0);
  auto* other = pool.allocate(4096); // another class: not a
  CHECK(other != a);
  CHECK(pool.allocate(8000) == a); // same class
  CHECK(pool.free_blocks(8192) == 0);
  pool.free(a, 8000);
  pool.free(b, 5000);
  pool.free(other, 4096);
  CHECK(pool.free_blocks(8192) == 2);
}

TEST_CASE("a class fills slab after slab; sizes outside the pool come from the heap") {
  host_pool pool;
  const std::size_t bytes = 256 * 1024;
  const auto per_slab = host_pool::slab_bytes / bytes;
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < 3 * per_slab + 1; ++i) {
    blocks.push_back(pool.allocate(bytes));
    static_cast<std::byte*>(blocks.back())[bytes - 1] = std::byte{1};
  }
  std::sort(blocks.begin(), blocks.end());
  CHECK(std::adjacent_find(blocks.begin(), blocks.end()) == blocks.end());
  for (auto* p : blocks)
    pool.free(p, bytes);
  CHECK(pool.free_blocks(bytes) == blocks.size());

  for (const std::size_t outside : {std::size_t{1}, std::size_t{100}, std::size_t{1} << 20}) {
    auto* p = pool.allocate(outside);
    CHECK(aligned(p, host_pool::alignment));
    std::memset(p, 7, outside);
    pool.free(p, outside);
    CHECK(pool.free_blocks(outside) == 0);
  }
}

TEST_CASE("buffers allocated on some threads and freed on others") {
  host_pool pool;
  constexpr int threads = 4;
  constexpr int rounds = 200;
  std::vector<std::vector<std::pair<void*, std::size_t>>> made(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        const auto bytes = std::size_t{4096} * static_cast<std::size_t>(1 + (i + t) % 20);
        auto* p = pool.allocate(bytes);
        std::memset(p, t, bytes);
        made[static_cast<std::size_t>(t)].emplace_back(p, bytes);
      }
    });
  for (auto& w : workers)
    w.join();
  workers.clear();
  // Each thread checks and frees the next thread's buffers.
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      const auto owner = (t + 1) % threads;
      for (auto [p, bytes] : made[static_cast<std::size_t>(owner)]) {
        const auto* bytes_of = static_cast<const unsigned char*>(p);
        CHECK((bytes_of[0] == owner && bytes_of[bytes - 1] == owner));
        pool.free(p, bytes);
      }
    });
  for (auto& w : workers)
    w.join();
  std::set<std::size_t> classes;
  for (std::size_t k = 1; k <= 20; ++k)
    classes.insert(host_pool::class_size(4096 * k));
  std::size_t free_total = 0;
  for (auto size : classes)
    free_total += pool.free_blocks(size);
  CHECK(free_total == threads * rounds);
}

TEST_CASE("host tensors take their buffers from the process's pool") {
  auto& pool = host_pool::instance();
  const auto before = pool.free_blocks(4096);
  const void* data = nullptr;
  {
    auto t = lockstep::tensor::zeros(lockstep::dtype::f32, {1024});
    data = t.raw_data();
    CHECK(aligned(data, 4096));
  }
  CHECK(pool.free_blocks(4096) == before + 1);
  auto again = lockstep::tensor::zeros(lockstep::dtype::i32, {1024}); // the same 4 KiB class
  CHECK(again.raw_data() == data);
  CHECK(pool.free_blocks(4096) == before);
}
