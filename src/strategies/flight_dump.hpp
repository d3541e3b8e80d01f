#pragma once

// The strategies whose flight recorders dump_flight_recorders writes
// (lockstep/diagnostics.hpp).

#include <memory>

namespace lockstep::detail {

struct strategy_state;

/// Adds `state` to the strategies a dump covers, for as long as it lives.
void register_for_dumps(const std::shared_ptr<strategy_state>& state);

} // namespace lockstep::detail
