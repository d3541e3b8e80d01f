// The main of a fuzz target built without libFuzzer (the normal gcc build):
// it runs LLVMFuzzerTestOneInput on the target's seeds, on every file of the
// corpus folders named, and then on a deterministic series of mutations of
// them, so the harness and the code under it run in every test run.
//
//   fuzz_<target>_replay [--mutations N] [--max-len BYTES] CORPUS_DIR...
//   fuzz_<target>_replay --write-seeds DIR
//
// --write-seeds writes lockstep_fuzz_seeds() as files (seed-0, seed-1, ...)
// into DIR: how tests/fuzz/corpus/<target>/ was made. An input that breaks
// a guarantee aborts (as under libFuzzer); before each input the replay
// writes it to fuzz-replay-last-input in the working folder only when
// LOCKSTEP_FUZZ_KEEP_INPUT is set, so a failure can be replayed under
// libFuzzer or a debugger.
//
// This binary's operator new refuses any single allocation above 64 MiB
// (aborting with the size), as libFuzzer's -malloc_limit_mb=64 does: a
// length field that makes the code under test allocate more than the frame
// limit (32 MiB) allows fails the test.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
std::vector<std::vector<std::uint8_t>> lockstep_fuzz_seeds();

// -- the allocation limit --------------------------------------------------------

namespace {

constexpr std::size_t allocation_limit = std::size_t{64} << 20;

void* limited_allocation(std::size_t size) {
  if (size > allocation_limit) {
    std::fprintf(stderr, "fuzz: guarantee broken: one allocation of %zu bytes (the limit is %zu)\n",
                 size, allocation_limit);
    std::abort();
  }
  if (void* p = std::malloc(size == 0 ? 1 : size))
    return p;
  throw std::bad_alloc();
}

} // namespace

