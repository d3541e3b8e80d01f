#pragma once

// Runs the single replica of the default and one-device strategies on the
// calling thread; `merge_call` calls the merge function directly.

#include "strategies/public_state.hpp"

#include <optional>

namespace lockstep::detail {

class inline_executor final : public replica_executor, public merge_channel {
public:
  /// `device`: where the replica's tensors go; unset keeps the caller's.
  inline_executor(strategy_state& state, std::optional<device_spec> device);

  std::vector<std::any> run(std::shared_ptr<const replica_function> fn,
                            std::chrono::milliseconds timeout) override;

  std::any merge(std::any args, std::shared_ptr<const merge_function> fn) override;

  replica_context& context() noexcept { return context_; }

private:
  strategy_state& state_;
  std::optional<device_spec> device_;
  replica_context context_;
};

} // namespace lockstep::detail
