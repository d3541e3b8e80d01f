#pragma once

// Every message of lockstep's actor protocol, in one place: what may cross a
// process (serialisable, registered with CAF) and what must stay in it.
//
// Serialisable messages are the plain structs of actors/wire_messages.hpp
// (no CAF there) and input_demand below; their inspect() functions, the wire
// format, are in this file, and register_messages() makes each known to an
// actor system under the name "lockstep.<type>" (actor_system.cpp calls it).
// Errors travel as values (runtime/error_value.hpp).
//
// LOCAL ONLY (never leaves the process): run_message, replica_result,
// merge_request, merge_reply and abort_message carry a replica function, a
// merge function, std::any values, exception_ptrs or a pointer to shared
// state: closures and pointers have no wire format, so these types are
// CAF_ALLOW_UNSAFE_MESSAGE_TYPE, have no inspect() and are never registered.
// (abort_message holds only numbers, but it names calls of this process's
// coordinator: it stays local with the protocol it belongs to; so does
// link_failure, what this process saw of its own connection.) Between
// processes, results travel as the wire messages instead (an exception as
// an error_value, a merge's values on the data plane).
//
// docs/messages.md lists them all.
//
// Sequence numbers: see replication/call_numbering.hpp.

#include "lockstep/detail/replica_calls.hpp"

#include "variables/variable_creation.hpp"

#include "node/wire_messages.hpp"
#include "runtime/error_value.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>

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

/// control links -> node actor: the connection with `peer` closed or
/// failed (actors/node_actor.hpp).
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

// -- the wire format of actors/wire_messages.hpp -------------------------------

/// An enum field on the wire: its underlying integer, checked when read (a
/// value that names no enumerator fails with sec::invalid_argument instead
/// of making an enum value nobody handles); printed by name.
template <class Enum>
struct wire_enum {
  Enum& value;

  friend std::string to_string(const wire_enum& x) {
    if (!is_valid(x.value))
      return "<invalid " + std::to_string(static_cast<unsigned>(x.value)) + ">";
    return std::string(to_string(x.value));
  }
};

template <class Enum>
wire_enum(Enum&) -> wire_enum<Enum>;

template <class Inspector, class Enum>
typename Inspector::result_type inspect(Inspector& f, wire_enum<Enum>& x) {
  auto raw = static_cast<std::underlying_type_t<Enum>>(x.value);
  return f(raw, caf::meta::load_callback([&]() -> caf::error {
             const auto value = static_cast<Enum>(raw);
             if (!is_valid(value))
               return caf::sec::invalid_argument;
             x.value = value;
             return caf::none;
           }));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, agreed_setting& x) {
  return f(caf::meta::type_name("agreed_setting"), x.name, x.value);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_request& x) {
  return f(caf::meta::type_name("join_request"), x.protocol_version, x.job_id, x.rank,
           x.world_size, x.generation, x.local_replicas, x.host, x.port, x.host_hash,
           x.settings, x.proof);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_reply& x) {
  return f(caf::meta::type_name("join_reply"), x.accepted, x.generation, x.proof, x.refusal);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, member& x) {
  return f(caf::meta::type_name("member"), x.rank, x.host, x.port, x.local_replicas,
           x.host_hash);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, membership& x) {
  return f(caf::meta::type_name("membership"), x.job_id, x.generation, x.members);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, heartbeat& x) {
  return f(caf::meta::type_name("heartbeat"), x.rank, x.generation, x.sequence, x.sent_at_ns);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, collective_control& x) {
  return f(caf::meta::type_name("collective_control"), x.rank, x.generation, x.seq, x.op,
           x.reduction, wire_enum{x.dtype}, x.shape, x.tag, x.tensors, x.layout,
           x.batch_tensors, x.batch_dtypes, x.batch_shapes, x.epoch, x.inline_data, x.slice);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, collective_abort& x) {
  return f(caf::meta::type_name("collective_abort"), x.rank, x.generation, x.seq, x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, collective_progress& x) {
  return f(caf::meta::type_name("collective_progress"), x.asker, x.generation, x.seq, x.reached);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, variable_created& x) {
  return f(caf::meta::type_name("variable_created"), x.generation, x.seq, x.index, x.replica,
           x.name, wire_enum{x.dtype}, x.shape, wire_enum{x.synchronization},
           wire_enum{x.aggregation}, x.trainable);
}

// -- registration -------------------------------------------------------------------

/// Makes every serialisable message known to the actor system `config`
/// builds, as "lockstep.<type>" ("lockstep.join_request", ...), so that CAF
/// can serialise messages holding them. Local-only messages are not
/// registered.
void register_messages(caf::actor_system_config& config);

} // namespace lockstep::actors

namespace lockstep::detail {

// Next to error_value's namespace, where CAF looks for it.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, error_value& x) {
  return f(caf::meta::type_name("error_value"), actors::wire_enum{x.kind}, x.message,
           x.type_name);
}

} // namespace lockstep::detail

// Local only: see the file comment.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::run_message)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::replica_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::merge_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::merge_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::abort_message)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(lockstep::actors::link_failure)
