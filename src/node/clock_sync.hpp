#pragma once

// The workers' clocks against the coordinator's, measured once at the
// rendezvous over the control connections, so that every worker's
// timeline (runtime/timeline.hpp) is on one clock. NTP's estimate: a
// worker sends its time t0, the coordinator answers with its own t1, the
// answer arrives at t2; offset = t1 - (t0 + t2) / 2, within (t2 - t0) / 2.
// Of several probes, the one with the shortest round trip counts.

#include "transport/tcp/socket_io.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lockstep::detail {

struct clock_estimate {
  std::int64_t offset_ns = 0; // the coordinator's clock minus this one
  std::int64_t error_ns = 0;  // the offset is right to within this
};

/// Probes per worker.
inline constexpr std::size_t clock_probes = 8;

/// The coordinator's side: answers clock_probes probes on each of
/// `control`'s connections in turn (index 0, its own, is skipped). Throws
/// as the frames' reads and writes, or bad_control_message.
void answer_clock_probes(std::vector<tcp_socket>& control, io_clock::time_point deadline);

/// A worker's side, on its connection to the coordinator.
clock_estimate probe_coordinator_clock(tcp_socket& coordinator, io_clock::time_point deadline);

} // namespace lockstep::detail
