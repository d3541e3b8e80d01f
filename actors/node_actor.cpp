#include "actors/node_actor.hpp"

#include "actors/detached_actor.hpp"
#include "actors/messages.hpp"
#include "runtime/log.hpp"

#include "lockstep/error.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

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

class node_actor final : public detached_actor {
public:
  node_actor(caf::actor_config& cfg, node_actor_settings settings) : detached_actor(cfg) {
    const auto now = node_clock::now();
    for (const auto rank : settings.peers)
      state_.peers[rank] = {now};
    state_.settings = std::move(settings);
  }

  caf::behavior make_behavior() override {
    send(this, tick_atom::value);
    return {
      [this](tick_atom) {
        if (!state_.lost.empty())
          return; // nothing more to watch
        state_.beat();
        delayed_send(this, state_.settings.heartbeat_interval, tick_atom::value);
      },
      [this](const heartbeat& beat) {
        const auto peer = state_.peers.find(beat.rank);
        if (peer == state_.peers.end())
          return;
        peer->second.last_heard = node_clock::now();
        if (beat.sequence == 0) {
          LOCKSTEP_LOG_DEBUG("worker {}: {} left", state_.settings.rank, who(beat.rank));
          peer->second.gone = true;
        }
      },
      [this](const collective_abort& abort) { state_.declare_lost(abort.error.message); },
      [this](const link_failure& failure) {
        const auto peer = state_.peers.find(failure.peer);
        if (peer != state_.peers.end() && !peer->second.gone)
          state_.declare_lost(who(failure.peer) + " was lost: " + failure.reason);
      },
      [this](stop_atom) {
        const bool whole = state_.lost.empty();
        if (whole) // a program that ends in good order is not lost
          for (const auto& [rank, peer] : state_.peers)
            if (!peer.gone)
              state_.settings.send(rank, heartbeat{state_.settings.rank, 0, 0, 0});
        quit();
        return whole;
      },
    };
  }

  const char* name() const override { return "node_actor"; }

private:
  node_state state_;
};

} // namespace

caf::actor spawn_node_actor(caf::actor_system& system, node_actor_settings settings) {
  return spawn_detached<node_actor>(system, "the node actor (multi-worker heartbeats)",
                                    std::move(settings));
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