// The malloc'ed block goes back through std::free (GCC cannot see that the
// pointer came from this operator new's malloc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t size) { return limited_allocation(size); }
void* operator new[](std::size_t size) { return limited_allocation(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// -- the replay ---------------------------------------------------------------------

namespace {

using input = std::vector<std::uint8_t>;

/// xorshift64*: the same mutations on every machine and run.
class generator {
public:
  std::uint64_t next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545F4914F6CDD1DULL;
  }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }

private:
  std::uint64_t state_ = 0x9E3779B97F4A7C15ULL;
};

/// One to four edits of the kinds that break framing: a byte changed, set
/// to an extreme, bytes inserted, erased or cut off, a run duplicated, a
/// little-endian length written, or a splice with another input.
input mutate(const std::vector<input>& pool, generator& random, std::size_t max_len) {
  input x = pool[random.below(pool.size())];
  const auto edits = 1 + random.below(4);
  for (std::size_t e = 0; e < edits; ++e) {
    switch (random.below(8)) {
      case 0:
        if (!x.empty())
          x[random.below(x.size())] ^= static_cast<std::uint8_t>(1u << random.below(8));
        break;
      case 1: {
        static constexpr std::uint8_t extremes[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
        if (!x.empty())
          x[random.below(x.size())] = extremes[random.below(std::size(extremes))];
        break;
      }
      case 2:
        x.insert(x.begin() + static_cast<std::ptrdiff_t>(random.below(x.size() + 1)),
                 1 + random.below(8), static_cast<std::uint8_t>(random.next()));
        break;
      case 3:
        if (!x.empty()) {
          const auto at = random.below(x.size());
          const auto n = 1 + random.below(std::min<std::size_t>(16, x.size() - at));
          x.erase(x.begin() + static_cast<std::ptrdiff_t>(at),
                  x.begin() + static_cast<std::ptrdiff_t>(at + n));
        }
        break;
      case 4:
        x.resize(random.below(x.size() + 1));
        break;
      case 5:
        if (!x.empty()) {
          const auto at = random.below(x.size());
          const auto n = 1 + random.below(std::min<std::size_t>(32, x.size() - at));
          const input run(x.begin() + static_cast<std::ptrdiff_t>(at),
                          x.begin() + static_cast<std::ptrdiff_t>(at + n));
          x.insert(x.begin() + static_cast<std::ptrdiff_t>(random.below(x.size() + 1)),
                   run.begin(), run.end());
        }
        break;
      case 6:
        // A length or varbyte size: a small, a large or a huge one.
        if (x.size() >= 8) {
          static constexpr std::uint64_t lengths[] = {0, 1, 0x7f, 0xffff, std::uint64_t{1} << 32,
                                                      std::uint64_t{1} << 40, ~std::uint64_t{0}};
          const auto value = lengths[random.below(std::size(lengths))];
          const auto at = random.below(x.size() - 7);
          const auto width = std::size_t{1} << random.below(4); // 1, 2, 4 or 8 bytes
          for (std::size_t i = 0; i < width && at + i < x.size(); ++i)
            x[at + i] = static_cast<std::uint8_t>(value >> (8 * i));
        }
        break;
      case 7: {
        const auto& other = pool[random.below(pool.size())];
        const auto at = random.below(x.size() + 1);
        const auto from = random.below(other.size() + 1);
        x.resize(at);
        x.insert(x.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        break;
      }
    }
  }
  if (x.size() > max_len)
    x.resize(max_len);
  return x;
}

input read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

void run(const input& x) {
  if (std::getenv("LOCKSTEP_FUZZ_KEEP_INPUT") != nullptr) {
    std::ofstream keep("fuzz-replay-last-input", std::ios::binary | std::ios::trunc);
    keep.write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size()));
  }
  LLVMFuzzerTestOneInput(x.data(), x.size());
}

int usage() {
  std::fprintf(stderr, "usage: fuzz_<target>_replay [--mutations N] [--max-len BYTES] "
                       "CORPUS_DIR...\n       fuzz_<target>_replay --write-seeds DIR\n");
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  std::size_t mutations = 2000;
  std::size_t max_len = 65536;
  std::vector<std::filesystem::path> folders;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--write-seeds" && i + 1 < argc) {
      const std::filesystem::path dir = argv[++i];
      std::filesystem::create_directories(dir);
      const auto seeds = lockstep_fuzz_seeds();
      for (std::size_t s = 0; s < seeds.size(); ++s) {
        std::ofstream file(dir / ("seed-" + std::to_string(s)), std::ios::binary | std::ios::trunc);
        file.write(reinterpret_cast<const char*>(seeds[s].data()),
                   static_cast<std::streamsize>(seeds[s].size()));
      }
      std::printf("wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
      return 0;
    }
    if (arg == "--mutations" && i + 1 < argc)
      mutations = std::stoul(argv[++i]);
    else if (arg == "--max-len" && i + 1 < argc)
      max_len = std::stoul(argv[++i]);
    else if (arg.starts_with("--"))
      return usage();
    else
      folders.emplace_back(arg);
  }

  std::vector<input> pool = lockstep_fuzz_seeds();
  for (const auto& folder : folders) {
    if (!std::filesystem::is_directory(folder)) {
      std::fprintf(stderr, "fuzz replay: no corpus folder %s\n", folder.c_str());
      return 1;
    }
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(folder))
      if (entry.is_regular_file())
        files.push_back(entry.path());
    std::sort(files.begin(), files.end()); // the same order everywhere
    for (const auto& path : files)
      pool.push_back(read_file(path));
  }
  pool.emplace_back(); // the empty input
  const auto corpus = pool.size();
  for (const auto& x : pool)
    run(x);
  generator random;
  for (std::size_t i = 0; i < mutations; ++i)
    run(mutate(pool, random, max_len));
  std::printf("fuzz replay: %zu corpus inputs and %zu mutations ran, no guarantee broken\n",
              corpus, mutations);
  return 0;
}
