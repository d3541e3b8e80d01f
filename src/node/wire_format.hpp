#pragma once

// The wire format of node/wire_messages.hpp: each message's inspect(), which
// CAF's binary serializer uses to encode it on the control links
// (control_messages.cpp) and which lets the node actor receive it as a
// message. control_messages.cpp registers the types with the actor system
// as "lockstep.<type>" (add_node_message_types).

#include "node/wire_messages.hpp"

#include "actor_system/wire_format.hpp"

#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>

namespace lockstep::detail {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, agreed_setting& x) {
  return f(caf::meta::type_name("agreed_setting"), x.name, x.value);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_request& x) {
  return f(caf::meta::type_name("join_request"), x.protocol_version, x.job_id, x.rank,
           x.world_size, x.generation, x.local_replicas, x.host, x.port, x.host_hash,
           x.settings, wire_bytes{x.proof});
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_reply& x) {
  return f(caf::meta::type_name("join_reply"), x.accepted, x.generation, wire_bytes{x.proof},
           x.refusal);
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

/// Adds every type of node/wire_messages.hpp to `config`, as
/// "lockstep.<type>" ("lockstep.join_request", ...).
void add_node_message_types(caf::actor_system_config& config);

} // namespace lockstep::detail
