#pragma once

// Helpers for the tests of files on disk (the safetensors codec, the atomic
// file writer and checkpoints): temporary directories, whole-file reads and
// writes, bytes built by hand, values that a codec must keep bit for bit, and
// a child process killed mid-write through the write seam.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "io/atomic_file.hpp"
#include "lockstep/tensor.hpp"

// -- temporary files ----------------------------------------------------------

/// A fresh directory under the system's temporary directory, named
/// `<prefix>.<pid>.<counter>`, removed with everything in it when the
/// object is destroyed.
class temporary_directory {
public:
  explicit temporary_directory(std::string_view prefix) {
    static int count = 0;
    path_ = std::filesystem::temp_directory_path()
            / (std::string(prefix) + "." + std::to_string(::getpid()) + "."
               + std::to_string(count++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directory(path_);
  }

  ~temporary_directory() {
    std::error_code ignored; // a destructor must not throw
    std::filesystem::remove_all(path_, ignored);
  }

  temporary_directory(const temporary_directory&) = delete;
  temporary_directory& operator=(const temporary_directory&) = delete;

  const std::filesystem::path& path() const { return path_; }

private:
  std::filesystem::path path_;
};

/// The whole contents of the file at `path`; fails the test if it cannot be
/// opened.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Replaces the file at `path` with `bytes`; fails the test if the write
/// fails.
inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  REQUIRE(out);
}

/// The entries of `directory` that are write_file_atomically's temporaries.
inline std::vector<std::filesystem::path> temporaries_in(const std::filesystem::path& directory) {
  std::vector<std::filesystem::path> found;
  for (const auto& entry : std::filesystem::directory_iterator(directory))
    if (lockstep::detail::is_atomic_write_temporary(entry.path()))
      found.push_back(entry.path());
  return found;
}

// -- bytes and values ---------------------------------------------------------

/// True if `part` occurs in `text`.
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// `value` as 8 little-endian bytes, written byte by byte so the test does
/// not share the library's assumption about the host.
inline std::string little_endian_u64(std::uint64_t value) {
  std::string out;
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  return out;
}

/// A tensor's buffer as bytes, to compare floats bit for bit (NaN included).
inline std::string raw_bytes(const lockstep::tensor& t) {
  return {static_cast<const char*>(t.raw_data()), t.byte_size()};
}

/// Values that a lossy or endian-confused codec would get wrong: for floats
/// signed zeros, infinities, NaNs (one with a payload), a denormal and the
/// extremes; for integers both signs and the extremes. Tests index into the
/// list and cycle through it, so its order is part of what they check.
template <class T>
std::vector<T> special_values() {
  using limits = std::numeric_limits<T>;
  if constexpr (std::is_floating_point_v<T>) {
    using bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    const auto nan_with_payload = std::bit_cast<T>(std::bit_cast<bits>(limits::quiet_NaN()) | 1);
    return {T(0),           T(-0.0),          T(1.5),           T(-1) / T(3),
            -limits::infinity(), limits::infinity(), limits::quiet_NaN(),
            -limits::quiet_NaN(), nan_with_payload, limits::denorm_min(),
            limits::max(),  limits::lowest(), limits::epsilon()};
  } else {
    return {T(0), T(1), T(-1), T(0x01020304), limits::min(), limits::max(), T(-123456)};
  }
}

// -- crash safety -------------------------------------------------------------

/// Removes the write seam when a test ends, however it ends.
struct hook_guard {
  ~hook_guard() { lockstep::detail::set_atomic_write_hook(nullptr); }
};

/// How a child process of run_in_child_killed_at ended.
struct child_outcome {
  pid_t pid;
  int status; // as waitpid reports it
};

/// Waits for the child process `child` and returns its status as waitpid
/// reports it. Fails the test if waitpid fails or the child has not ended
/// within 30 s (it is killed and reaped first).
inline int wait_for_child(pid_t child) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::seconds(30);
  int status = 0;
  for (;;) {
    pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child)
      return status;
    if (done == -1 && errno != EINTR) {
      std::string reason = std::strerror(errno);
      FAIL("waitpid failed: " << reason);
    }
    if (clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      FAIL("the child process did not end within 30 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

/// Runs `action` in a forked child whose write seam raises SIGKILL when
/// write_file_atomically reaches `stage`, and waits for the child
/// (`wait_for_child`). The child never returns into doctest: it dies by the
/// seam, or exits with 2 if `action` throws and with 3 if it returns (the
/// seam never fired).
template <class F>
child_outcome run_in_child_killed_at(lockstep::detail::atomic_write_stage stage, F&& action) {
  pid_t child = ::fork();
  REQUIRE(child != -1);
  if (child == 0) {
    lockstep::detail::set_atomic_write_hook([stage](lockstep::detail::atomic_write_stage reached) {
      if (reached == stage)
        ::kill(::getpid(), SIGKILL);
    });
    try {
      action();
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(3);
  }
  return {child, wait_for_child(child)};
}
