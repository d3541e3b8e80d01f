// The cluster of an srun step, as TF's SlurmClusterResolver reads it: tasks
// are laid out on the step's hosts in order, SLURM_STEP_TASKS_PER_NODE to
// each (srun's block distribution), and a task listens on port_base plus
// its place on its host.

#include "cluster/cluster_sources.hpp"
#include "cluster/slurm_hostlist.hpp"

#include "lockstep/error.hpp"

#include <numeric>

namespace lockstep::detail {

std::optional<cluster_fields> from_slurm(const environment& env, std::uint16_t port_base) {
  const auto procid = count_variable(env, "SLURM_PROCID");
  const auto nodelist = variable(env, "SLURM_STEP_NODELIST");
  if (!procid || !nodelist)
    return std::nullopt;
  const auto tasks = count_variable(env, "SLURM_STEP_NUM_TASKS");
  const auto per_node_text = variable(env, "SLURM_STEP_TASKS_PER_NODE");
  if (!tasks || !per_node_text)
    throw value_error(std::string("Slurm: SLURM_PROCID and SLURM_STEP_NODELIST are set but ")
                      + (tasks ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_STEP_NUM_TASKS")
                      + " is not (srun sets all four)");
  const auto hosts = expand_hostlist(*nodelist, "SLURM_STEP_NODELIST");
  const auto per_node = expand_tasks_per_node(*per_node_text, "SLURM_STEP_TASKS_PER_NODE");
  if (per_node.size() != hosts.size())
    throw value_error("Slurm: SLURM_STEP_TASKS_PER_NODE lists " + std::to_string(per_node.size())
                      + " hosts but SLURM_STEP_NODELIST " + std::to_string(hosts.size()));
  const auto placed = std::accumulate(per_node.begin(), per_node.end(), std::size_t{0});
  if (placed != *tasks)
    throw value_error("Slurm: SLURM_STEP_TASKS_PER_NODE places " + std::to_string(placed)
                      + " tasks but SLURM_STEP_NUM_TASKS is " + std::to_string(*tasks));
  if (*procid >= *tasks)
    throw value_error("Slurm: SLURM_PROCID " + std::to_string(*procid)
                      + " is not below SLURM_STEP_NUM_TASKS " + std::to_string(*tasks));

  cluster_fields fields;
  fields.source = "Slurm";
  std::size_t first_on_host = 0;
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    if (per_node[h] > 65535u - port_base)
      throw value_error("Slurm: " + std::to_string(per_node[h]) + " tasks on " + hosts[h]
                        + " need ports beyond 65535 from port base "
                        + std::to_string(port_base));
    for (std::size_t local = 0; local < per_node[h]; ++local)
      fields.peers.push_back({hosts[h], static_cast<std::uint16_t>(port_base + local)});
    if (*procid >= first_on_host && *procid < first_on_host + per_node[h]) {
      fields.local_rank.set(*procid - first_on_host, "SLURM_PROCID");
      fields.local_world_size.set(per_node[h], "SLURM_STEP_TASKS_PER_NODE");
    }
    first_on_host += per_node[h];
  }
  fields.world_size.set(*tasks, "SLURM_STEP_NUM_TASKS");
  fields.rank.set(*procid, "SLURM_PROCID");
  if (const auto restarts = count_variable(env, "SLURM_RESTART_COUNT"))
    fields.generation.set(*restarts, "SLURM_RESTART_COUNT");
  fields.coordinator.set(fields.peers.front(), "SLURM_STEP_NODELIST");
  fields.listen.set({"0.0.0.0", fields.peers[*procid].port}, "SLURM_STEP_TASKS_PER_NODE");
  if (const auto job = variable(env, "SLURM_JOB_ID")) {
    auto id = "slurm-" + std::string(*job);
    if (const auto step = variable(env, "SLURM_STEP_ID"))
      id += "." + std::string(*step);
    fields.job_id.set(std::move(id), "SLURM_JOB_ID");
  } else {
    fields.job_id.set(derived_job_id("slurm", *nodelist), "SLURM_STEP_NODELIST");
  }
  return fields;
}

} // namespace lockstep::detail
