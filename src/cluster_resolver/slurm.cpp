// The cluster of an srun step, as TF's SlurmClusterResolver reads it: tasks
// are laid out on the step's hosts in order, SLURM_STEP_TASKS_PER_NODE to
// each (srun's block distribution), and a task listens on the port of its
// place on its host: the step's reserved ports (`srun --resv-ports`) when
// it has them, else port_base onwards.

#include "cluster_resolver/cluster_sources.hpp"
#include "cluster_resolver/slurm_hostlist.hpp"
#include "runtime/error_text.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <numeric>

namespace lockstep::detail {

namespace {

/// The port of each local rank, the same on every host of the step:
/// SLURM_STEP_RESV_PORTS when set (Slurm reserves those ports on every host
/// of the step, for the step alone), else `port_base` onwards. value_error
/// when a host runs more tasks than there are ports.
std::vector<std::uint16_t> local_ports(const environment& env, std::uint16_t port_base,
                                       const std::vector<std::string>& hosts,
                                       const std::vector<std::size_t>& per_node) {
  const auto most = std::max_element(per_node.begin(), per_node.end()) - per_node.begin();
  const auto& busiest = hosts[static_cast<std::size_t>(most)];
  const auto needed = per_node[static_cast<std::size_t>(most)];
  if (const auto reserved = variable(env, "SLURM_STEP_RESV_PORTS")) {
    auto ports = expand_port_list(*reserved, "SLURM_STEP_RESV_PORTS");
    if (ports.size() < needed)
      throw value_error("Slurm: SLURM_STEP_RESV_PORTS = " + in_quotes(*reserved) + " reserves "
                        + std::to_string(ports.size()) + " ports but " + busiest + " runs "
                        + std::to_string(needed)
                        + " tasks (SLURM_STEP_TASKS_PER_NODE): give srun --resv-ports="
                        + std::to_string(needed) + " or more");
    return ports;
  }
  if (needed > 65535u - port_base)
    throw value_error("Slurm: " + std::to_string(needed) + " tasks on " + busiest
                      + " need ports beyond 65535 from port base " + std::to_string(port_base));
  std::vector<std::uint16_t> ports(needed);
  std::iota(ports.begin(), ports.end(), port_base);
  return ports;
}

} // namespace

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
  const auto ports = local_ports(env, port_base, hosts, per_node);
  std::size_t first_on_host = 0;
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    for (std::size_t local = 0; local < per_node[h]; ++local)
      fields.peers.push_back({hosts[h], ports[local]});
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
  const bool reserved = variable(env, "SLURM_STEP_RESV_PORTS").has_value();
  fields.coordinator.set(fields.peers.front(),
                         reserved ? "SLURM_STEP_NODELIST, SLURM_STEP_RESV_PORTS"
                                  : "SLURM_STEP_NODELIST");
  fields.listen.set({"0.0.0.0", fields.peers[*procid].port},
                    reserved ? "SLURM_STEP_RESV_PORTS" : "SLURM_STEP_TASKS_PER_NODE");
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
