#pragma once

// The shared state behind a variable handle: its description and its
// copies, each a variable copy (variables/variable_copy.hpp). Internal.

#include "replication/strategy_state.hpp"
#include "variables/variable_copy.hpp"

#include "lockstep/variable.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::detail {

enum class variable_kind { plain, mirrored, sync_on_read };

struct variable_state : std::enable_shared_from_this<variable_state> {
  using time_point = std::chrono::steady_clock::time_point;

  /// Keeps the strategy (and its device executors) alive.
  std::shared_ptr<strategy_state> strategy;
  variable_kind kind;
  std::string name;
  lockstep::dtype type;
  shape_t shape;
  variable_synchronization synchronization;
  variable_aggregation aggregation;
  bool trainable;
  /// Copy i lives on devices[i], which is the strategy's device i (replica
  /// i of a mirrored strategy works on copy i).
  std::vector<device_spec> devices;
  std::vector<std::shared_ptr<detail::variable_copy>> copies;
  /// TF's names of the copies: the name, then "<name>/replica_<i>".
  std::vector<std::string> copy_names;
  /// The last write number taken; writes post to every copy in this order.
  std::atomic<std::uint64_t> issued{0};
  /// The current failure was rethrown once; later checks report divergence.
  std::atomic<bool> failure_reported{false};


  time_point deadline() const { return std::chrono::steady_clock::now() + strategy->timeout; }

  /// Throws unless this thread may write every copy: the strategy's
  /// cross-replica or the default context (any context for variables of
  /// the default strategy).
  void require_cross_replica_context() const;

  /// Takes the next write number and posts `write` to every copy.
  std::uint64_t post(std::shared_ptr<const detail::variable_write> write);

  /// Waits until every copy applied the writes posted so far, so that a
  /// read's check_failures sees them all. Does nothing inside an update: the
  /// update's copy is all it reads, and waiting for another device's
  /// executor there could deadlock (it may run an update waiting for this one).
  void await_posted();

  /// A synchronisation point: rethrows a failed posted write once, with its
  /// type; afterwards, while the copies may differ, every check throws
  /// value_error naming the write and the copy.
  void check_failures();

  /// Rethrows the failure of write `seq` on any copy (after waiting for it).
  void check_write(std::uint64_t seq);
};

/// The library's way to variable's private constructor.
struct variable_access {
  static variable make(std::shared_ptr<variable_state> state,
                       std::optional<std::size_t> component) {
    return variable{std::move(state), component};
  }
};

/// Creates a variable for the current context (the variable creator).
variable create_variable(std::optional<tensor> initial_value, variable_options options);

/// The copy a read or write in the current context touches alone: the
/// component's, the update context's, or the replica's; unset in
/// cross-replica (or default) context.
std::optional<std::size_t> local_copy(const variable& var);

} // namespace lockstep::detail
