// The launchers that describe a cluster in a few plain variables: torchrun
// and Kubeflow's PyTorchJob, Open MPI's mpirun, and lockstep's own
// LOCKSTEP_* variables (which override the others field by field).

#include "cluster_resolver/cluster_sources.hpp"

#include "lockstep/error.hpp"

namespace lockstep::detail {

namespace {

/// Sets `field` from the whole number in `name`, when it is set.
void take_count(sourced<std::size_t>& field, const environment& env, std::string_view name) {
  if (const auto value = count_variable(env, name))
    field.set(*value, std::string(name));
}

} // namespace

std::optional<cluster_fields> from_torchrun(const environment& env) {
  const auto rank = count_variable(env, "RANK");
  const auto world = count_variable(env, "WORLD_SIZE");
  const auto master = variable(env, "MASTER_ADDR");
  if (!rank || !world || !master)
    return std::nullopt;
  const auto port = variable(env, "MASTER_PORT");
  if (!port)
    throw value_error("torchrun: RANK, WORLD_SIZE and MASTER_ADDR are set but MASTER_PORT is not "
                      "(torchrun and PyTorchJob set it with MASTER_ADDR)");
  cluster_fields fields;
  fields.source = "torchrun";
  fields.rank.set(*rank, "RANK");
  fields.world_size.set(*world, "WORLD_SIZE");
  take_count(fields.local_rank, env, "LOCAL_RANK");
  take_count(fields.local_world_size, env, "LOCAL_WORLD_SIZE");
  const auto master_address = std::string(*master) + ":" + std::string(*port);
  auto coordinator = network_address::parse(master_address, "MASTER_ADDR:MASTER_PORT");
  // Under torchrun the agent's TCPStore listens on MASTER_PORT on the master
  // host for the workers' whole life (TORCHELASTIC_USE_AGENT_STORE=True),
  // so lockstep's coordinator takes the next port. A PyTorchJob pod without
  // torchrun has no such store and keeps MASTER_PORT.
  if (variable(env, "TORCHELASTIC_USE_AGENT_STORE") == "True") {
    if (coordinator.port == 65535)
      fields.coordinator_absent = "MASTER_PORT 65535 is torchrun's store's "
                                  "(TORCHELASTIC_USE_AGENT_STORE=True) and lockstep's "
                                  "coordinator takes the next port, which does not exist";
    else
      fields.coordinator.set({coordinator.host, static_cast<std::uint16_t>(coordinator.port + 1)},
                             "MASTER_PORT + 1: torchrun's store holds MASTER_PORT");
  } else {
    fields.coordinator.set(std::move(coordinator), "MASTER_ADDR");
  }
  take_count(fields.generation, env, "TORCHELASTIC_RESTART_COUNT");
  // torchrun's --rdzv-id defaults to "none": every such job would share one id.
  const auto run = variable(env, "TORCHELASTIC_RUN_ID");
  if (run && *run != "none")
    fields.job_id.set("torch-" + std::string(*run), "TORCHELASTIC_RUN_ID");
  else
    fields.job_id.set(derived_job_id("torch", master_address), "MASTER_ADDR");
  return fields;
}

std::optional<cluster_fields> from_open_mpi(const environment& env) {
  const auto rank = count_variable(env, "OMPI_COMM_WORLD_RANK");
  const auto world = count_variable(env, "OMPI_COMM_WORLD_SIZE");
  if (!rank || !world)
    return std::nullopt;
  cluster_fields fields;
  fields.source = "Open MPI";
  fields.rank.set(*rank, "OMPI_COMM_WORLD_RANK");
  fields.world_size.set(*world, "OMPI_COMM_WORLD_SIZE");
  take_count(fields.local_rank, env, "OMPI_COMM_WORLD_LOCAL_RANK");
  take_count(fields.local_world_size, env, "OMPI_COMM_WORLD_LOCAL_SIZE");
  // mpirun names the job in PMIx's namespace; no coordinator, so the job id
  // may also come from the coordinator an override gives (cluster_resolver).
  if (const auto space = variable(env, "PMIX_NAMESPACE"))
    fields.job_id.set("mpi-" + std::string(*space), "PMIX_NAMESPACE");
  return fields;
}

cluster_fields from_lockstep_variables(const environment& env) {
  cluster_fields fields;
  fields.source = "LOCKSTEP_*";
  take_count(fields.world_size, env, "LOCKSTEP_WORLD_SIZE");
  take_count(fields.rank, env, "LOCKSTEP_RANK");
  take_count(fields.local_rank, env, "LOCKSTEP_LOCAL_RANK");
  take_count(fields.local_world_size, env, "LOCKSTEP_LOCAL_WORLD_SIZE");
  take_count(fields.generation, env, "LOCKSTEP_GENERATION");
  if (const auto text = variable(env, "LOCKSTEP_COORDINATOR"))
    fields.coordinator.set(network_address::parse(*text, "LOCKSTEP_COORDINATOR"),
                           "LOCKSTEP_COORDINATOR");
  if (const auto text = variable(env, "LOCKSTEP_LISTEN"))
    fields.listen.set(network_address::parse(*text, "LOCKSTEP_LISTEN"), "LOCKSTEP_LISTEN");
  if (const auto text = variable(env, "LOCKSTEP_JOB_ID"))
    fields.job_id.set(std::string(*text), "LOCKSTEP_JOB_ID");
  return fields;
}

} // namespace lockstep::detail
