// Per-thread modes (thread_mode.hpp): a stack per thread, pushed by scopes,
// executors and merge functions; and the innermost update context.

#include "replication/thread_mode.hpp"

#include <vector>

namespace lockstep::detail {

namespace {

thread_local std::vector<thread_mode> modes;
thread_local const update_context* innermost_update = nullptr;

} // namespace

const thread_mode* current_mode() noexcept {
  return modes.empty() ? nullptr : &modes.back();
}

void push_mode(thread_mode mode) {
  modes.push_back(mode);
}

void pop_mode() noexcept {
  modes.pop_back();
}

const update_context* current_update_context() noexcept {
  return innermost_update;
}

update_context_guard::update_context_guard(strategy_state& strategy, std::size_t copy)
  : outer_(innermost_update), context_{&strategy, copy}, mode_({&strategy, nullptr}) {
  innermost_update = &context_;
}

update_context_guard::~update_context_guard() {
  innermost_update = outer_;
}

} // namespace lockstep::detail
