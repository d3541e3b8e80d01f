// A strategy that cannot start all its replicas raises resource_error naming
// what failed and how many had started, stops those, and leaves the process
// able to exit. Two ways in: an injected failure of the N-th replica start
// (strategy actor's test seam), and a real limit on threads (RLIMIT_NPROC) in
// a child process run as an otherwise unused uid (skipped, saying why, where
// that uid cannot reach the build: not root, or a build under /root).

#include "actors/strategy_actor.hpp"

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include "child_process.hpp"
#include "file_support.hpp"
#include "other_uid.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

using namespace lockstep;
using namespace std::chrono_literals;

namespace {

/// Clears the strategy actor's start hook however a test ends.
struct start_hook_guard {
  ~start_hook_guard() { actors::strategy_actor::replica_start_hook() = nullptr; }
};

std::string child_path() {
  const char* path = std::getenv("LOCKSTEP_REPLICA_START_CHILD");
  REQUIRE_MESSAGE(path != nullptr, "meson sets LOCKSTEP_REPLICA_START_CHILD");
  return path;
}

struct child_result {
  int exit_code = -1; // -1: ended by a signal, or killed after the time limit (a hang)
  std::string output;
};

/// Runs `argv` with `extra_env`, stdout and stderr to one file; kills it
/// after `limit`.
child_result run_child(const std::vector<std::string>& argv,
                       const std::vector<std::string>& extra_env, std::chrono::seconds limit) {
  temporary_directory dir{"replica_start"};
  const auto output = dir.path() / "output";
  const auto exit = run_child_process(
    {.argv = argv, .extra_env = extra_env, .cwd = {}, .out = output, .err = {}, .limit = limit});
  return {exit.status, read_file(output)};
}

/// Runs the child as an unused uid under a limit of `nproc` processes and
/// threads, with a scheduler of two threads whatever the machine's cores.
child_result run_limited(int test_case, int nproc, int replicas) {
  auto argv = as_uid_limited(unused_uid(test_case), nproc);
  argv.insert(argv.end(), {child_path(), std::to_string(replicas)});
  return run_child(argv, {"LOCKSTEP_SCHEDULER_THREADS=2"}, 60s);
}

/// False, with the reason as a message, where the child cannot run as
/// another uid: not root, or a build other users cannot reach (under /root).
/// Probed once: the child without arguments prints its usage and exits 2.
bool can_run_as_other_users() {
  static const auto unusable = other_uid_unusable({child_path()}, 2);
  if (unusable.empty())
    return true;
  MESSAGE("skipped: " << unusable);
  return false;
}

} // namespace

TEST_CASE("an injected failure of the third replica start stops the two started") {
  start_hook_guard guard;
  actors::strategy_actor::replica_start_hook() = [](std::size_t replica) {
    if (replica == 2)
      throw std::system_error(EAGAIN, std::generic_category(), "injected thread start failure");
  };
  try {
    mirrored_strategy strategy{cpu_devices(4)};
    FAIL("the strategy started all its replicas");
  } catch (const resource_error& e) {
    const std::string what = e.what();
    CHECK(what.find("replica 2 (/job:localhost/replica:0/task:0/device:CPU:2)") != std::string::npos);
    CHECK(what.find("the 3rd of 4 replicas") != std::string::npos);
    CHECK(what.find("injected thread start failure") != std::string::npos);
    CHECK(what.find("the 2 replicas that had started were stopped") != std::string::npos);
  }
  actors::strategy_actor::replica_start_hook() = nullptr;
  // Nothing was left behind: a new strategy starts and runs.
  mirrored_strategy strategy{cpu_devices(4)};
  auto ids = strategy.run([](replica_context& ctx) { return ctx.replica_id_in_sync_group(); });
  for (std::size_t r = 0; r < 4; ++r)
    CHECK(ids[r] == r);
}

TEST_CASE("a failure of the first replica start reports that none had started") {
  start_hook_guard guard;
  actors::strategy_actor::replica_start_hook() = [](std::size_t) { throw std::bad_alloc(); };
  try {
    mirrored_strategy strategy{cpu_devices(3)};
    FAIL("the strategy started");
  } catch (const resource_error& e) {
    CHECK(std::string(e.what()).find("the 0 replicas that had started were stopped")
          != std::string::npos);
  }
}

TEST_CASE("under a thread limit reached part-way, the strategy fails clearly and the process exits") {
  if (!can_run_as_other_users())
    return;
  // Enough for the actor system (its probe, workers and timer) but not for
  // 64 replica threads.
  const auto result = run_limited(0, 12, 64);
  INFO(result.output);
  CHECK(result.exit_code == 3);
  CHECK(result.output.find("could not start the thread of replica") != std::string::npos);
  CHECK(result.output.find("replicas that had started were stopped") != std::string::npos);
}

TEST_CASE("under a thread limit too low for the actor system, it fails clearly and the process exits") {
  if (!can_run_as_other_users())
    return;
  const auto result = run_limited(1, 2, 4);
  INFO(result.output);
  CHECK(result.exit_code == 3);
  CHECK(result.output.find("cannot start its actor system") != std::string::npos);
}

TEST_CASE("the same limit with room for every thread lets the strategy start (the control)") {
  if (!can_run_as_other_users())
    return;
  const auto result = run_limited(2, 64, 4);
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("started; all_reduce gave") != std::string::npos);
}

TEST_CASE("a child that other users cannot reach is found out first, and the skip names why") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: not root: the probe runs its child as another uid");
    return;
  }
  // A build under /root, in small: the child in a directory of mode 0700.
  temporary_directory closed{"replica_start_closed"};
  std::filesystem::permissions(closed.path(), std::filesystem::perms::owner_all);
  const auto copy = closed.path() / "replica_start_child";
  std::filesystem::copy_file(child_path(), copy);
  const auto reason = other_uid_unusable({copy.string()}, 2);
  INFO(reason);
  CHECK(reason.find("cannot run " + copy.string() + ": exit status 126") != std::string::npos);
  CHECK(reason.find("other users cannot enter " + closed.path().string() + " (mode 0700)")
        != std::string::npos);
}
