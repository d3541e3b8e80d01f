#pragma once

// The vocabulary of a replica call, shared by the strategy API above and the
// executors below it (the strategy actor and replica actors, the inline
// executor): the type-erased replica and merge functions and the channel a
// replica's merge_call goes through. It names the API's strategy and
// replica_context only as incomplete types, so the layers below the API
// (src/replication, actors/) use it without including lockstep/strategy.hpp
// or lockstep/replica_context.hpp, which include it.

#include <any>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace lockstep {

class replica_context;
class strategy;

namespace detail {

struct strategy_state;

/// A replica function with its arguments bound; returns the replica's result.
using replica_function = std::function<std::any(replica_context&)>;

/// A merge function with its argument types erased: takes the strategy's
/// state (the merge function makes the strategy handle it passes on) and
/// one argument pack per replica, returns one result per replica.
using merge_function
  = std::function<std::vector<std::any>(strategy_state&, std::vector<std::any>&)>;

/// Where a replica's `merge_call` goes: the strategy actor of an actor-based
/// strategy, or a direct call for single-replica strategies. It also holds
/// the numbering of the replica's collectives, which its executor sets per
/// call: it belongs to the replica's thread, not to one call (a nested run
/// leaves it where its collectives ended).
class merge_channel {
public:
  virtual ~merge_channel() = default;

  /// Passes this replica's `args` to the merge and waits for its share of
  /// the result. Only replica 0 passes its merge function; the others pass
  /// nullptr.
  virtual std::any merge(std::any args, std::shared_ptr<const merge_function> fn) = 0;

  /// The replica's collectives in call `epoch` get sequence numbers from
  /// `first_seq` up and wait at most `timeout`; `first_seq` only ever rises.
  void begin_collectives(std::uint64_t first_seq, std::chrono::milliseconds timeout,
                         std::uint64_t epoch) noexcept {
    collective_floor_ = first_seq > collective_floor_ ? first_seq : collective_floor_;
    collective_timeout_ = timeout;
    collective_epoch_ = epoch;
  }

  /// The lowest sequence number the replica's next collective may take.
  std::uint64_t collective_floor() const noexcept { return collective_floor_; }
  /// The current call's deadline for a collective.
  std::chrono::milliseconds collective_timeout() const noexcept { return collective_timeout_; }
  /// The current call (run) the replica's collectives belong to.
  std::uint64_t collective_epoch() const noexcept { return collective_epoch_; }

private:
  std::uint64_t collective_floor_ = 0;
  std::chrono::milliseconds collective_timeout_{0};
  std::uint64_t collective_epoch_ = 0;
};

} // namespace detail

} // namespace lockstep
