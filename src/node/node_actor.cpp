#include "node/node_actor.hpp"

#include "actor_system/detached_actor.hpp"
#include "runtime/log.hpp"

#include "lockstep/error.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <algorithm>
#include <map>

namespace lockstep::detail {

namespace {

using node_clock = std::chrono::steady_clock;

/// No rank: for fail()'s optional ranks.
constexpr std::uint32_t nobody = ~std::uint32_t{0};

std::string who(std::uint32_t rank) {
  return rank == 0 ? "worker 0 (the coordinator)" : "worker " + std::to_string(rank);
}

std::string in_ms(node_clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}

error_value peer_lost(std::string message) {
  return {error_kind::peer_lost_error, std::move(message), "lockstep::peer_lost_error"};
}

struct peer_state {
  node_clock::time_point last_heard;
  bool gone = false; // said goodbye
};

/// A progress question whose answers the coordinator collects.
struct question {
  std::uint32_t asker = 0;
  std::uint64_t seq = 0;
  std::vector<std::uint64_t> reached; // by rank; no_answer until answered
};

struct node_state {
  caf::event_based_actor* self = nullptr;
  node_actor_settings settings;
  std::map<std::uint32_t, peer_state> peers;
  std::uint64_t sequence = 1;
  node_clock::time_point last_tick;
  std::string lost; // empty while the group is whole
  /// The coordinator's open questions.
  std::vector<question> questions;
  /// This worker's own questions, by seq, with who waits for the answers.
  std::multimap<std::uint64_t, caf::typed_response_promise<collective_progress>> asked;

  /// The first failure of the group: logged, then, when `announce`, passed
  /// on (a worker tells the coordinator; the coordinator tells every worker
  /// but `origin`, which knows, and worker `lost_rank`, should it still
  /// read, hears `to_lost` instead), then on_lost.
  void fail(const error_value& why, bool announce, std::uint32_t origin = nobody,
            std::uint32_t lost_rank = nobody, const std::string& to_lost = {}) {
    if (!lost.empty())
      return;
    lost = why.message;
    LOCKSTEP_LOG_ERROR("worker {}: {}", settings.rank, why.message);
    if (announce) {
      const collective_abort abort{settings.rank, 0, 0, why};
      if (settings.rank != 0)
        settings.send(0, abort);
      else
        for (const auto& [rank, peer] : peers) {
          if (peer.gone || rank == origin)
            continue;
          if (rank == lost_rank)
            settings.send(rank, collective_abort{settings.rank, 0, 0, peer_lost(to_lost)});
          else
            settings.send(rank, abort);
        }
    }
    settings.on_lost(why);
  }

  /// Peer `rank` is lost for `cause`; the coordinator tells the others,
  /// and `rank` itself that it was cut off for `cause_to_it`.
  void lose(std::uint32_t rank, const std::string& cause, const std::string& cause_to_it) {
    fail(peer_lost(who(rank) + " was lost: " + cause), settings.rank == 0, nobody, rank,
         "this worker (rank " + std::to_string(rank) + ") was cut off from the job: "
           + who(settings.rank) + " " + cause_to_it);
  }

  void beat() {
    const auto now = node_clock::now();
    const auto gap = now - last_tick;
    last_tick = now;
    if (gap >= settings.peer_timeout)
      // This node itself did not run for peer_timeout: its peers heard
      // nothing from it for as long and went on without it, and their
      // silence now is its own.
      return fail(peer_lost("this worker (rank " + std::to_string(settings.rank)
                            + ") was cut off from the job: it did not run for " + in_ms(gap)
                            + " (the process was stopped, frozen or starved of CPU), longer "
                              "than peer_timeout ("
                            + in_ms(settings.peer_timeout)
                            + "), so the other workers dropped it and went on without it"),
                  false);
    const heartbeat beat{settings.rank, 0, sequence++,
                         std::chrono::duration_cast<std::chrono::nanoseconds>(
                           now.time_since_epoch())
                           .count()};
    for (const auto& [rank, peer] : peers)
      if (!peer.gone)
        settings.send(rank, beat);
    const auto timeout = in_ms(settings.peer_timeout);
    for (const auto& [rank, peer] : peers)
      if (!peer.gone && now - peer.last_heard >= settings.peer_timeout)
        return lose(rank,
                    "no heartbeat for " + timeout
                      + " (peer_timeout): the process is frozen or unreachable",
                    "heard no heartbeat from it for " + timeout
                      + " (peer_timeout) and the job went on without it: was the process "
                        "stopped or frozen, or the network cut?");
  }

