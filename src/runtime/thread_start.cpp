#include "runtime/thread_start.hpp"

#include "lockstep/error.hpp"

#include <sys/resource.h>

#include <exception>
#include <fstream>
#include <utility>

namespace lockstep::detail {

namespace {

/// "this user may run at most 12 processes and threads (RLIMIT_NPROC,
/// ulimit -u)", or the other places a limit may come from when there is no
/// such limit.
std::string limit_in_force() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NPROC, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    return "this user may run at most " + std::to_string(limit.rlim_cur)
           + " processes and threads, its other processes' included (RLIMIT_NPROC, "
             "ulimit -u)";
  return "no RLIMIT_NPROC (ulimit -u) is set; a container's pids limit, "
         "kernel.threads-max or memory may be reached";
}

} // namespace

std::size_t threads_of_this_process() {
  std::ifstream status{"/proc/self/status"};
  std::string key;
  while (status >> key) {
    if (key == "Threads:") {
      std::size_t n = 0;
      status >> n;
      return n;
    }
    status.ignore(1 << 20, '\n');
  }
  return 0;
}

std::string thread_limits() {
  const auto threads = threads_of_this_process();
  if (threads == 0) // unknown
    return limit_in_force();
  return "this process runs " + std::to_string(threads) + (threads == 1 ? " thread; " : " threads; ")
         + limit_in_force();
}

std::string thread_start_failure(std::string_view what, std::string_view reason) {
  std::string text = "lockstep could not start a thread for ";
  text += what;
  text += ": ";
  text += reason;
  return text + " (" + thread_limits() + ")";
}

std::thread start_thread(std::string_view what, std::function<void()> body) {
  try {
    if (const auto& hook = thread_start_hook())
      hook(what);
    return std::thread{std::move(body)};
  } catch (const std::exception& e) { // std::system_error (EAGAIN), or std::bad_alloc
    throw resource_error(thread_start_failure(what, e.what()));
  }
}

std::function<void(std::string_view)>& thread_start_hook() {
  static std::function<void(std::string_view)> hook;
  return hook;
}

} // namespace lockstep::detail
