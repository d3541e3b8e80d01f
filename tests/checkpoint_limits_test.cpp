// Bounded memory and special files when reading checkpoints: small files
// whose headers claim gigabytes, and files far larger than their headers
// say, are refused before their tensors are allocated (the peak allocation
// is measured with a counting operator new, and, in builds without
// AddressSanitizer or ThreadSanitizer, the refusals hold under an
// address-space limit, where a checkpoint too large for memory is a
// resource_error naming the file); a
// FIFO, device, socket or link to one where a checkpoint is expected is
// refused by its type without blocking (checked in a child process that an
// alarm would kill). No actor system: suite 'unit'.

#include "lockstep/checkpoint.hpp"

#include <doctest/doctest.h>

#include "allocation_counter.hpp"
#include "file_support.hpp"
#include "test_support.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.hpp"
#include "lockstep/error.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/variable.hpp"

// AddressSanitizer and ThreadSanitizer reserve terabytes of address space
// and abort, rather than throw std::bad_alloc, when memory runs out: no
// address-space limit can be tested under them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LOCKSTEP_TEST_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LOCKSTEP_TEST_UNDER_SANITIZER 1
#endif
#endif
#ifndef LOCKSTEP_TEST_UNDER_SANITIZER
#define LOCKSTEP_TEST_UNDER_SANITIZER 0
#endif

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

/// The prefix of this test's temporary directories.
constexpr std::string_view directory_prefix = "lockstep_checkpoint_limits_test";

/// What reading any of the files below may allocate at most: the header,
/// the parsed JSON and the error's text, far below what the files claim.
constexpr std::size_t allocation_bound = 1 << 20;

constexpr std::uint64_t gib = std::uint64_t{1} << 30;

/// A safetensors file of one F32 tensor "x" of `elements` elements whose
/// header is valid, followed by `buffer` (the tensor's bytes, or fewer).
std::string claiming_file(std::uint64_t elements, const std::string& buffer) {
  const std::string header = R"({"x":{"dtype":"F32","shape":[)" + std::to_string(elements)
                             + R"(],"data_offsets":[0,)" + std::to_string(4 * elements) + "]}}";
  return little_endian_u64(header.size()) + header + buffer;
}

/// Makes the file at `path` `size` bytes long (sparse: no disk is used).
void extend_to(const fs::path& path, std::uint64_t size) {
  fs::resize_file(path, size);
  REQUIRE(fs::file_size(path) == size);
}

/// The readers of a checkpoint that must each refuse a file.
std::vector<std::pair<std::string, std::function<void(const fs::path&)>>> readers() {
  return {
    {"restore",
     [](const fs::path& path) {
       variable x{tensor::zeros(dtype::f32, {1}), {.name = "x"}};
       restore(path, {x});
     }},
    {"read_checkpoint_info", [](const fs::path& path) { read_checkpoint_info(path); }},
    {"read_safetensors", [](const fs::path& path) { detail::read_safetensors(path); }},
  };
}

/// A file of `dir` that claims far more than it holds, with what its
/// refusal must say.
struct hostile_file {
  std::string what;
  fs::path path;
  std::string message;
};

/// Small files claiming gigabytes, and a file far larger than its header.
std::vector<hostile_file> hostile_files(const fs::path& dir) {
  std::vector<hostile_file> files;
  const auto add = [&](std::string what, const std::string& bytes, std::string message) {
    const auto path = dir / (std::to_string(files.size()) + ".safetensors");
    write_file(path, bytes);
    files.push_back({std::move(what), path, std::move(message)});
  };
  add("a header length of 1 TiB", little_endian_u64(std::uint64_t{1} << 40) + "{}",
      ": the header length 1099511627776 exceeds the limit of 100000000 bytes");
  add("a header length of 99 MB in a file of 10 bytes", little_endian_u64(99'999'999) + "{}",
      ": the header length 99999999 exceeds the 2 bytes after it (truncated)");
  add("a tensor of 4 GiB in a file of 80 bytes", claiming_file(gib, "0123456789abcdef"),
      ": tensor \"x\": its data ends at byte 4294967296 of the data buffer, which has only 16 "
      "bytes (truncated)");
  // A valid file of one element, then 4 GiB more: refused without reading.
  add("4 GiB after a valid file", claiming_file(1, "abcd"), "");
  extend_to(files.back().path, fs::file_size(files.back().path) + 4 * gib);
  files.back().message = ": the data buffer has 4294967296 bytes after the last tensor's data";
  return files;
}

/// The message of the data_loss_error `read` throws for `path`.
std::string refusal_of(const std::function<void(const fs::path&)>& read, const fs::path& path) {
  return error_of<data_loss_error>([&] { read(path); });
}

