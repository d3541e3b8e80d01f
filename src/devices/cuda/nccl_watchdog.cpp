#include "devices/cuda/nccl_watchdog.hpp"

#include "devices/cuda/cuda_check.hpp"
#include "devices/cuda/nccl_check.hpp"
#include "lockstep/error.hpp"

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace lockstep::detail {

namespace {

enum class verdict { pending, completed, async_error, timed_out, failed };

struct watched {
  const nccl_work* work;
  verdict outcome = verdict::pending;
  std::string detail; // NCCL's or CUDA's words
};

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
  void watch(watched& entry) {
    std::unique_lock lock{mutex_};
    in_flight_.push_back(&entry);
    wake_.notify_all();
    const auto decided = decided_.wait_until(lock, entry.work->deadline + std::chrono::minutes{1},
                                             [&] { return entry.outcome != verdict::pending; });
    if (!decided)
      std::erase(in_flight_, &entry);
  }

private:
  watchdog() : thread_([this] { loop(); }) { thread_.detach(); }

  void loop() {
    std::unique_lock lock{mutex_};
    for (;;) {
      wake_.wait(lock, [&] { return !in_flight_.empty(); });
      // Polls every in-flight collective, then yields the processor; the
      // callers sleep meanwhile.
      for (auto it = in_flight_.begin(); it != in_flight_.end();) {
        auto& entry = **it;
        judge(entry);
        if (entry.outcome == verdict::pending) {
          ++it;
          continue;
        }
        it = in_flight_.erase(it);
        decided_.notify_all();
      }
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
  }

  void judge(watched& entry) {
    const auto& work = *entry.work;
    const int injected_code = injected.exchange(ncclSuccess);
    if (injected_code != ncclSuccess) {
      abort_all(work);
      entry.detail = nccl_error_text(static_cast<ncclResult_t>(injected_code)) + " (injected)";
      entry.outcome = verdict::async_error;
      return;
    }
    for (auto* comm : work.communicators) {
      ncclResult_t state = ncclSuccess;
      const auto code = ncclCommGetAsyncError(comm, &state);
      if (code != ncclSuccess)
        state = code;
      if (state != ncclSuccess && state != ncclInProgress) {
        abort_all(work);
        entry.detail = nccl_error_text(state);
        entry.outcome = verdict::async_error;
        return;
      }
    }
    bool all_done = true;
    for (const auto& [device, event] : work.done) {
      const auto code = cudaEventQuery(event);
      if (code == cudaErrorNotReady) {
        all_done = false;
      } else if (code != cudaSuccess) {
        (void) cudaGetLastError();
        abort_all(work);
        entry.detail = std::string{"cudaEventQuery on CUDA device "} + std::to_string(device)
                       + ": " + cudaGetErrorString(code) + " (" + cudaGetErrorName(code) + ")";
        entry.outcome = verdict::failed;
        return;
      }
    }
    if (all_done) {
      entry.outcome = verdict::completed;
    } else if (std::chrono::steady_clock::now() > work.deadline) {
      abort_all(work);
      entry.outcome = verdict::timed_out;
    }
  }

  static void abort_all(const nccl_work& work) {
    for (auto* comm : work.communicators)
      (void) ncclCommAbort(comm);
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable decided_;
  std::vector<watched*> in_flight_;
  std::thread thread_;
};

} // namespace

void watch_nccl_work(const nccl_work& work) {
  watched entry{&work};
  watchdog::instance().watch(entry);
  switch (entry.outcome) {
    case verdict::completed:
      return;
    case verdict::pending:
      throw timeout_error(work.what + ": the NCCL watchdog did not decide within a minute past"
                                      " the timeout");
    case verdict::async_error:
      throw device_error(work.what + ": NCCL reported an asynchronous error: " + entry.detail
                         + "; the communicator was aborted (ncclCommAbort)");
    case verdict::failed:
      throw device_error(work.what + ": " + entry.detail
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
