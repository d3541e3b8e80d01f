#pragma once

// nccl_watchdog: the thread that watches NCCL collectives in flight, as
// c10d's watchdog does. A collective's caller hands it the communicators
// and one event recorded after the collective on each stream, and waits.
// The watchdog polls the events and ncclCommGetAsyncError: all events done
// is success; an asynchronous error, or the deadline passing first, makes
// it abort every communicator of the collective (ncclCommAbort), so no
// kernel spins forever, and report why. It is lockstep's own thread, not
// a CAF actor: polling the device would block a scheduler thread.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <string>
#include <vector>

namespace lockstep::detail {

/// One collective in flight.
struct nccl_work {
  /// What it is, for errors: "nccl_all_reduce of 3 tensors on CUDA devices 0, 1".
  std::string what;
  std::vector<ncclComm_t> communicators;
  /// Recorded after the collective on each stream, with the CUDA device of
  /// each.
  std::vector<std::pair<int, cudaEvent_t>> done;
  std::chrono::steady_clock::time_point deadline;
};

/// Waits (through the process's watchdog thread) until `work` completes.
/// Throws device_error after an asynchronous NCCL error and timeout_error
/// after the deadline, in both cases once every communicator of `work` was
/// aborted; the caller must then not use them again. Throws device_error
/// when a CUDA event query fails.
void watch_nccl_work(const nccl_work& work);

/// Test hook: the next collective watched sees `code` as its
/// communicators' asynchronous error (and is aborted for it).
void inject_nccl_async_error(ncclResult_t code);

} // namespace lockstep::detail