/// The process's address space now, in bytes (from /proc/self/statm).
std::uint64_t address_space_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t pages = 0;
  statm >> pages;
  REQUIRE(pages > 0);
  return pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

/// Runs `checks` in a forked child and returns its exit status: `checks`
/// returns 0 when every check held, else the number of the first that did
/// not; 100 when it threw. An alarm kills a child that blocks for 20 s.
template <class F>
int run_in_child(F&& checks) {
  const pid_t child = ::fork();
  REQUIRE(child != -1);
  if (child == 0) {
    ::alarm(20);
    int result = 100;
    try {
      result = checks();
    } catch (...) {
    }
    ::_exit(result);
  }
  return wait_for_child(child);
}

/// True if `f` throws an E whose message holds every one of `parts`.
template <class E, class F>
bool throws_naming(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const E& e) {
    const std::string message = e.what();
    for (const auto& part : parts)
      if (message.find(part) == std::string::npos)
        return false;
    return true;
  } catch (...) {
    return false;
  }
  return false;
}

} // namespace

TEST_CASE("files that claim gigabytes are refused before anything large is allocated") {
  temporary_directory dir{directory_prefix};
  const auto files = hostile_files(dir.path());
  for (const auto& [what, path, message] : files) {
    for (const auto& [reader, read] : readers()) {
      CAPTURE(what);
      CAPTURE(reader);
      const auto baseline = allocation_counter::current.load();
      allocation_counter::reset_peak();
      const auto refusal = refusal_of(read, path);
      const auto peak = allocation_counter::peak_since(baseline);
      CHECK(refusal == path.string() + message);
      if (allocation_counter::active())
        CHECK(peak < allocation_bound);
    }
  }
  if (!allocation_counter::active())
    MESSAGE("the counting operator new is not in use in this build (a sanitizer's replaces "
            "it): the peak allocations were not checked");
}

TEST_CASE("80 MB headers nested deep or holding millions of keys are refused with no more "
          "memory than their bytes") {
  temporary_directory dir{directory_prefix};
  constexpr std::size_t header_bytes = 80'000'000;
  // Brackets (about 3 GB as a parsed tree), and `"n":"",` pairs of
  // metadata (about 1.7 GB).
  const auto nested = dir.path() / "nested.safetensors";
  std::string header(header_bytes / 2, '[');
  header.append(header_bytes / 2, ']');
  write_file(nested, little_endian_u64(header_bytes) + header);
  const auto flat = dir.path() / "flat.safetensors";
  header = R"({"__metadata__":{)";
  for (std::size_t i = 0; header.size() < header_bytes - 32; ++i)
    header += "\"" + std::to_string(i) + "\":\"\",";
  header += R"("end":""}})";
  header.append(header_bytes - header.size(), ' ');
  write_file(flat, little_endian_u64(header_bytes) + header);
  header = {};
  const std::vector<std::pair<fs::path, std::string>> files{
    {nested, ": the header's JSON nests deeper than the 3 levels of the format (the header "
             "object, a tensor's entry, its \"shape\" or \"data_offsets\" array): level 4 "
             "opens at byte 3"},
    {flat, ": the header's JSON holds more than 1048576 keys and values (some 70,000 tensors), "
           "the most lockstep parses: the limit is passed at byte "}};
  for (const auto& [path, message] : files) {
    for (const auto& [reader, read] : readers()) {
      CAPTURE(path.filename().string());
      CAPTURE(reader);
      const auto baseline = allocation_counter::current.load();
      allocation_counter::reset_peak();
      const auto refusal = refusal_of(read, path);
      const auto peak = allocation_counter::peak_since(baseline);
      CHECK(refusal.starts_with(path.string() + message));
      // The header's own bytes, read to check their checksum and structure.
      if (allocation_counter::active())
        CHECK(peak < header_bytes + 8 + allocation_bound);
    }
  }
}

TEST_CASE("a valid file is read with no more memory than its tensors and a constant") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "ckpt-1.safetensors";
  constexpr std::int64_t elements = 1 << 20; // 4 MiB of f32
  variable big{tensor::zeros(dtype::f32, {elements}), {.name = "x"}};
  save(path, {big}, 1);
  const auto tensor_bytes = static_cast<std::size_t>(4 * elements);

  variable target{tensor::zeros(dtype::f32, {elements}), {.name = "x"}};
  auto baseline = allocation_counter::current.load();
  allocation_counter::reset_peak();
  restore(path, {target});
  const auto restore_peak = allocation_counter::peak_since(baseline);
  baseline = allocation_counter::current.load();
  allocation_counter::reset_peak();
  CHECK(read_checkpoint_info(path).step == 1);
  const auto info_peak = allocation_counter::peak_since(baseline);
  if (!allocation_counter::active()) {
    MESSAGE("the counting operator new is not in use in this build: peaks not checked");
    return;
  }
  // restore holds the file's tensor once (read straight into it), not a
  // copy of the whole file besides; read_checkpoint_info streams.
  CHECK(restore_peak >= tensor_bytes);
  CHECK(restore_peak < tensor_bytes + allocation_bound);
  CHECK(info_peak < allocation_bound + (1 << 20));
}

