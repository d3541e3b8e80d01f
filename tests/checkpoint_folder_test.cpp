// Checkpoint folders shared by several processes, with real processes
// (fork): a writer paused in the middle of a save (through the write seam)
// keeps its temporary while another process opens the folder, restores from
// it and cleans it; a crashed writer's temporary is removed and its writer
// lock released by the kernel; a second writer, in another process or in
// this one, gets a clear error from the folder's lock, which is taken at the
// first save and not when the folder is opened. No actor system: suite
// 'unit'.

#include "lockstep/checkpoint.hpp"

#include <doctest/doctest.h>

#include "file_support.hpp"
#include "test_support.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/atomic_file.hpp"
#include "lockstep/error.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/variable.hpp"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

/// The prefix of this test's temporary directories.
constexpr std::string_view directory_prefix = "lockstep_checkpoint_folder_test";

constexpr int wait_ms = 30'000;

/// A pipe; both ends closed on destruction.
class pipe_pair {
public:
  pipe_pair() { REQUIRE(::pipe2(fds_, O_CLOEXEC) == 0); }
  ~pipe_pair() {
    for (int fd : fds_)
      if (fd != -1)
        ::close(fd);
  }
  pipe_pair(const pipe_pair&) = delete;
  pipe_pair& operator=(const pipe_pair&) = delete;

  int read_end() const { return fds_[0]; }
  int write_end() const { return fds_[1]; }

private:
  int fds_[2] = {-1, -1};
};

/// Writes one byte to `fd`; false if it could not.
bool send_byte(int fd) {
  const char byte = 1;
  return ::write(fd, &byte, 1) == 1;
}

/// Waits up to `wait_ms` for a byte on `fd` and reads it; false on time-out.
bool receive_byte(int fd) {
  pollfd ready{.fd = fd, .events = POLLIN, .revents = 0};
  if (::poll(&ready, 1, wait_ms) != 1)
    return false;
  char byte = 0;
  return ::read(fd, &byte, 1) == 1;
}

