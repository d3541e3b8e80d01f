#pragma once

// node_actor: this process's node in a multi-worker job, on the control
// plane: it detects lost peers, and finds out which collective each worker
// reached when one times out. control_links (src/node) delivers it the
// messages its peers send (heartbeat, collective_abort,
// collective_progress: the wire types of wire_messages.hpp) and the
// failures of their connections; it posts its own through control_links.
//
//   receives  heartbeat          a peer is alive (sequence 0: it left in
//                                good order and is not lost)
//             collective_abort   the group is broken (from the coordinator:
//                                it names the lost rank or the collective
//                                that timed out; from a worker, to the
//                                coordinator: that worker's collective
//                                timed out, which it passes on)
//             collective_progress  a question, an answer or the collected
//                                answers (wire_messages.hpp)
//             link_failure       a peer's connection closed or failed
//             tick_atom          its own, every heartbeat interval: sends
//                                heartbeats, checks each peer's silence
//                                against peer_timeout, and its own: a node
//                                that itself did not run for peer_timeout
//                                (a stopped or frozen process) was cut off
//             progress_atom, seq  the ring, when collective `seq` passed
//                                its deadline here: replies with a
//                                collective_progress, every worker's
//                                last started collective by rank
//             answer_atom, asker, seq  its own: the coordinator's wait for
//                                the answers to a question is over
//             abort_atom, error  the ring: a collective of this worker
//                                timed out, which breaks the group; the
//                                node tells the others
//             stop_atom          says goodbye to the peers still there when
//                                the group is whole, replies whether it
//                                was, then quits (the node's destructor
//                                asks)
// (the local ones, link_failure and the atoms, are below)
//
// On the first loss it logs it, tells the other workers when it is the
// coordinator (a collective_abort, sequence 0, with a peer_lost_error; the
// lost worker itself, should it still read, hears that it was cut off),
// and calls `on_lost` once, on its own thread: the node breaks its ring
// there, so that every pending and later collective raises that error.

#include "node/wire_format.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lockstep::detail {

/// control links -> node actor: the connection with `peer` closed or
/// failed.
struct link_failure {
  std::uint32_t peer;
  std::string reason;
};

/// The node actor's own beat, and the request that stops it.
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
/// To the node actor: (progress_atom, seq) asks which collective between
/// the workers each worker reached (a collective_progress answers);
/// (answer_atom, asker, seq) is the coordinator's own deadline for the
/// answers to that question; (abort_atom, error_value) tells it that a
/// collective of this worker failed so that the group is broken (the
/// node tells the others).
using progress_atom = caf::atom_constant<caf::atom("progress")>;
using answer_atom = caf::atom_constant<caf::atom("answer")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;

struct node_actor_settings {
  std::uint32_t rank = 0;
  /// The ranks this node hears from (every worker for the coordinator,
  /// the coordinator for the others).
  std::vector<std::uint32_t> peers;
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds peer_timeout{10000};
  /// How long the coordinator waits for the workers' answers to a
  /// progress question before it answers with what it has.
  std::chrono::milliseconds progress_wait{500};
  /// Sends a heartbeat, an abort or a progress message to one peer.
  std::function<void(std::uint32_t peer, const control_post&)> send;
  /// The last collective between the workers this worker started (0 for
  /// none), for progress questions; null: 0.
  std::function<std::uint64_t()> reached;
  /// Runs once, with the error every later collective raises
  /// (peer_lost_error "worker 2 was lost: ...", or the timeout_error of a
  /// collective that timed out).
  std::function<void(const error_value&)> on_lost;
};

/// Spawns a node actor (detached: its sends may wait for a slow peer).
/// resource_error when its thread cannot start (actor_system/detached_actor.hpp).
caf::actor spawn_node_actor(caf::actor_system& system, node_actor_settings settings);

/// Asks `node` to stop: true when its group was whole (no peer lost) and
/// it said goodbye; false also when it did not answer within `timeout`.
bool stop_node_actor(caf::actor_system& system, const caf::actor& node,
                     std::chrono::milliseconds timeout);

} // namespace lockstep::detail

// Local only: what this process saw of its own connection.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::detail::link_failure)
