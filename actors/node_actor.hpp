#pragma once

// node_actor: this process's node in a multi-worker job, on the control
// plane: it detects lost peers. control_links (src/node) delivers it the
// messages its peers send (heartbeat, collective_abort: the wire types of
// actors/wire_messages.hpp) and the failures of their connections; it
// posts its own through control_links.
//
//   receives  heartbeat          a peer is alive (sequence 0: it left in
//                                good order and is not lost)
//             collective_abort   from the coordinator, sequence 0: the
//                                group is broken (it names the lost rank)
//             link_failure       a peer's connection closed or failed
//             tick_atom          its own, every heartbeat interval: sends
//                                heartbeats, checks each peer's silence
//                                against peer_timeout
//             stop_atom          says goodbye to the peers still there when
//                                the group is whole, replies whether it
//                                was, then quits (the node's destructor
//                                asks)
// (the local ones, link_failure and the atoms, are in actors/messages.hpp)
//
// On the first loss it logs it, tells the other workers when it is the
// coordinator (a collective_abort, sequence 0, with a peer_lost_error), and
// calls `on_lost` once, on its own thread: the node breaks its ring there,
// so that every pending and later collective raises peer_lost_error.

#include "actors/wire_messages.hpp"

#include <caf/fwd.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lockstep::actors {

struct node_actor_settings {
  std::uint32_t rank = 0;
  /// The ranks this node hears from (every worker for the coordinator,
  /// the coordinator for the others).
  std::vector<std::uint32_t> peers;
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds peer_timeout{10000};
  /// Sends a heartbeat or an abort to one peer.
  std::function<void(std::uint32_t peer, const control_post&)> send;
  /// Runs once, with the reason ("worker 2 was lost: ...").
  std::function<void(const std::string&)> on_lost;
};

/// Spawns a node actor (detached: its sends may wait for a slow peer).
/// resource_error when its thread cannot start (actors/detached_actor.hpp).
caf::actor spawn_node_actor(caf::actor_system& system, node_actor_settings settings);

/// Asks `node` to stop: true when its group was whole (no peer lost) and
/// it said goodbye; false also when it did not answer within `timeout`.
bool stop_node_actor(caf::actor_system& system, const caf::actor& node,
                     std::chrono::milliseconds timeout);

} // namespace lockstep::actors