/// A child process saving through a checkpoint_manager, paused by the write
/// seam at one stage until the parent lets it go on.
class paused_writer {
public:
  /// Forks a child that saves `value` as "w" at `step` into `directory` and
  /// stops at `stage`, telling the parent. The child exits with 0 once the
  /// save is done, 2 if it threw, 3 if the seam never fired, 4 if the
  /// parent never let it go on (after 30 s).
  paused_writer(const fs::path& directory, detail::atomic_write_stage stage, float value,
                std::int64_t step) {
    pid_ = ::fork();
    REQUIRE(pid_ != -1);
    if (pid_ != 0)
      return;
    bool fired = false;
    detail::set_atomic_write_hook([&](detail::atomic_write_stage reached) {
      if (reached != stage)
        return;
      fired = true;
      if (!send_byte(paused_.write_end()) || !receive_byte(resume_.read_end()))
        ::_exit(4);
    });
    try {
      checkpoint_manager writer{directory, 5};
      variable w{tensor::scalar<float>(value), {.name = "w"}};
      writer.save({w}, step);
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(fired ? 0 : 3);
  }

  ~paused_writer() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  paused_writer(const paused_writer&) = delete;
  paused_writer& operator=(const paused_writer&) = delete;

  pid_t pid() const { return pid_; }

  /// Waits until the child is paused at the seam; false after 30 s.
  bool wait_paused() { return receive_byte(paused_.read_end()); }

  /// Lets the child go on and returns its exit status (as waitpid's).
  int resume_and_wait() {
    REQUIRE(send_byte(resume_.write_end()));
    reaped_ = true;
    return wait_for_child(pid_);
  }

private:
  pipe_pair paused_;
  pipe_pair resume_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

/// The value of "w" in the newest checkpoint of `directory`, restored.
float restored_w(const checkpoint_manager& manager) {
  variable w{tensor::scalar<float>(0), {.name = "w"}};
  REQUIRE(manager.restore_latest({w}).has_value());
  return w.value().data<float>()[0];
}

std::string another_writer_message(const fs::path& directory) {
  return "checkpoint_manager: another writer holds the checkpoint folder \"" + directory.string()
         + "\" (its lock file .lockstep-writer.lock is locked): one process at a time may save "
           "checkpoints into a folder; stop the other writer or use another folder";
}

} // namespace

TEST_CASE("a writer paused mid-save keeps its temporary while another process restores") {
  for (auto stage : {detail::atomic_write_stage::partial_write,
                     detail::atomic_write_stage::before_rename}) {
    CAPTURE(static_cast<int>(stage));
    temporary_directory dir{directory_prefix};
    variable w{tensor::scalar<float>(1), {.name = "w"}};
    save(dir.path() / "ckpt-1.safetensors", {w}, 1);

    paused_writer writer{dir.path(), stage, 2, 2};
    REQUIRE(writer.wait_paused());
    const auto in_progress = temporaries_in(dir.path());
    REQUIRE(in_progress.size() == 1);
    CHECK(in_progress[0].filename().string().starts_with(
      "ckpt-2.safetensors.tmp." + std::to_string(writer.pid()) + "."));

    // This process opens the folder (which cleans it), restores from it and
    // cleans it again: the live writer's temporary stays.
    checkpoint_manager reader{dir.path(), 5};
    CHECK(restored_w(reader) == 1);
    CHECK(detail::remove_abandoned_temporaries(dir.path()) == 0);
    CHECK(temporaries_in(dir.path()) == in_progress);
    // As a second writer, it is refused by the folder's lock.
    variable mine{tensor::scalar<float>(9), {.name = "w"}};
    hook_guard guard;
    CHECK(error_of<io_error>([&] { reader.save({mine}, 9); })
          == another_writer_message(dir.path()));
    CHECK_FALSE(fs::exists(dir.path() / "ckpt-9.safetensors"));

    // The paused save completes.
    const auto status = writer.resume_and_wait();
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(temporaries_in(dir.path()).empty());
    CHECK(restored_w(reader) == 2);
    CHECK(read_checkpoint_info(dir.path() / "ckpt-2.safetensors").step == 2);

    // Its lock went with it: this process may write now.
    REQUIRE(reader.save({mine}, 9).has_value());
    CHECK(restored_w(reader) == 9);
  }
}

TEST_CASE("a crashed writer's temporary is removed and its lock released") {
  for (auto stage : {detail::atomic_write_stage::partial_write,
                     detail::atomic_write_stage::before_rename}) {
    CAPTURE(static_cast<int>(stage));
    temporary_directory dir{directory_prefix};
    variable w{tensor::scalar<float>(1), {.name = "w"}};
    const auto status = run_in_child_killed_at(stage, [&] {
                          checkpoint_manager writer{dir.path(), 5};
                          writer.save({w}, 1);
                        }).status;
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    CHECK(temporaries_in(dir.path()).size() == 1);

    checkpoint_manager next{dir.path(), 5};
    CHECK(temporaries_in(dir.path()).empty());
    CHECK(next.checkpoints().empty());
    REQUIRE(next.save({w}, 2).has_value());
    CHECK(restored_w(next) == 1);
  }
}

TEST_CASE("the writer lock is taken at the first save, not when the folder is opened") {
  temporary_directory dir{directory_prefix};
  variable w{tensor::scalar<float>(5), {.name = "w"}};
  {
    checkpoint_manager first{dir.path(), 3};
    checkpoint_manager second{dir.path(), 3};
    CHECK_FALSE(fs::exists(dir.path() / ".lockstep-writer.lock"));
    REQUIRE(first.save({w}, 1).has_value());
    CHECK(fs::exists(dir.path() / ".lockstep-writer.lock"));
    // Another manager, even in this process, is a second writer...
    CHECK(error_of<io_error>([&] { second.save({w}, 2); }) == another_writer_message(dir.path()));
    // ... but reads freely, as the writer does.
    CHECK(restored_w(second) == 5);
    CHECK(restored_w(first) == 5);
    // The lock moves with the manager.
    auto moved = std::move(first);
    REQUIRE(moved.save({w}, 2).has_value());
    CHECK(error_of<io_error>([&] { second.save({w}, 3); }) == another_writer_message(dir.path()));

    // A writer in another process gets the same error.
    const pid_t child = ::fork();
    REQUIRE(child != -1);
    if (child == 0) {
      try {
        checkpoint_manager other{dir.path(), 3};
        other.save({w}, 4);
      } catch (const io_error& e) {
        ::_exit(std::string(e.what()) == another_writer_message(dir.path()) ? 0 : 1);
      } catch (...) {
        ::_exit(2);
      }
      ::_exit(3);
    }
    const auto status = wait_for_child(child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK_FALSE(fs::exists(dir.path() / "ckpt-4.safetensors"));
  }
  // Both writers are gone: a new one writes. The lock file stays and is no
  // checkpoint.
  checkpoint_manager later{dir.path(), 3};
  REQUIRE(later.save({w}, 3).has_value());
  CHECK(later.checkpoints().size() == 3);
  CHECK(fs::exists(dir.path() / ".lockstep-writer.lock"));
}

TEST_CASE("remove_abandoned_temporaries removes only unlocked regular temporaries") {
  temporary_directory dir{directory_prefix};
  const auto abandoned = dir.path() / "a.safetensors.tmp.1.0";
  const auto locked = dir.path() / "b.safetensors.tmp.1.1";
  const auto link = dir.path() / "c.safetensors.tmp.1.2";
  const auto folder = dir.path() / "d.safetensors.tmp.1.3";
  const auto other = dir.path() / "a.safetensors";
  write_file(abandoned, "half");
  write_file(locked, "half");
  write_file(other, "kept");
  fs::create_symlink(other, link);
  fs::create_directory(folder);
  // A lock held through another open file, as a live writer holds it.
  const int holder = ::open(locked.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(holder != -1);
  REQUIRE(::flock(holder, LOCK_EX | LOCK_NB) == 0);

  CHECK(detail::remove_abandoned_temporaries(dir.path()) == 1);
  CHECK_FALSE(fs::exists(abandoned));
  CHECK(fs::exists(locked));
  CHECK(fs::is_symlink(link));
  CHECK(fs::is_directory(folder));
  CHECK(read_file(other) == "kept");

  ::close(holder);
  CHECK(detail::remove_abandoned_temporaries(dir.path()) == 1);
  CHECK_FALSE(fs::exists(locked));
  // A folder that does not exist has nothing to remove.
  CHECK(detail::remove_abandoned_temporaries(dir.path() / "missing") == 0);
}
