#pragma once

// The sources cluster_resolver reads (lockstep/cluster_resolver.hpp): each
// turns a launcher's environment variables into the fields it knows, or
// nothing when its variables are absent, and throws value_error naming the
// variable when they are malformed. cluster_resolver.cpp layers them.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "lockstep/cluster_resolver.hpp"

namespace lockstep::detail {

using environment = cluster_resolver::environment;

/// A field and the variable or option it came from (for error messages).
template <class T>
struct sourced {
  std::optional<T> value;
  std::string from;

  void set(T v, std::string origin) {
    value = std::move(v);
    from = std::move(origin);
  }
};

/// What one source says about the cluster.
struct cluster_fields {
  std::string source;
  sourced<std::string> job_id;
  sourced<std::size_t> generation;
  sourced<std::size_t> world_size;
  sourced<std::size_t> rank;
  sourced<std::size_t> local_rank;
  sourced<std::size_t> local_world_size;
  sourced<network_address> coordinator;
  /// Why the source gives no coordinator although it would name one (for
  /// the error when none is set over it); empty when it names none at all.
  std::string coordinator_absent;
  sourced<network_address> listen;
  std::vector<network_address> peers; // by rank; empty when not listed
  std::string task_type;
  std::size_t task_index = 0;
};

/// The value of `name`, or nothing when it is unset or empty.
std::optional<std::string_view> variable(const environment& env, std::string_view name);

/// A whole number parsed from `text`; value_error names `what`.
std::size_t parse_count(std::string_view text, std::string_view what);

/// `name` parsed as a whole number, or nothing when unset.
std::optional<std::size_t> count_variable(const environment& env, std::string_view name);

/// A job id that every worker derives alike from text they all see.
std::string derived_job_id(std::string_view prefix, std::string_view seed);

/// TF_CONFIG (tf_config.cpp).
std::optional<cluster_fields> from_tf_config(const environment& env);

/// torchrun / PyTorchJob, Open MPI and LOCKSTEP_* (launcher_variables.cpp).
std::optional<cluster_fields> from_torchrun(const environment& env);
std::optional<cluster_fields> from_open_mpi(const environment& env);
cluster_fields from_lockstep_variables(const environment& env);

/// Slurm (slurm.cpp); workers listen on `port_base` + local rank.
std::optional<cluster_fields> from_slurm(const environment& env, std::uint16_t port_base);

} // namespace lockstep::detail
