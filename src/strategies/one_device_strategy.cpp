#include "lockstep/one_device_strategy.hpp"

#include "strategies/inline_executor.hpp"
#include "strategies/public_state.hpp"

#include "lockstep/runtime_options.hpp"

namespace lockstep {

namespace {

std::shared_ptr<detail::strategy_state> make_state(const device_spec& device) {
  auto canonical = device.canonical();
  auto state = detail::public_strategy_state::create(
    "one_device_strategy(" + canonical.to_string() + ")", {.local_devices = {canonical}}, false,
    std::make_shared<reduction_to_one_device>(canonical), get_runtime_options().timeout);
  state->executor = std::make_unique<detail::inline_executor>(*state, canonical);
  return state;
}

} // namespace

one_device_strategy::one_device_strategy(const device_spec& device)
  : strategy(make_state(device)) {}

} // namespace lockstep
