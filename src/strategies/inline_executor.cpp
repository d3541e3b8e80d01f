#include "strategies/inline_executor.hpp"

#include "replication/thread_mode.hpp"

namespace lockstep::detail {

inline_executor::inline_executor(strategy_state& state,
                                 std::optional<device_spec> device)
  : state_(state), device_(std::move(device)), context_(replica_context_access::make(state, 0, *this)) {}

std::vector<std::any>
inline_executor::run(std::shared_ptr<const replica_function> fn,
                     std::chrono::milliseconds) {
  // One replica on the caller's thread: nothing can stall but the caller.
  mode_guard mode{{&state_, &context_, 0}};
  std::optional<device_scope> placement;
  if (device_)
    placement.emplace(*device_);
  std::vector<std::any> out;
  out.push_back((*fn)(context_));
  return out;
}

std::any inline_executor::merge(std::any args,
                                std::shared_ptr<const merge_function> fn) {
  mode_guard mode{{&state_, nullptr}};
  std::vector<std::any> packs;
  packs.push_back(std::move(args));
  return std::move((*fn)(state_, packs).at(0));
}

} // namespace lockstep::detail
