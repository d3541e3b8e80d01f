#include "actors/node_actor.hpp"

#include "actors/messages.hpp"
#include "runtime/log.hpp"

#include "lockstep/error.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/spawn_options.hpp>

#include <algorithm>
#include <map>

namespace lockstep::actors {

namespace {

using node_clock = std::chrono::steady_clock;

std::string who(std::uint32_t rank) {
  return rank == 0 ? "worker 0 (the coordinator)" : "worker " + std::to_string(rank);
}

struct peer_state {
  node_clock::time_point last_heard;
  bool gone = false; // said goodbye
};

struct node_state {
  node_actor_settings settings;
  std::map<std::uint32_t, peer_state> peers;
  std::uint64_t sequence = 1;
  std::string lost; // empty while the group is whole

  /// The first loss: logged, passed on by the coordinator, then on_lost.
  void declare_lost(const std::string& reason) {
    if (!lost.empty())
      return;
    lost = reason;
    LOCKSTEP_LOG_ERROR("worker {}: {}", settings.rank, reason);
    if (settings.rank == 0) {
      collective_abort abort;
      abort.rank = settings.rank;
      abort.error = {error_kind::peer_lost_error, reason, "lockstep::peer_lost_error"};
      for (const auto& [rank, peer] : peers)
        if (!peer.gone)
          settings.send(rank, abort);
    }
    settings.on_lost(reason);
  }

  void beat() {
    const auto now = node_clock::now();
    const heartbeat beat{settings.rank, 0, sequence++,
                         std::chrono::duration_cast<std::chrono::nanoseconds>(
                           now.time_since_epoch())
                           .count()};
    for (const auto& [rank, peer] : peers)
      if (!peer.gone)
        settings.send(rank, beat);
    for (const auto& [rank, peer] : peers)
      if (!peer.gone && now - peer.last_heard >= settings.peer_timeout)
        return declare_lost(who(rank) + " was lost: no heartbeat for "
                            + std::to_string(settings.peer_timeout.count())
                            + " ms (peer_timeout): the process is frozen or unreachable");
  }
};

caf::behavior node_actor(caf::stateful_actor<node_state>* self, node_actor_settings settings) {
  auto& st = self->state;
  const auto now = node_clock::now();
  for (const auto rank : settings.peers)
    st.peers[rank] = {now};
  st.settings = std::move(settings);
  self->send(self, tick_atom::value);
  return {
    [self](tick_atom) {
      auto& st = self->state;
      if (!st.lost.empty())
        return; // nothing more to watch
      st.beat();
      self->delayed_send(self, st.settings.heartbeat_interval, tick_atom::value);
    },
    [self](const heartbeat& beat) {
      const auto peer = self->state.peers.find(beat.rank);
      if (peer == self->state.peers.end())
        return;
      peer->second.last_heard = node_clock::now();
      if (beat.sequence == 0) {
        LOCKSTEP_LOG_DEBUG("worker {}: {} left", self->state.settings.rank, who(beat.rank));
        peer->second.gone = true;
      }
    },
    [self](const collective_abort& abort) { self->state.declare_lost(abort.error.message); },
    [self](const link_failure& failure) {
      const auto peer = self->state.peers.find(failure.peer);
      if (peer != self->state.peers.end() && !peer->second.gone)
        self->state.declare_lost(who(failure.peer) + " was lost: " + failure.reason);
    },
    [self](stop_atom) {
      auto& st = self->state;
      const bool whole = st.lost.empty();
      if (whole) // a program that ends in good order is not lost
        for (const auto& [rank, peer] : st.peers)
          if (!peer.gone)
            st.settings.send(rank, heartbeat{st.settings.rank, 0, 0, 0});
      self->quit();
      return whole;
    },
  };
}

} // namespace

caf::actor spawn_node_actor(caf::actor_system& system, node_actor_settings settings) {
  return system.spawn<caf::detached>(node_actor, std::move(settings));
}

bool stop_node_actor(caf::actor_system& system, const caf::actor& node,
                     std::chrono::milliseconds timeout) {
  caf::scoped_actor self{system};
  bool whole = false;
  self->request(node, timeout, stop_atom::value)
    .receive([&](bool answer) { whole = answer; }, [](const caf::error&) {});
  return whole;
}

} // namespace lockstep::actors
