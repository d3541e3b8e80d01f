// The main job (examples/train_fashion_mnist) under a real limit on threads
// (RLIMIT_NPROC), as a child run as an otherwise unused uid through
// setpriv and prlimit, on a few made-up images. For 1, 2 and 4 replicas the
// test finds the smallest limit that lets a short run finish (it depends on
// the cores: the scheduler has a thread per core), then runs every limit
// below it: each run must finish or end with a clear error (a nonzero
// status and a message that names threads and the limit), and none may
// hang (a child still running after its time limit is killed and fails the
// test). In a job of two workers where only one is limited, the limited
// worker ends clearly and the other ends too, long before the join and
// collective timeouts (300 s).
//
// Exits 77 (skipped) when it is not root or no unused uid can run the build.

#include <doctest/doctest.h>

#include "child_process.hpp"
#include "fashion_mnist_files.hpp"
#include "file_support.hpp"
#include "other_uid.hpp"
#include "worker_processes.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// How long one run may take before it counts as a hang. A short run takes
/// about a second; the join and collective timeouts are 300 s.
constexpr auto run_limit = 60s;

/// No limit below this one is searched for: a run needs more.
constexpr int highest_limit = 256;

[[noreturn]] void skip(const std::string& why) {
  std::cerr << "thread_limits: skipped: " << why << "\n";
  std::exit(77);
}

fs::path program() {
  const char* path = std::getenv("TRAIN_FASHION_MNIST");
  REQUIRE_MESSAGE(path != nullptr,
                  "set TRAIN_FASHION_MNIST to the built train_fashion_mnist (meson test does)");
  return fs::absolute(path);
}

/// other_uid.hpp's slot for this test's uid (replica_start takes 0 to 2,
/// the probe 7): the limit counts every process and thread of the uid.
constexpr int uid_slot = 6;

/// How a run ended.
struct outcome {
  int status = -1; // -1: ended by a signal, or killed after run_limit (a hang)
  bool timed_out = false;
  std::string output;

  bool finished() const { return status == 0; }
  /// A nonzero status and a message that names the threads and the limit.
  bool clear_error() const {
    return status > 0 && output.find("thread") != std::string::npos
           && output.find("RLIMIT_NPROC") != std::string::npos;
  }
};

/// The folder every run uses: the data (readable by the unused uid) and a
/// folder for the outputs that the uid owns.
class workspace {
public:
  workspace() : uid_(unused_uid(uid_slot)) {
    // Root, and a build the uid can reach (not one under /root).
    if (const auto why = other_uid_unusable({program().string(), "--help"}, 0); !why.empty())
      skip_here(why);
    fs::permissions(dir_.path(), fs::perms::owner_all | fs::perms::group_read
                                   | fs::perms::group_exec | fs::perms::others_read
                                   | fs::perms::others_exec);
    fs::create_directory(data());
    // 64 training images: 2 steps of a global batch of 32; 32 test images.
    write_data(data(), 64, 32);
    fs::create_directory(outputs());
    const auto uid = static_cast<uid_t>(std::stoul(uid_));
    REQUIRE(::chown(outputs().c_str(), uid, uid) == 0);
  }

  /// The program's options for a short run with `replicas` replicas.
  std::vector<std::string> options(int replicas) {
    const auto n = std::to_string(runs_++);
    return {"--data-dir",       data().string(),
            "--metrics",        (outputs() / ("metrics-" + n + ".csv")).string(),
            "--plot",           (outputs() / ("plot-" + n + ".svg")).string(),
            "--replicas",       std::to_string(replicas),
            "--epochs",         "1",
            "--global-batch",   "32"};
  }

