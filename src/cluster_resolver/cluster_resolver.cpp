// cluster_resolver: picks the first launcher source present, lays the
// LOCKSTEP_* variables and the program's options over it field by field,
// and checks that the result is one consistent cluster.

#include "lockstep/cluster_resolver.hpp"

#include "cluster_resolver/cluster_sources.hpp"
#include "runtime/fingerprint_hash.hpp"
#include "runtime/error_text.hpp"
#include "runtime/log.hpp"

#include "lockstep/error.hpp"

#include <charconv>
#include <cstdio>

extern char** environ;

namespace lockstep {

namespace detail {

std::optional<std::string_view> variable(const environment& env, std::string_view name) {
  const auto found = env.find(name);
  if (found == env.end() || found->second.empty())
    return std::nullopt;
  return std::string_view(found->second);
}

std::size_t parse_count(std::string_view text, std::string_view what) {
  std::size_t value = 0;
  const auto* end = text.data() + text.size();
  const auto [stop, status] = std::from_chars(text.data(), end, value);
  if (text.empty() || status != std::errc{} || stop != end)
    throw value_error(std::string(what) + " = " + in_quotes(text)
                      + " is not a whole number");
  return value;
}

std::optional<std::size_t> count_variable(const environment& env, std::string_view name) {
  const auto text = variable(env, name);
  if (!text)
    return std::nullopt;
  return parse_count(*text, name);
}

std::string derived_job_id(std::string_view prefix, std::string_view seed) {
  fingerprint_hash hash;
  hash(seed);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash.hash));
  return std::string(prefix) + "-" + hex;
}

namespace {

/// Sets every field `over` has in `base`.
void overlay(cluster_fields& base, const cluster_fields& over) {
  const auto take = [](auto& field, const auto& other) {
    if (other.value)
      field = other;
  };
  take(base.job_id, over.job_id);
  take(base.generation, over.generation);
  take(base.world_size, over.world_size);
  take(base.rank, over.rank);
  take(base.local_rank, over.local_rank);
  take(base.local_world_size, over.local_world_size);
  take(base.coordinator, over.coordinator);
  take(base.listen, over.listen);
}

cluster_fields from_options(const cluster_options& options) {
  cluster_fields fields;
  fields.source = "options";
  const auto take = [](auto& field, const auto& value) {
    if (value)
      field.set(*value, "cluster_options");
  };
  take(fields.world_size, options.world_size);
  take(fields.rank, options.rank);
  take(fields.local_rank, options.local_rank);
  take(fields.local_world_size, options.local_world_size);
  take(fields.job_id, options.job_id);
  take(fields.generation, options.generation);
  if (options.coordinator)
    fields.coordinator.set(network_address::parse(*options.coordinator,
                                                  "cluster_options::coordinator"),
                           "cluster_options");
  if (options.listen)
    fields.listen.set(network_address::parse(*options.listen, "cluster_options::listen"),
                      "cluster_options");
  return fields;
}

bool sets_anything(const cluster_fields& f) {
  return f.job_id.value || f.generation.value || f.world_size.value || f.rank.value || f.local_rank.value
         || f.local_world_size.value || f.coordinator.value || f.listen.value;
}

std::string named(const sourced<std::size_t>& field, std::string_view name) {
  return std::string(name) + " " + std::to_string(*field.value) + " (" + field.from + ")";
}

/// The spec `fields` describe; value_error when they contradict each other.
cluster_spec finish(cluster_fields fields) {
  const auto prefix = "cluster from " + fields.source + ": ";
  if (!fields.world_size.value)
    throw value_error(prefix + "no world size: set " + (fields.rank.value ? "it" : "it and the rank")
                      + " (LOCKSTEP_WORLD_SIZE, LOCKSTEP_RANK or cluster_options)");
  if (!fields.rank.value)
    throw value_error(prefix + "no rank: set LOCKSTEP_RANK or cluster_options::rank");
  cluster_spec spec;
  spec.source = fields.source;
  spec.world_size = *fields.world_size.value;
  spec.rank = *fields.rank.value;
  if (spec.world_size == 0)
    throw value_error(prefix + named(fields.world_size, "world size") + " must be at least 1");
  if (spec.world_size > max_world_size)
    throw value_error(prefix + named(fields.world_size, "world size") + " is more than "
                      + std::to_string(max_world_size) + ", the most workers lockstep supports");
  if (spec.rank >= spec.world_size)
    throw value_error(prefix + named(fields.rank, "rank") + " is not below the "
                      + named(fields.world_size, "world size"));
  spec.local_rank = fields.local_rank.value.value_or(0);
  spec.local_world_size = fields.local_world_size.value.value_or(
      fields.local_rank.value ? spec.world_size : 1);
  if (spec.local_world_size == 0 || spec.local_world_size > spec.world_size)
    throw value_error(prefix + "local world size " + std::to_string(spec.local_world_size)
                      + " (" + fields.local_world_size.from + ") is not within 1 to the world size "
                      + std::to_string(spec.world_size));
  if (spec.local_rank >= spec.local_world_size)
    throw value_error(prefix + named(fields.local_rank, "local rank")
                      + " is not below the local world size "
                      + std::to_string(spec.local_world_size));
  if (!fields.peers.empty() && fields.peers.size() != spec.world_size)
    throw value_error(prefix + "it lists " + std::to_string(fields.peers.size())
                      + " workers but the " + named(fields.world_size, "world size")
                      + " says otherwise");
  spec.peers = std::move(fields.peers);
  if (fields.coordinator.value)
    spec.coordinator = *fields.coordinator.value;
  if (spec.world_size > 1 && !spec.coordinator)
    throw value_error(prefix + "a world of " + std::to_string(spec.world_size)
                      + " workers needs the coordinator's address (rank 0's host:port), and "
                      + fields.source
                      + (fields.coordinator_absent.empty() ? " names none"
                                                           : " gives none: "
                                                               + fields.coordinator_absent)
                      + ": set LOCKSTEP_COORDINATOR or cluster_options::coordinator");
  if (fields.listen.value)
    spec.listen = *fields.listen.value;
  else if (spec.rank == 0 && spec.coordinator) // rank 0 is the coordinator
    spec.listen.port = spec.coordinator->port;
  if (fields.job_id.value)
    spec.job_id = *fields.job_id.value;
  else if (spec.coordinator)
    spec.job_id = derived_job_id(fields.source == "Open MPI" ? "mpi" : "lockstep",
                                 spec.coordinator->to_string());
  else
    spec.job_id = "local";
  if (spec.job_id.empty())
    throw value_error(prefix + "the job id (" + fields.job_id.from + ") is empty");
  spec.generation = fields.generation.value.value_or(0);
  spec.task_type = std::move(fields.task_type);
  spec.task_index = fields.task_index;
  return spec;
}

} // namespace

} // namespace detail

