#include "node/join_cancellation.hpp"

#include "lockstep/error.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace lockstep::detail {

namespace {

std::atomic<bool> cancelled{false};
// Made when the library loads, so that the signal handler never makes it.
const int cancel_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

} // namespace

void cancel_joins_now() noexcept {
  cancelled.store(true);
  if (cancel_fd >= 0) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto written = ::write(cancel_fd, &one, sizeof one);
  }
}

bool joins_cancelled() noexcept {
  return cancelled.load();
}

pollfd join_cancel_entry() noexcept {
  return {cancel_fd, POLLIN, 0};
}

void throw_if_joins_cancelled(const std::string& what) {
  if (joins_cancelled())
    throw cancelled_error(what + " was cancelled (cancel_joins: the program is stopping)");
}

} // namespace lockstep::detail
