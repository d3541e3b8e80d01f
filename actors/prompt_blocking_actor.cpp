#include "actors/prompt_blocking_actor.hpp"

#include <caf/intrusive/inbox_result.hpp>

#include <algorithm>
#include <utility>

namespace lockstep::actors {

void prompt_blocking_actor::enqueue(caf::mailbox_element_ptr ptr, caf::execution_unit*) {
  const bool unblocked
    = mailbox().push_back(ptr.release()) == caf::intrusive::inbox_result::unblocked_reader;
  const auto pushed = pushed_.fetch_add(1) + 1;
  const auto gathering = gathering_.load();
  if (unblocked || (gathering != 0 && pushed >= gathering)) {
    // Taking the mutex orders this wake-up after the reader's check of its
    // condition; signalling after releasing it lets the reader run at once.
    { std::lock_guard<std::mutex> lock{wake_mutex_}; }
    wake_.notify_one();
  }
}

bool prompt_blocking_actor::await_gathered(timeout_type until) {
  const auto target = std::exchange(gather_until_, 0);
  if (target > pushed_.load() + 1) {
    // seq_cst: either this wait sees the push that reaches the target, or
    // that push sees `gathering_` and wakes it.
    std::unique_lock<std::mutex> lock{wake_mutex_};
    gathering_.store(target);
    wake_.wait_until(lock, std::min(until, timeout_type::clock::now() + gather_window),
                     [&] { return pushed_.load() >= target; });
    gathering_.store(0);
  }
  return !mailbox().empty();
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
  if (!await_gathered(timeout_type::max()) && !poll_until(timeout_type::max()))
    mailbox().synchronized_await(wake_mutex_, wake_);
}

bool prompt_blocking_actor::await_data(timeout_type timeout) {
  return await_gathered(timeout) || poll_until(timeout)
         || mailbox().synchronized_await(wake_mutex_, wake_, timeout);
}

} // namespace lockstep::actors