network_address network_address::parse(std::string_view text, std::string_view what) {
  const auto fail = [&](const std::string& why) -> network_address {
    throw value_error(std::string(what) + " = " + detail::in_quotes(text)
                      + " is not a host:port address: " + why);
  };
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos)
    return fail("no ':port'");
  auto host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2); // [IPv6]
  else if (host.find(':') != std::string_view::npos)
    return fail("an IPv6 host goes in brackets, as [::1]:2222");
  if (host.empty())
    return fail("no host");
  const auto port_text = text.substr(colon + 1);
  unsigned port = 0;
  const auto* end = port_text.data() + port_text.size();
  const auto [stop, status] = std::from_chars(port_text.data(), end, port);
  if (port_text.empty() || status != std::errc{} || stop != end || port > 65535)
    return fail("the port is not a number from 0 to 65535");
  return {std::string(host), static_cast<std::uint16_t>(port)};
}

std::string network_address::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool cluster_spec::is_chief() const {
  if (task_type == "chief" || task_type == "evaluator")
    return true;
  return rank == 0 && !is_evaluator();
}

cluster_resolver::cluster_resolver(const cluster_options& options)
  : cluster_resolver(options, process_environment()) {}

cluster_resolver::cluster_resolver(const cluster_options& options, const environment& variables) {
  using namespace detail;
  std::optional<cluster_fields> base;
  for (auto* source : {from_tf_config, from_torchrun, from_open_mpi})
    if (!base)
      base = source(variables);
  if (!base)
    base = from_slurm(variables, options.slurm_port_base);
  const auto lockstep_variables = from_lockstep_variables(variables);
  const auto explicit_options = from_options(options);
  if (!base) {
    if (sets_anything(explicit_options))
      base = cluster_fields{.source = "options"};
    else if (sets_anything(lockstep_variables))
      base = cluster_fields{.source = "LOCKSTEP_*"};
  }
  if (!base) {
    spec_.job_id = "local";
    spec_.source = "single process";
    LOCKSTEP_LOG_INFO("cluster: none configured; one process");
    return;
  }
  overlay(*base, lockstep_variables);
  overlay(*base, explicit_options);
  const auto coordinator_from = base->coordinator.from;
  spec_ = finish(std::move(*base));
  LOCKSTEP_LOG_INFO(
    "cluster from {}: rank {} of {} (local {} of {}), coordinator {}, job {}, generation {}{}",
    spec_.source, spec_.rank, spec_.world_size, spec_.local_rank, spec_.local_world_size,
    spec_.coordinator ? spec_.coordinator->to_string() : "none", spec_.job_id, spec_.generation,
    spec_.coordinator ? "; coordinator from " + coordinator_from : std::string());
}

cluster_resolver::environment cluster_resolver::process_environment() {
  environment variables;
  for (auto** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const auto equals = text.find('=');
    if (equals != std::string_view::npos)
      variables.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  return variables;
}

} // namespace lockstep
