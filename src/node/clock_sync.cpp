#include "node/clock_sync.hpp"

#include "node/control_messages.hpp"
#include "runtime/timeline.hpp"
#include "transport/tcp/frame.hpp"
#include "runtime/little_endian.hpp"

#include <array>
#include <initializer_list>
#include <limits>
#include <string>

namespace lockstep::detail {

namespace {

constexpr auto probe_kind = static_cast<std::uint32_t>(control_kind::clock_probe);
constexpr auto reply_kind = static_cast<std::uint32_t>(control_kind::clock_reply);

/// A frame of `kind` with `count` little-endian 64-bit numbers.
std::array<std::int64_t, 2> read_numbers(tcp_socket& socket, std::uint32_t kind,
                                         std::size_t count, io_clock::time_point deadline) {
  const auto f = read_frame(socket, 16, deadline);
  if (f.kind != kind || f.payload.size() != 8 * count)
    throw bad_control_message("the clock exchange got a frame of kind " + std::to_string(f.kind)
                              + " and " + std::to_string(f.payload.size())
                              + " bytes where it expected kind " + std::to_string(kind));
  std::array<std::int64_t, 2> numbers{};
  for (std::size_t i = 0; i < count; ++i)
    numbers[i] = static_cast<std::int64_t>(load_le<std::uint64_t>(f.payload, 8 * i));
  return numbers;
}

void write_numbers(tcp_socket& socket, std::uint32_t kind,
                   std::initializer_list<std::int64_t> numbers, io_clock::time_point deadline) {
  std::vector<std::uint8_t> payload(8 * numbers.size());
  std::size_t at = 0;
  for (const auto n : numbers) {
    store_le(payload.data() + at, static_cast<std::uint64_t>(n));
    at += 8;
  }
  write_frame(socket, kind, payload, deadline);
}

} // namespace

void answer_clock_probes(std::vector<tcp_socket>& control, io_clock::time_point deadline) {
  for (std::size_t rank = 1; rank < control.size(); ++rank)
    for (std::size_t i = 0; i < clock_probes; ++i) {
      const auto [sent, unused] = read_numbers(control[rank], probe_kind, 1, deadline);
      write_numbers(control[rank], reply_kind, {sent, timeline_now()}, deadline);
    }
}

clock_estimate probe_coordinator_clock(tcp_socket& coordinator, io_clock::time_point deadline) {
  clock_estimate best{0, std::numeric_limits<std::int64_t>::max()};
  for (std::size_t i = 0; i < clock_probes; ++i) {
    const auto t0 = timeline_now();
    write_numbers(coordinator, probe_kind, {t0}, deadline);
    const auto [echoed, t1] = read_numbers(coordinator, reply_kind, 2, deadline);
    const auto t2 = timeline_now();
    if (echoed != t0)
      throw bad_control_message("the coordinator answered another clock probe than the one sent");
    if (const auto half_round_trip = (t2 - t0 + 1) / 2; half_round_trip < best.error_ns)
      best = {t1 - (t0 + (t2 - t0) / 2), half_round_trip};
  }
  return best;
}

} // namespace lockstep::detail
