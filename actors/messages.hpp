#pragma once

// The messages of the actors layer: the replica protocol between the
// strategy's actor and its replica actors, and the input actor's demand.
// The node's messages, which cross processes, are node/wire_messages.hpp
// (with their wire format in node/wire_format.hpp) and node/node_actor.hpp;
// docs/messages.md lists them all.
//
// LOCAL ONLY (never leaves the process): run_message, replica_result,
// merge_request, merge_reply and abort_message carry a replica function, a
// merge function, std::any values, exception_ptrs or a pointer to shared
// state: closures and pointers have no wire format, so these types are
// CAF_ALLOW_UNSAFE_MESSAGE_TYPE, have no inspect() and are never registered.
// (abort_message holds only numbers, but it names calls of this process's
// strategy actor: it stays local with the protocol it belongs to.) Between
// processes, results travel as the node's wire messages instead (an
// exception as an error_value, a merge's values on the data plane).
//
// Serialisable: input_demand, registered with the actor system as
// "lockstep.input_demand" by input_actor.cpp (add_actor_message_types).
//
// Sequence numbers: see replication/call_numbering.hpp.

#include "lockstep/detail/replica_calls.hpp"

#include "variables/variable_creation.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>

#include <any>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>

namespace lockstep::actors {

// == local only: never leaves the process ======================================

/// strategy actor -> replica: run `fn` as call `seq`.
struct run_message {
  std::uint64_t seq;
  std::shared_ptr<const detail::replica_function> fn;
  /// The call's timeout; a replica waits twice as long for a merge result.
  std::chrono::milliseconds timeout;
  /// Where the call's replicas meet to create variables (shared by all).
  std::shared_ptr<detail::creation_rendezvous> creations;
};

/// replica -> strategy actor: call `seq` ended on `replica`, with a value, an
/// exception, or unwound because the strategy actor aborted it.
struct replica_result {
  std::uint64_t seq;
  std::size_t replica;
  std::any value;
  std::exception_ptr error;
  bool aborted = false;
};

/// replica -> strategy actor: `replica` paused in merge_call during call `seq`.
struct merge_request {
  std::uint64_t seq;
  std::size_t replica;
  std::any args;
  std::shared_ptr<const detail::merge_function> fn;
};

/// strategy actor -> replica: the replica's slice of the merge result.
struct merge_reply {
  std::uint64_t seq;
  std::any value;
};

/// strategy actor -> replica: unwind the merge_call waits of calls
/// `first_seq`..`last_seq` (another replica failed, or the call timed out).
struct abort_message {
  std::uint64_t first_seq;
  std::uint64_t last_seq;
};

// == serialisable =================================================================

/// consumer -> input actor: produce `count` more elements (credit-based flow
/// control of a prefetch buffer; see input_actor.hpp).
struct input_demand {
  std::uint64_t count;

  friend bool operator==(const input_demand&, const input_demand&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, input_demand& x) {
  return f(caf::meta::type_name("input_demand"), x.count);
}

/// Adds input_demand to `config`, as "lockstep.input_demand".
void add_actor_message_types(caf::actor_system_config& config);

} // namespace lockstep::actors

// Local only: see the file comment.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::run_message)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::replica_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::merge_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::merge_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::abort_message)
