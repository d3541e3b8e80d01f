#include "actors/prompt_blocking_actor.hpp"

#include <caf/intrusive/inbox_result.hpp>

#include <algorithm>

namespace lockstep::actors {

void prompt_blocking_actor::enqueue(caf::mailbox_element_ptr ptr, caf::execution_unit*) {
  if (mailbox().push_back(ptr.release()) == caf::intrusive::inbox_result::unblocked_reader) {
    // Taking the mutex orders this wake-up after the reader's `blocked()`
    // check; signalling after releasing it lets the reader run at once.
    { std::lock_guard<std::mutex> lock{wake_mutex_}; }
    wake_.notify_one();
  }
}

bool prompt_blocking_actor::poll_until(timeout_type until) {
  if (spin_.count() == 0)
    return false;
  const auto end = std::min(until, timeout_type::clock::now() + spin_);
  do {
    if (!mailbox().empty())
      return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } while (timeout_type::clock::now() < end);
  return false;
}

void prompt_blocking_actor::await_data() {
  if (!poll_until(timeout_type::max()))
    mailbox().synchronized_await(wake_mutex_, wake_);
}

bool prompt_blocking_actor::await_data(timeout_type timeout) {
  return poll_until(timeout) || mailbox().synchronized_await(wake_mutex_, wake_, timeout);
}

} // namespace lockstep::actors