TEST_CASE("under an address-space limit, refusals hold and a too-large file is a resource_error") {
  if (LOCKSTEP_TEST_UNDER_SANITIZER) {
    MESSAGE("skipped under AddressSanitizer or ThreadSanitizer: they reserve terabytes of "
            "address space and abort instead of throwing when memory runs out");
    return;
  }
  temporary_directory dir{directory_prefix};
  const auto files = hostile_files(dir.path());
  // A valid header for 2 GiB of data, and the 2 GiB (sparse): all that is
  // missing is the memory.
  const auto too_large = dir.path() / "too_large.safetensors";
  constexpr std::uint64_t elements = std::uint64_t{1} << 29;
  write_file(too_large, claiming_file(elements, ""));
  extend_to(too_large, fs::file_size(too_large) + 4 * elements);

  const auto status = run_in_child([&] {
    rlimit limit{};
    limit.rlim_cur = limit.rlim_max = address_space_bytes() + (64 << 20);
    if (::setrlimit(RLIMIT_AS, &limit) != 0)
      return 1;
    int check = 2;
    for (const auto& [what, path, message] : files) {
      for (const auto& [reader, read] : readers()) {
        if (!throws_naming<data_loss_error>([&] { read(path); }, {path.string() + message}))
          return check;
        ++check;
      }
    }
    for (const auto& [reader, read] : readers()) {
      if (reader == "read_checkpoint_info")
        continue; // it streams: no tensor memory to run out of
      if (!throws_naming<resource_error>([&] { read(too_large); },
                                         {too_large.string(), "memory ran out allocating "
                                                              "2147483648 bytes for tensor \"x\""}))
        return check;
      ++check;
    }
    return 0;
  });
  REQUIRE(WIFEXITED(status));
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, "check ", WEXITSTATUS(status),
                " failed in the limited child (1: setrlimit; 2 on: the files in order, then "
                "the resource_error)");
}

TEST_CASE("a FIFO, a device or a socket where a checkpoint is expected is refused at once") {
  temporary_directory dir{directory_prefix};
  variable w{tensor::scalar<float>(3), {.name = "w"}};
  const auto readable = dir.path() / "ckpt-3.safetensors";
  save(readable, {w}, 3);
  const auto fifo = dir.path() / "ckpt-9.safetensors";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const auto fifo_link = dir.path() / "fifo_link.safetensors";
  fs::create_symlink(fifo, fifo_link);
  const auto device_link = dir.path() / "device.safetensors";
  fs::create_symlink("/dev/zero", device_link);
  const auto socket_path = dir.path() / "socket.safetensors";
  const int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(listener != -1);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(socket_path.string().size() < sizeof address.sun_path);
  std::strcpy(address.sun_path, socket_path.c_str());
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);

  // In a child, which the alarm kills should anything block.
  const auto status = run_in_child([&] {
    int check = 1;
    const std::vector<std::pair<fs::path, std::string>> special{
      {fifo, "a FIFO (named pipe)"},
      {fifo_link, "a FIFO (named pipe)"},
      {device_link, "a character device"},
      {socket_path, "a socket"},
    };
    for (const auto& [path, kind] : special) {
      const auto says = "\"" + path.string() + "\" is " + kind + ", not a regular file";
      variable target{tensor::scalar<float>(0), {.name = "w"}};
      if (!throws_naming<io_error>([&] { restore(path, {target}); }, {says}))
        return check;
      ++check;
      if (!throws_naming<io_error>([&] { read_checkpoint_info(path); }, {says}))
        return check;
      ++check;
    }
    // The newest checkpoint is the FIFO: the manager names it and the
    // newest readable one.
    checkpoint_manager manager{dir.path(), 5};
    variable target{tensor::scalar<float>(0), {.name = "w"}};
    if (!throws_naming<data_loss_error>(
          [&] { manager.restore_latest({target}); },
          {"the newest checkpoint \"" + fifo.string() + "\" is unreadable",
           "is a FIFO (named pipe)",
           "the newest readable checkpoint is \"" + readable.string() + "\""}))
      return check;
    ++check;
    if (manager.newest_readable() != readable)
      return check;
    return 0;
  });
  ::close(listener);
  REQUIRE_MESSAGE(!WIFSIGNALED(status), "the child was killed by signal ", WTERMSIG(status),
                  " (SIGALRM: reading a special file blocked)");
  REQUIRE(WIFEXITED(status));
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, "check ", WEXITSTATUS(status),
                " failed in the child");
}
