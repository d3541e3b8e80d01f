#pragma once

// Every message of lockstep's actor protocol, in one place.
//
// Plain data messages (input_demand) have an inspect() next to them.
// In-process messages carry a replica function, a merge function or an
// exception: closures and exception_ptrs have no wire format, so these types
// are local-only (CAF_ALLOW_UNSAFE_MESSAGE_TYPE) and never registered with
// the network layer. The multi-worker protocol adds serialisable messages
// with inspect() here when it lands.
//
// Sequence numbers: the coordinator numbers every `run` (nested runs inside a
// merge function get larger numbers). Replicas echo the number, so a late
// message from a timed-out call is recognised and discarded.

#include "lockstep/replica_context.hpp"
#include "lockstep/strategy.hpp"

#include "variables/variable_creation.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>

#include <any>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>

namespace lockstep::actors {

/// coordinator -> replica: run `fn` as call `seq`.
struct run_message {
  std::uint64_t seq;
  std::shared_ptr<const detail::replica_function> fn;
  /// The call's timeout; a replica waits twice as long for a merge result.
  std::chrono::milliseconds timeout;
  /// Where the call's replicas meet to create variables (shared by all).
  std::shared_ptr<detail::creation_rendezvous> creations;
};

/// replica -> coordinator: call `seq` ended on `replica`, with a value, an
/// exception, or unwound because the coordinator aborted it.
struct replica_result {
  std::uint64_t seq;
  std::size_t replica;
  std::any value;
  std::exception_ptr error;
  bool aborted = false;
};

/// replica -> coordinator: `replica` paused in merge_call during call `seq`.
struct merge_request {
  std::uint64_t seq;
  std::size_t replica;
  std::any args;
  std::shared_ptr<const detail::merge_function> fn;
};

/// coordinator -> replica: the replica's slice of the merge result.
struct merge_reply {
  std::uint64_t seq;
  std::any value;
};

/// coordinator -> replica: unwind the merge_call waits of calls
/// `first_seq`..`last_seq` (another replica failed, or the call timed out).
struct abort_message {
  std::uint64_t first_seq;
  std::uint64_t last_seq;
};

/// consumer -> input actor: produce `count` more elements (credit-based flow
/// control of a prefetch buffer; see input_actor.hpp).
struct input_demand {
  std::uint64_t count;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, input_demand& x) {
  return f(caf::meta::type_name("input_demand"), x.count);
}

} // namespace lockstep::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::run_message)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::replica_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::merge_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::merge_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::abort_message)
