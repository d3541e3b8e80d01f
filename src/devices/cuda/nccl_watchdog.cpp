#include "devices/cuda/nccl_watchdog.hpp"

#include "devices/cuda/cuda_check.hpp"
#include "devices/cuda/nccl_check.hpp"
#include "runtime/thread_start.hpp"
#include "lockstep/error.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace lockstep::detail {

namespace {

enum class verdict { pending, completed, async_error, timed_out, failed };

struct watched {
  nccl_work work; // a copy: the watchdog may still poll it after its caller gave up
  verdict outcome = verdict::pending;
  std::string detail; // NCCL's or CUDA's words
};

/// Calls ncclCommAbort on every communicator of `work`, keeping the
/// thread's current CUDA device (NCCL sets its own).
void abort_all(const nccl_work& work) {
  cuda_device_keeper keeper;
  for (auto* comm : work.communicators)
    (void) ncclCommAbort(comm);
}

/// What `work` has come to now; aborts its communicators first where the
/// verdict is an error or the timeout. `injected`: the test seam's error.
std::pair<verdict, std::string> judge(const nccl_work& work, int injected) {
  if (injected != ncclSuccess) {
    abort_all(work);
    return {verdict::async_error,
            nccl_error_text(static_cast<ncclResult_t>(injected)) + " (injected)"};
  }
  for (auto* comm : work.communicators) {
    ncclResult_t state = ncclSuccess;
    const auto code = ncclCommGetAsyncError(comm, &state);
    if (code != ncclSuccess)
      state = code;
    if (state != ncclSuccess && state != ncclInProgress) {
      abort_all(work);
      return {verdict::async_error, nccl_error_text(state)};
    }
  }
  bool all_done = true;
  for (const auto& [device, event] : work.done) {
    const auto code = cudaEventQuery(event);
    (void) cudaGetLastError(); // "not ready" stays the last error otherwise
    if (code == cudaErrorNotReady) {
      all_done = false;
    } else if (code != cudaSuccess) {
      abort_all(work);
      return {verdict::failed, std::string{"cudaEventQuery on CUDA device "}
                                 + std::to_string(device) + ": " + cudaGetErrorString(code)
                                 + " (" + cudaGetErrorName(code) + ")"};
    }
  }
  if (all_done)
    return {verdict::completed, {}};
  if (std::chrono::steady_clock::now() > work.deadline) {
    abort_all(work);
    return {verdict::timed_out, {}};
  }
  return {verdict::pending, {}};
}

class watchdog {
public:
  static watchdog& instance() {
    static auto* dog = new watchdog; // never stopped: collectives may run at exit
    return *dog;
  }

  std::atomic<int> injected{ncclSuccess};

  /// Blocks until the watchdog decided about `entry`, or a minute past its
  /// deadline (a watchdog stuck in a driver call): then `entry` stays
  /// pending, withdrawn.
  void watch(const std::shared_ptr<watched>& entry) {
    std::unique_lock lock{mutex_};
    in_flight_.push_back(entry);
    wake_.notify_all();
    const auto decided = decided_.wait_until(lock, entry->work.deadline + std::chrono::minutes{1},
                                             [&] { return entry->outcome != verdict::pending; });
    if (!decided)
      std::erase(in_flight_, entry);
  }

private:
  /// resource_error when the thread cannot start; instance() tries again
  /// at its next call.
  watchdog() : thread_(start_thread("the NCCL watchdog", [this] { loop(); })) {
    thread_.detach();
  }

  /// Polls the collectives in flight without holding the lock (an abort
  /// may take long, and callers must be able to give up meanwhile), then
  /// publishes the verdicts under it; sleeps 20 microseconds between polls.
  void loop() {
    for (;;) {
      std::vector<std::shared_ptr<watched>> polled;
      {
        std::unique_lock lock{mutex_};
        wake_.wait(lock, [&] { return !in_flight_.empty(); });
        polled = in_flight_;
      }
      std::vector<std::pair<verdict, std::string>> verdicts;
      for (const auto& entry : polled)
        verdicts.push_back(judge(entry->work, injected.exchange(ncclSuccess)));
      {
        std::lock_guard lock{mutex_};
        for (std::size_t i = 0; i < polled.size(); ++i) {
          if (verdicts[i].first == verdict::pending
              || std::find(in_flight_.begin(), in_flight_.end(), polled[i]) == in_flight_.end())
            continue; // still running, or withdrawn by its caller
          polled[i]->outcome = verdicts[i].first;
          polled[i]->detail = std::move(verdicts[i].second);
          std::erase(in_flight_, polled[i]);
        }
      }
      decided_.notify_all();
      std::this_thread::sleep_for(std::chrono::microseconds{20});
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable decided_;
  std::vector<std::shared_ptr<watched>> in_flight_;
  std::thread thread_;
};

} // namespace

void watch_nccl_work(const nccl_work& work) {
  const auto entry = std::make_shared<watched>(watched{work});
  watchdog::instance().watch(entry);
  switch (entry->outcome) {
    case verdict::completed:
      return;
    case verdict::pending:
      throw timeout_error(work.what + ": the NCCL watchdog did not decide within a minute past"
                                      " the timeout");
    case verdict::async_error:
      throw device_error(work.what + ": NCCL reported an asynchronous error: " + entry->detail
                         + "; the communicator was aborted (ncclCommAbort)");
    case verdict::failed:
      throw device_error(work.what + ": " + entry->detail
                         + "; the communicator was aborted (ncclCommAbort)");
    case verdict::timed_out:
      throw timeout_error(work.what + ": not finished after the timeout; the communicator was"
                                      " aborted (ncclCommAbort)");
  }
}

void inject_nccl_async_error(ncclResult_t code) {
  watchdog::instance().injected = code;
}

} // namespace lockstep::detail
