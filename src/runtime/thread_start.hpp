#pragma once

// Starting the threads lockstep runs itself (the timeline's writer, the
// control links, the device executors, the dump-signal watcher, the host
// resolver, the NCCL watchdog, and the threads of CAF actors lockstep
// launches). A thread that cannot be created (a limit on threads such as
// RLIMIT_NPROC / ulimit -u or a container's pids limit, or memory running
// out) is one resource_error naming the thread, the system's reason and the
// limit in force, never a bare std::system_error; nothing waits for a thread
// that never ran. docs/reliability.md, "Threads under a limit".

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

namespace lockstep::detail {

/// Starts a thread that runs `body`. Throws resource_error naming `what`
/// ("the timeline writer") when the thread cannot be created; then `body`
/// never runs.
std::thread start_thread(std::string_view what, std::function<void()> body);

/// The message of the resource_error for a thread `what` that could not
/// start for `reason` (the system's words): names the thread, the reason,
/// the threads this process runs and this user's limit (RLIMIT_NPROC).
std::string thread_start_failure(std::string_view what, std::string_view reason);

/// What limits threads here: "this process runs 7 threads; this user may
/// run at most 8 processes and threads (RLIMIT_NPROC, ulimit -u), ...".
std::string thread_limits();

/// The threads of this process (/proc/self/status); 0 if unknown.
std::size_t threads_of_this_process();

/// Test seam: when set, called with `what` before every thread that
/// start_thread or detail::detached_actor starts (the replicas have
/// actors::strategy actor::replica_start_hook); a throw stands for a thread
/// that could not be created. Set it only while no lockstep thread starts.
std::function<void(std::string_view)>& thread_start_hook();

} // namespace lockstep::detail
