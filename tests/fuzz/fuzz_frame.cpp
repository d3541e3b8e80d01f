// Fuzz target: the frame decoder as the control links read it
// (transport/tcp/frame.hpp through node/control_links.hpp): a coordinator's
// links to two workers, where worker 1 sends the fuzzer's bytes and then
// closes its connection, and worker 2 sends one valid heartbeat and stays.
//
// Guarantees checked:
//   - worker 1's connection delivers exactly the messages that a plain
//     reading of its bytes finds (12-byte headers, lengths within
//     max_control_payload, payloads that decode as the kind says), in
//     order, then exactly one failure, and nothing after it; no crash, no
//     hang (every input ends in end of stream), no allocation beyond the
//     frame limit;
//   - worker 2's connection is untouched: its heartbeat arrives, it never
//     fails, and a message posted to it afterwards still reaches it.

#include "fuzz_messages.hpp"

#include "node/control_links.hpp"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <variant>

using namespace lockstep;
using namespace lockstep::detail;

namespace {

using message = std::variant<heartbeat, collective_abort, collective_progress>;

/// What the control links should deliver for `data`: the messages before
/// the first frame that is cut short, too long or malformed.
std::vector<message> expected_messages(std::span<const std::uint8_t> data) {
  std::vector<message> out;
  std::size_t at = 0;
  while (data.size() - at >= frame_header_size) {
    const auto kind = load_le<std::uint32_t>(data, at);
    const auto length = load_le<std::uint64_t>(data, at + 4);
    if (length > max_control_payload || length > data.size() - at - frame_header_size)
      break;
    const frame f{kind, {data.begin() + static_cast<std::ptrdiff_t>(at + frame_header_size),
                         data.begin() + static_cast<std::ptrdiff_t>(at + frame_header_size + length)}};
    try {
      if (kind == static_cast<std::uint32_t>(control_kind::collective_abort))
        out.emplace_back(decode_control<collective_abort>(f));
      else if (kind == static_cast<std::uint32_t>(control_kind::collective_progress))
        out.emplace_back(decode_control<collective_progress>(f));
      else
        out.emplace_back(decode_control<heartbeat>(f));
    } catch (const bad_control_message&) {
      break;
    }
    at += frame_header_size + length;
  }
  return out;
}

std::optional<message> as_message(const control_event& e) {
  return std::visit(
    [](const auto& what) -> std::optional<message> {
      if constexpr (std::is_same_v<std::decay_t<decltype(what)>, std::string>)
        return std::nullopt;
      else
        return message{what};
    },
    e.what);
}

struct inbox {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<control_event> events;

  bool failed(std::uint32_t peer) {
    for (const auto& e : events)
      if (e.peer == peer && std::holds_alternative<std::string>(e.what))
        return true;
    return false;
  }
  std::size_t count(std::uint32_t peer) {
    return static_cast<std::size_t>(
      std::count_if(events.begin(), events.end(), [&](const auto& e) { return e.peer == peer; }));
  }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> input(data, size);
  boost::asio::io_context context;
  auto [to_fuzzed, fuzzed] = fuzz::connected_pair(context);
  auto [to_healthy, healthy] = fuzz::connected_pair(context);
  const auto healthy_beat = fuzz::sample_heartbeat(1);
  send_control(healthy, healthy_beat, fuzz::hang_deadline());
  fuzz::send_then_close(fuzzed, input);

  std::vector<tcp_socket> control;
  control.emplace_back(context); // the coordinator's own slot
  control.push_back(std::move(to_fuzzed));
  control.push_back(std::move(to_healthy));
  inbox box;
  {
    control_links links(0, std::move(control), std::chrono::seconds{10});
    links.start([&](control_event e) {
      std::lock_guard lock{box.mutex};
      box.events.push_back(std::move(e));
      box.arrived.notify_all();
    });
    std::unique_lock lock{box.mutex};
    if (!box.arrived.wait_for(lock, std::chrono::seconds{10},
                              [&] { return box.failed(1) && box.count(2) >= 1; }))
      fuzz::broken("the control links did not deliver worker 1's failure and worker 2's "
                   "heartbeat within 10 s (a hang)");
    lock.unlock();
    links.post(2, heartbeat{0, fuzz::generation, 5, 0});
    links.stop();
  }

  // Worker 1: the messages a plain reading finds, then one failure.
  const auto expected = expected_messages(input);
  std::vector<control_event> from_fuzzed;
  for (auto& e : box.events)
    if (e.peer == 1)
      from_fuzzed.push_back(std::move(e));
  if (from_fuzzed.size() != expected.size() + 1)
    fuzz::broken("worker 1's connection delivered " + std::to_string(from_fuzzed.size())
                 + " events; its bytes hold " + std::to_string(expected.size())
                 + " whole messages, and one failure should follow");
  for (std::size_t i = 0; i < expected.size(); ++i)
    if (as_message(from_fuzzed[i]) != expected[i])
      fuzz::broken("worker 1's message " + std::to_string(i) + " differs from its bytes'");
  if (as_message(from_fuzzed.back()))
    fuzz::broken("worker 1's last event is a message, not the failure");

  // Worker 2: its heartbeat only, and the one posted to it arrives.
  for (const auto& e : box.events)
    if (e.peer == 2 && as_message(e) != message{healthy_beat})
      fuzz::broken("worker 2's connection delivered something other than its heartbeat "
                   "(a malformed frame on worker 1's connection reached it)");
  if (box.count(2) != 1)
    fuzz::broken("worker 2's heartbeat arrived " + std::to_string(box.count(2)) + " times");
  try {
    if (!(receive_control<heartbeat>(healthy, fuzz::hang_deadline())
          == heartbeat{0, fuzz::generation, 5, 0}))
      fuzz::broken("worker 2 received another heartbeat than the one posted");
  } catch (const std::exception& e) {
    fuzz::broken(std::string("worker 2 did not receive the heartbeat posted to it: ") + e.what());
  }
  return 0;
}

std::vector<std::vector<std::uint8_t>> lockstep_fuzz_seeds() {
  const auto beat = fuzz::frame_bytes(fuzz::sample_heartbeat(1));
  const auto abort = fuzz::frame_bytes(fuzz::sample_abort());
  const auto progress = fuzz::frame_bytes(fuzz::sample_progress());
  auto all = beat;
  all.insert(all.end(), abort.begin(), abort.end());
  all.insert(all.end(), progress.begin(), progress.end());
  const auto goodbye = fuzz::frame_bytes(fuzz::sample_heartbeat(0));
  all.insert(all.end(), goodbye.begin(), goodbye.end());
  // A frame whose length prefix is 2^40: the links drop it before allocating.
  auto huge = fuzz::raw_frame(4, {});
  store_le(huge.data() + 4, std::uint64_t{1} << 40);
  return {beat, abort, progress, all, huge};
}
