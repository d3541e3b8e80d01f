#pragma once

// Variable creation inside replica functions (TF's shared_variable_creator):
// replica 0 creates each variable, the other replicas receive the one
// replica 0 created at the same creation index, after checking that they
// asked for the same canonical name.

#include "lockstep/variable.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace lockstep::detail {

/// The variables replica 0 created during one `run`, in order.
class creation_rendezvous {
public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Replica 0 created its next variable.
  void publish(const variable& var);

  /// Replica 0 paused in merge_call or returned (true), or resumed (false):
  /// while paused it creates nothing, so replicas waiting for a variable it
  /// has not created fail at once, as in TF where replicas run in turn.
  void set_first_replica_paused(bool paused);

  /// The variable replica 0 created at `index`; context_error (TF's text)
  /// if its canonical name differs from `name`'s or replica 0 paused
  /// without creating it; timeout_error at `deadline`.
  variable await(std::size_t index, const std::string& name, const std::string& device,
                 time_point deadline);

private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<variable> created_;
  bool paused_ = false;
  std::size_t waiting_ = 0;
};

/// What the replica function on this thread has created so far.
struct replica_creations {
  creation_rendezvous* rendezvous;
  std::size_t replica;
  std::size_t next_index = 0;
};

/// The creations of the replica function running on this thread; nullptr
/// outside replica functions of a mirrored strategy.
replica_creations*& current_replica_creations() noexcept;

/// colocate_vars_with: variables created until the matching pop are placed
/// on `devices` (this thread only).
void push_colocation(std::vector<device_spec> devices);
void pop_colocation() noexcept;

} // namespace lockstep::detail
