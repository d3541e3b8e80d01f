#pragma once

// The messages that may cross a process: what the processes of one program
// (one SPMD job, multi-worker) send each other. Plain structs of values
// (integers, strings, vectors of them, nested wire structs): no pointers,
// closures, std::any or exception_ptr, so every one can be serialised.
//
// No CAF here: their inspect() functions (the wire format) are in
// node/wire_format.hpp, and control_messages.cpp registers them with the
// actor system. So the rendezvous and the control links build and read
// these structs without seeing CAF.
//
// Wire rules: every field has a fixed width (no size_t), enums travel as
// their underlying integer and are checked when read (a value that names no
// enumerator fails to deserialise), fields are only ever appended to a
// message and a change of any message's layout bumps
// `wire_protocol_version`, which join_request carries.
//
// See docs/messages.md for the whole list and the protocol they serve.

#include "lockstep/dtype.hpp"
#include "lockstep/variable_policies.hpp"

#include "runtime/error_value.hpp"

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace lockstep::detail {

struct collective_fingerprint;

/// The layout of the messages in this file; join_request carries it and a
/// coordinator refuses a process whose version differs.
inline constexpr std::uint32_t wire_protocol_version = 2;

/// Errors as values (runtime/error_value.hpp), sent alone or inside
/// collective_abort and join_reply.

// -- rendezvous and membership ----------------------------------------------------

/// A setting that every worker of a job must share (lockstep's version,
/// the replicas per worker, a program's learning rate or seed), by name
/// and value as text: the rendezvous compares them and names each
/// worker's value when they differ.
struct agreed_setting {
  std::string name;
  std::string value;

  friend bool operator==(const agreed_setting&, const agreed_setting&) = default;
};

/// worker -> coordinator (rank 0), the first message on an authenticated
/// control connection: "I am `rank` of `world_size` in job `job_id`".
struct join_request {
  std::uint32_t protocol_version = wire_protocol_version;
  /// The job (TF_CONFIG's cluster, a launcher's run id): processes of
  /// another job are refused.
  std::string job_id;
  std::uint32_t rank = 0;
  std::uint32_t world_size = 0;
  /// The generation the worker wants to join (0 for the first; an elastic
  /// restart asks for the next one).
  std::uint64_t generation = 0;
  /// The worker's replicas (local devices); every worker has the same number.
  std::uint32_t local_replicas = 0;
  /// Where the worker listens for its data connections (host name or
  /// address, port).
  std::string host;
  std::uint16_t port = 0;
  /// Identifies the worker's machine: workers with equal hashes share
  /// memory instead of TCP.
  std::uint64_t host_hash = 0;
  /// What must agree between workers, in the order the program declared
  /// it; the coordinator compares every worker's once all have joined.
  std::vector<agreed_setting> settings;
  /// The worker's proof that it holds the cluster token: HMAC-SHA256 over
  /// the handshake's transcript (32 bytes); empty without authentication.
  std::vector<std::uint8_t> proof;

  friend bool operator==(const join_request&, const join_request&) = default;
};

/// coordinator -> worker: the answer to a join_request, before the
/// membership (which comes once every worker has joined). A second,
/// refusing join_reply comes instead of the membership when the
/// rendezvous fails after the worker was accepted (settings that differ, a
/// worker that never joined): every worker then raises the same error.
struct join_reply {
  /// True when the worker is in; otherwise `refusal` says why (a duplicate
  /// rank, a world size, version or configuration that differs).
  bool accepted = false;
  std::uint64_t generation = 0;
  /// The coordinator's proof of the token (see join_request::proof).
  std::vector<std::uint8_t> proof;
  error_value refusal;

  friend bool operator==(const join_reply&, const join_reply&) = default;
};

/// One process of a generation, as membership lists it.
struct member {
  std::uint32_t rank = 0;
  std::string host;
  std::uint16_t port = 0;
  std::uint32_t local_replicas = 0;
  std::uint64_t host_hash = 0;

  friend bool operator==(const member&, const member&) = default;
};

/// coordinator -> every worker: who is in generation `generation`, in rank
/// order (global replica ids follow it: rank r's first replica is the sum of
/// local_replicas of the ranks before it).
struct membership {
  std::string job_id;
  std::uint64_t generation = 0;
  std::vector<member> members;

  friend bool operator==(const membership&, const membership&) = default;
};

/// worker <-> coordinator, every heartbeat interval on the control
/// connection; a peer silent for several intervals is lost.
struct heartbeat {
  std::uint32_t rank = 0;
  std::uint64_t generation = 0;
  /// Counts up from 1 per sender and generation; 0 is a goodbye (the
  /// sender's program ended: it is not lost).
  std::uint64_t sequence = 0;
  /// The sender's steady clock at sending, in nanoseconds since its epoch:
  /// monotonic on the sender only, so a receiver compares a peer's stamps
  /// with each other (round trips, gaps), never with its own clock.
  std::int64_t sent_at_ns = 0;

  friend bool operator==(const heartbeat&, const heartbeat&) = default;
};

// -- collectives --------------------------------------------------------------------

/// worker -> worker: the collective `rank` issued, as its fingerprint
/// (detail::collective_fingerprint, field for field), so that workers
/// compare what they issued before any data moves.
struct collective_control {
  std::uint32_t rank = 0;
  std::uint64_t generation = 0;
  std::uint64_t seq = 0;
  std::string op;
  std::string reduction;
  lockstep::dtype dtype = lockstep::dtype::f32;
  std::vector<std::int64_t> shape;
  std::string tag;
  std::uint64_t tensors = 1;
  std::uint64_t layout = 0;
  std::uint64_t batch_tensors = 0;
  std::uint64_t batch_dtypes = 0;
  std::uint64_t batch_shapes = 0;
  std::uint64_t epoch = 0;
  bool inline_data = false;
  std::uint64_t slice = 0;

  friend bool operator==(const collective_control&, const collective_control&) = default;
};

/// `fingerprint`, issued by `rank` in `generation`, as a message.
collective_control to_collective_control(const detail::collective_fingerprint& fingerprint,
                                         std::uint32_t rank, std::uint64_t generation);

/// The fingerprint `control` carries (rank and generation are the
/// sender's, not part of it).
detail::collective_fingerprint to_collective_fingerprint(const collective_control& control);

/// worker -> every worker: collective `seq` of `generation` failed on
/// `rank`; every rank throws `error` from it. `seq` 0: the group is
/// broken (the coordinator lost a worker); every later collective throws.
struct collective_abort {
  std::uint32_t rank = 0;
  std::uint64_t generation = 0;
  std::uint64_t seq = 0;
  error_value error;

  friend bool operator==(const collective_abort&, const collective_abort&) = default;
};

/// "Which collective between the workers has each worker reached?", asked
/// when collective `seq` passed its deadline on worker `asker`, so that its
/// timeout_error names every worker that never reached it. One message for
/// the three legs of the exchange over the star of control connections:
///   asker -> coordinator, coordinator -> every worker: the question
///     (`reached` empty);
///   worker -> coordinator: its answer (`reached` holds one number, the
///     last collective between the workers it started, 0 for none);
///   coordinator -> asker: every worker's answer, by rank (`no_answer`
///     for a worker that did not answer in time).
struct collective_progress {
  static constexpr std::uint64_t no_answer = ~std::uint64_t{0};

  std::uint32_t asker = 0;
  std::uint64_t generation = 0;
  std::uint64_t seq = 0;
  std::vector<std::uint64_t> reached;

  friend bool operator==(const collective_progress&, const collective_progress&) = default;
};

/// What a node sends a peer on its control connection: a heartbeat
/// (sequence 0: a goodbye), an abort, or a progress question or answer.
using control_post = std::variant<heartbeat, collective_abort, collective_progress>;

// -- variables ----------------------------------------------------------------------

/// chief -> every worker: the variable created at `index` during a replica
/// function (detail::creation_rendezvous across processes: the other
/// workers' replicas check that they asked for the same name and receive
/// this one; its initial value follows on the data plane, broadcast from
/// the chief).
struct variable_created {
  std::uint64_t generation = 0;
  /// The `run` call the variable was created in (0 outside one).
  std::uint64_t seq = 0;
  /// The creation index within that call (0, 1, ... per replica).
  std::uint64_t index = 0;
  /// The global replica id that created it.
  std::uint32_t replica = 0;
  /// The canonical name.
  std::string name;
  lockstep::dtype dtype = lockstep::dtype::f32;
  std::vector<std::int64_t> shape;
  variable_synchronization synchronization = variable_synchronization::automatic;
  variable_aggregation aggregation = variable_aggregation::none;
  bool trainable = true;

  friend bool operator==(const variable_created&, const variable_created&) = default;
};

// -- enum checks (for deserialisation) ----------------------------------------
// Switches without a default, so that a new enumerator warns here (-Wswitch).

constexpr bool is_valid(lockstep::dtype type) noexcept {
  switch (type) {
    case lockstep::dtype::f32:
    case lockstep::dtype::f64:
    case lockstep::dtype::i32:
    case lockstep::dtype::i64:
    case lockstep::dtype::f16:
    case lockstep::dtype::bf16:
      return true;
  }
  return false;
}

constexpr bool is_valid(variable_synchronization mode) noexcept {
  switch (mode) {
    case variable_synchronization::automatic:
    case variable_synchronization::on_write:
    case variable_synchronization::on_read:
    case variable_synchronization::none:
      return true;
  }
  return false;
}

constexpr bool is_valid(variable_aggregation mode) noexcept {
  switch (mode) {
    case variable_aggregation::none:
    case variable_aggregation::sum:
    case variable_aggregation::mean:
    case variable_aggregation::only_first_replica:
      return true;
  }
  return false;
}

} // namespace lockstep::detail
