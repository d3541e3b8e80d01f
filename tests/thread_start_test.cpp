// Every thread lockstep starts itself fails clearly when it cannot start: a
// resource_error naming the thread and the limit, never a bare
// std::system_error, nothing half made (a timeline file, a blocked signal),
// and nothing that a later shutdown waits for. Failures are injected
// through detail::thread_start_hook; tests/thread_limits_test.cpp runs the
// main job under real limits.

#include "actor_system/actor_system.hpp"
#include "runtime/thread_start.hpp"
#include "runtime/timeline.hpp"

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include "file_support.hpp"

#include <caf/actor_system.hpp>

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>

using namespace lockstep;
using namespace std::chrono_literals;

namespace {

/// pthread_create calls still to fail with EAGAIN, as at a limit on threads.
std::atomic<int> creates_to_fail{0};

} // namespace

/// Interposes the C library's pthread_create (std::thread's, CAF's as well):
/// it fails while creates_to_fail says so, as it does at RLIMIT_NPROC, and
/// otherwise calls the next definition (the C library's, or a sanitizer's).
extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attributes,
                              void* (*start)(void*), void* argument) {
  using create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const auto next = reinterpret_cast<create>(::dlsym(RTLD_NEXT, "pthread_create"));
  for (int left = creates_to_fail.load(); left > 0;)
    if (creates_to_fail.compare_exchange_weak(left, left - 1))
      return EAGAIN;
  return next(thread, attributes, start, argument);
}

namespace {

/// Fails every start of a thread whose name begins with `prefix` as the
/// system does at a limit, until destroyed.
struct failing_starts {
  explicit failing_starts(std::string prefix) {
    detail::thread_start_hook() = [prefix = std::move(prefix)](std::string_view what) {
      if (what.starts_with(prefix))
        throw std::system_error(EAGAIN, std::generic_category(),
                                "Resource temporarily unavailable");
    };
  }
  ~failing_starts() { detail::thread_start_hook() = nullptr; }
  failing_starts(const failing_starts&) = delete;
  failing_starts& operator=(const failing_starts&) = delete;
};

/// Sets the runtime options for a test, and back.
struct options_guard {
  explicit options_guard(const runtime_options& options) { set_runtime_options(options); }
  ~options_guard() { set_runtime_options(saved); }
  runtime_options saved = get_runtime_options();
};

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// Lets go of `system`, the last handle of the actor system: ~actor_system
/// waits for every actor and every thread it counted. A hang is ended by
/// SIGALRM after `limit`, which fails the test. (On this thread: CAF's
/// logger, which ~actor_system also waits for, is held by every thread that
/// used the system.)
void shut_down_within(std::shared_ptr<caf::actor_system> system, unsigned limit_seconds) {
  REQUIRE(system.use_count() == 1);
  ::alarm(limit_seconds);
  system.reset();
  ::alarm(0);
}

} // namespace

TEST_CASE("start_thread turns a failed start into resource_error naming the thread and the limit") {
  failing_starts failing{"the test thread"};
  bool ran = false;
  try {
    detail::start_thread("the test thread", [&] { ran = true; }).join();
    FAIL("the thread started");
  } catch (const resource_error& e) {
    const std::string what = e.what();
    CHECK(has(what, "could not start a thread for the test thread"));
    CHECK(has(what, "Resource temporarily unavailable"));
    CHECK(has(what, "RLIMIT_NPROC"));
  }
  CHECK_FALSE(ran);
}

TEST_CASE("an input actor whose thread cannot be created is a resource_error, and the actor "
          "system still shuts down") {
  auto system = detail::shared_actor_system();
  {
    // The thread itself fails, inside CAF's launch (not the seam): what
    // launch had counted and registered for it must be undone.
    detail::thread_start_hook() = [](std::string_view what) {
      if (what.starts_with("the input actor"))
        creates_to_fail = 1;
    };
    const auto ds = dataset<std::int64_t>::range(8).prefetch(2);
    try {
      for (auto x : ds)
        (void)x;
      FAIL("the prefetching dataset ran");
    } catch (const resource_error& e) {
      CHECK(has(e.what(), "could not start a thread for the input actor"));
      CHECK(has(e.what(), "Resource temporarily unavailable"));
    }
    detail::thread_start_hook() = nullptr;
    CHECK(creates_to_fail == 0);
  }
  // Without the failure the same dataset runs.
  std::int64_t sum = 0;
  for (auto x : dataset<std::int64_t>::range(8).prefetch(2))
    sum += x;
  CHECK(sum == 28);
  // Before the fix ~actor_system waited forever for the actor whose thread
  // never ran.
  shut_down_within(std::move(system), 30);
}

TEST_CASE("an input actor that the seam fails is a resource_error too") {
  failing_starts failing{"the input actor"};
  try {
    for (auto x : dataset<std::int64_t>::range(8).prefetch(2))
      (void)x;
    FAIL("the prefetching dataset ran");
  } catch (const resource_error& e) {
    CHECK(has(e.what(), "the input actor"));
  }
}

TEST_CASE("a timeline writer that cannot start is a resource_error and leaves no file") {
  temporary_directory dir{"thread_start"};
  const auto path = dir.path() / "timeline.json";
  auto options = get_runtime_options();
  options.timeline = path.string();
  options_guard guard{options};
  {
    failing_starts failing{"the timeline writer"};
    try {
      auto hold = detail::timeline_hold();
      FAIL("the timeline started");
    } catch (const resource_error& e) {
      CHECK(has(e.what(), "the timeline writer"));
    }
    CHECK_FALSE(std::filesystem::exists(path));
  }
  {
    auto hold = detail::timeline_hold(); // and without the failure it records
  }
  CHECK(std::filesystem::exists(path));
}

TEST_CASE("a dump-signal watcher that cannot start is a resource_error and leaves the signal "
          "unblocked") {
  auto options = get_runtime_options();
  options.dump_signal = SIGUSR2;
  options_guard guard{options};
  failing_starts failing{"the dump-signal watcher"};
  try {
    watch_dump_signal();
    FAIL("the watcher started");
  } catch (const resource_error& e) {
    CHECK(has(e.what(), "the dump-signal watcher (signal " + std::to_string(SIGUSR2) + ")"));
  }
  sigset_t blocked;
  REQUIRE(::pthread_sigmask(SIG_BLOCK, nullptr, &blocked) == 0);
  CHECK(sigismember(&blocked, SIGUSR2) == 0);
}

TEST_CASE("device executors that cannot start are a resource_error naming the device") {
  mirrored_strategy strategy{cpu_devices(2)};
  failing_starts failing{"the executor of /job:localhost/replica:0/task:0/device:CPU:1"};
  try {
    auto scope = strategy.scope();
    variable v{tensor::from<float>({1.0f}), {.name = "v"}};
    FAIL("the executors started");
  } catch (const resource_error& e) {
    const std::string what = e.what();
    CHECK(has(what, "could not start a thread for the executor of"));
    CHECK(has(what, "device:CPU:1"));
    CHECK(has(what, "1 of 2 device executors had started and were released"));
  }
}