  /// The command that runs the program with `args` as the unused uid under
  /// a limit of `nproc` processes and threads.
  std::vector<std::string> limited_argv(int nproc, const std::vector<std::string>& args) const {
    auto argv = as_uid_limited(uid_, nproc);
    argv.push_back(program().string());
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  /// Runs the program limited (limited_argv), with `environment`
  /// (NAME=VALUE) added, and waits for it.
  outcome run_as_uid(int nproc, const std::vector<std::string>& args,
                     const std::vector<std::string>& environment) {
    const auto output = dir_.path() / ("output-" + std::to_string(runs_++));
    const auto exit = run_child_process({.argv = limited_argv(nproc, args),
                                         .extra_env = environment,
                                         .cwd = outputs(),
                                         .out = output,
                                         .err = {},
                                         .limit = run_limit});
    return {exit.status, exit.timed_out, read_file(output)};
  }

  fs::path data() const { return dir_.path() / "data"; }
  fs::path outputs() const { return dir_.path() / "outputs"; }
  const fs::path& path() const { return dir_.path(); }

private:
  /// skip(), without leaving the folder behind (skip does not unwind).
  [[noreturn]] void skip_here(const std::string& why) {
    std::error_code ignored;
    fs::remove_all(dir_.path(), ignored);
    skip(why);
  }

  temporary_directory dir_{"thread_limits"};
  std::string uid_;
  int runs_ = 0;
};

/// Runs `attempt` at limits from 1 up: first the smallest limit at which it
/// finishes (by bisection, assuming that more room never hurts), then every
/// limit below it that the search did not run. Each outcome must be a
/// finished run or a clear error, never a hang. Returns that limit.
int check_every_limit(const std::string& what, const std::function<outcome(int)>& attempt,
                      int lowest = 1) {
  std::map<int, outcome> seen;
  const auto run = [&](int limit) -> const outcome& {
    auto [at, fresh] = seen.try_emplace(limit);
    if (fresh) {
      at->second = attempt(limit);
      const auto& o = at->second;
      const std::string hang = o.timed_out ? " (killed after the time limit: a hang)" : "";
      INFO(what << " under a limit of " << limit << " threads: status " << o.status << hang
                << ", output:\n" << o.output);
      CHECK_FALSE(o.timed_out);
      CHECK((o.finished() || o.clear_error()));
    }
    return at->second;
  };
  REQUIRE_MESSAGE(run(highest_limit).finished(),
                  what << " does not finish even under a limit of " << highest_limit);
  int low = lowest;
  int high = highest_limit; // finishes
  while (low < high) {
    const int middle = low + (high - low) / 2;
    if (run(middle).finished())
      high = middle;
    else
      low = middle + 1;
  }
  for (int limit = lowest; limit < high; ++limit)
    run(limit);
  int failed = 0;
  for (const auto& [limit, o] : seen)
    failed += limit < high && o.clear_error() ? 1 : 0;
  MESSAGE(what << ": the smallest limit that lets it finish is " << high << "; " << failed
               << " of the " << high - lowest << " limits below it ended with a clear error");
  return high;
}

} // namespace

TEST_CASE("under every thread limit the main job finishes or fails clearly, never hangs") {
  workspace w;
  for (const int replicas : {1, 2, 4}) {
    const auto what = "the main job with " + std::to_string(replicas) + " replicas";
    check_every_limit(what, [&](int limit) {
      return w.run_as_uid(limit, w.options(replicas), {});
    });
  }
}

TEST_CASE("a limited worker of two ends clearly, and the other ends without waiting for a "
          "timeout") {
  workspace w;
  const auto token = "LOCKSTEP_CLUSTER_TOKEN=thread-limits-test-token-0123456789abcdef";
  const auto attempt = [&](int limit) {
    const int base = free_ports(2);
    const auto tf_config = [&](int index) {
      return "TF_CONFIG={\"cluster\":{\"worker\":[\"127.0.0.1:" + std::to_string(base)
             + "\",\"127.0.0.1:" + std::to_string(base + 1) + "\"]},\"task\":{\"type\":"
             "\"worker\",\"index\":" + std::to_string(index) + "}}";
    };
    // Worker 0 unlimited, as root; worker 1 limited, as the unused uid.
    std::vector<process> workers;
    auto args0 = w.options(1);
    args0.insert(args0.begin(), program().string());
    workers.push_back(spawn(args0, environment_with({tf_config(0), token}), w.path() / "worker-0"));
    workers.push_back(spawn(w.limited_argv(limit, w.options(1)),
                            environment_with({tf_config(1), token}), w.path() / "worker-1"));
    wait_all(workers, run_limit);
    const auto& other = workers[0];
    const auto& limited = workers[1];
    // (wait_all fails the test for a worker it had to kill.)
    outcome result{limited.status && WIFEXITED(*limited.status) ? WEXITSTATUS(*limited.status) : -1,
                   false, limited.text()};
    INFO("worker 0 (not limited): " << other.how() << ", output:\n" << other.text());
    // The other worker ends: done when both were, or it names the lost
    // worker (peer_lost_exit_status).
    CHECK((other.exited_ok() || other.exited_with(75) || other.exited_with(1)));
    if (result.finished())
      CHECK(other.exited_ok());
    return result;
  };
  // Every limit, down to 1: the join and the ring's connection need no
  // thread of their own, so the limited worker fails after it joined, and
  // the other hears of it at once.
  check_every_limit("worker 1 of 2 (1 replica each)", attempt);
}