  // -- progress questions ----------------------------------------------------------

  std::uint64_t reached_here() const {
    return settings.reached ? settings.reached() : 0;
  }

  /// The coordinator asks every worker which collective it reached, for
  /// `asker`'s collective `seq`, and answers it once all answered or
  /// progress_wait passed.
  void ask(std::uint32_t asker, std::uint64_t seq) {
    for (const auto& q : questions)
      if (q.asker == asker && q.seq == seq)
        return;
    std::uint32_t world = settings.rank + 1;
    for (const auto& [rank, peer] : peers)
      world = std::max(world, rank + 1);
    question q{asker, seq, std::vector<std::uint64_t>(world, collective_progress::no_answer)};
    q.reached[settings.rank] = reached_here();
    questions.push_back(std::move(q));
    for (const auto& [rank, peer] : peers)
      if (!peer.gone)
        settings.send(rank, collective_progress{asker, 0, seq, {}});
    self->delayed_send(self, settings.progress_wait, answer_atom::value, asker, seq);
    if (peers.empty())
      answer(asker, seq);
  }

  /// Worker `from` answered a question of the coordinator's.
  void note(std::uint32_t from, const collective_progress& answer_of_from) {
    for (auto& q : questions)
      if (q.asker == answer_of_from.asker && q.seq == answer_of_from.seq
          && from < q.reached.size() && !answer_of_from.reached.empty()) {
        q.reached[from] = answer_of_from.reached.front();
        if (std::ranges::find(q.reached, collective_progress::no_answer) == q.reached.end())
          answer(q.asker, q.seq);
        return;
      }
  }

  /// Sends the answers collected for (`asker`, `seq`), if still open.
  void answer(std::uint32_t asker, std::uint64_t seq) {
    const auto q = std::ranges::find_if(
      questions, [&](const question& x) { return x.asker == asker && x.seq == seq; });
    if (q == questions.end())
      return;
    collective_progress answers{asker, 0, seq, std::move(q->reached)};
    questions.erase(q);
    if (asker == settings.rank)
      deliver(answers);
    else
      settings.send(asker, answers);
  }

  /// The answers to this worker's own question.
  void deliver(const collective_progress& answers) {
    const auto [first, last] = asked.equal_range(answers.seq);
    for (auto i = first; i != last; ++i)
      i->second.deliver(answers);
    asked.erase(first, last);
  }
};

class node_actor final : public detached_actor {
public:
  node_actor(caf::actor_config& cfg, node_actor_settings settings) : detached_actor(cfg) {
    const auto now = node_clock::now();
    for (const auto rank : settings.peers)
      state_.peers[rank] = {now};
    state_.self = this;
    state_.settings = std::move(settings);
    state_.last_tick = now;
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
      // From the coordinator: the group is broken. To the coordinator, from
      // worker abort.rank: its collective timed out; the others hear it too.
      [this](const collective_abort& abort) {
        state_.fail(abort.error, state_.settings.rank == 0, abort.rank);
      },
      [this](abort_atom, const error_value& why) { state_.fail(why, true); },
      [this](progress_atom, std::uint64_t seq) -> caf::result<collective_progress> {
        auto promise = make_response_promise<collective_progress>();
        state_.asked.emplace(seq, promise);
        if (state_.settings.rank == 0)
          state_.ask(state_.settings.rank, seq);
        else
          state_.settings.send(0, collective_progress{state_.settings.rank, 0, seq, {}});
        return promise;
      },
      [this](answer_atom, std::uint32_t asker, std::uint64_t seq) { state_.answer(asker, seq); },
      // A question (`reached` empty), an answer, or the answers; `from`: the
      // connection it came on.
      [this](std::uint32_t from, const collective_progress& progress) {
        if (state_.settings.rank == 0) {
          if (progress.reached.empty())
            state_.ask(from, progress.seq); // the asker is the connection's rank
          else
            state_.note(from, progress);
        } else if (progress.reached.empty()) {
          state_.settings.send(0, collective_progress{progress.asker, progress.generation,
                                                      progress.seq, {state_.reached_here()}});
        } else {
          state_.deliver(progress);
        }
      },
      [this](const link_failure& failure) {
        const auto peer = state_.peers.find(failure.peer);
        if (peer != state_.peers.end() && !peer->second.gone)
          state_.lose(failure.peer, failure.reason,
                      "lost its connection to it (" + failure.reason + ")");
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

} // namespace lockstep::detail
