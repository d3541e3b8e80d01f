// TF_CONFIG, as Kubeflow's TFJob sets it and TF's TFConfigClusterResolver
// and multi_worker_util read it:
//
//   {"cluster": {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"]},
//    "task": {"type": "worker", "index": 0}}
//
// The collective group is the chief and the workers: the chief is rank 0
// and worker i rank i + #chief (TF's id_in_cluster). An evaluator runs
// alone. The checks and their messages are multi_worker_util's
// _validate_cluster_spec, plus the refusals a collective cluster needs.

#include "cluster_resolver/cluster_sources.hpp"
#include "runtime/error_text.hpp"

#include "lockstep/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <map>

namespace lockstep::detail {

namespace {

using json = nlohmann::json;

constexpr std::array<std::string_view, 4> task_types{"chief", "worker", "evaluator", "ps"};

bool known_task_type(std::string_view type) {
  return std::find(task_types.begin(), task_types.end(), type) != task_types.end();
}

[[noreturn]] void invalid(const std::string& why) {
  throw value_error("TF_CONFIG: " + why);
}

/// A job's addresses by task index: a list, or TF's sparse form
/// {"index": "address"} with the indices 0..n-1.
std::vector<network_address> job_addresses(const std::string& job, const json& tasks) {
  std::vector<network_address> addresses;
  const auto address = [&](const json& value, const std::string& where) {
    if (!value.is_string())
      invalid(where + " is not a \"host:port\" string");
    return network_address::parse(value.get<std::string>(), "TF_CONFIG " + where);
  };
  if (tasks.is_array()) {
    for (std::size_t i = 0; i < tasks.size(); ++i)
      addresses.push_back(address(tasks[i], "cluster." + job + "[" + std::to_string(i) + "]"));
    return addresses;
  }
  if (!tasks.is_object())
    invalid("cluster." + job + " is neither a list of addresses nor {index: address}");
  std::map<std::size_t, network_address> by_index;
  for (const auto& [key, value] : tasks.items())
    by_index.emplace(parse_count(key, "TF_CONFIG cluster." + job + " index"),
                     address(value, "cluster." + job + "." + key));
  for (const auto& [index, where] : by_index) {
    if (index != addresses.size())
      invalid("cluster." + job + " has no task " + std::to_string(addresses.size())
              + ": a collective cluster needs every index from 0");
    addresses.push_back(where);
  }
  return addresses;
}

std::string describe_cluster(const std::map<std::string, std::vector<network_address>>& jobs) {
  std::string text;
  for (const auto& [job, addresses] : jobs) {
    text += text.empty() ? "" : ", ";
    text += job + ": " + std::to_string(addresses.size());
  }
  return "{" + text + "}";
}

} // namespace

std::optional<cluster_fields> from_tf_config(const environment& env) {
  const auto text = variable(env, "TF_CONFIG");
  if (!text)
    return std::nullopt;
  json config;
  try {
    config = json::parse(*text);
  } catch (const json::exception& e) {
    invalid(std::string("not valid JSON: ") + e.what());
  }
  if (!config.is_object())
    invalid("expected a JSON object with \"cluster\" and \"task\"");
  if (config.value("sparseCluster", false))
    invalid("sparseCluster is set, but a collective cluster needs every task's address "
            "(turn off enableDynamicWorker)");

  std::map<std::string, std::vector<network_address>> jobs;
  if (config.contains("cluster")) {
    const auto& cluster = config["cluster"];
    if (!cluster.is_object())
      invalid("\"cluster\" is not an object of jobs");
    for (const auto& [job, tasks] : cluster.items())
      if (auto addresses = job_addresses(job, tasks); !addresses.empty())
        jobs.emplace(job, std::move(addresses));
  }
  cluster_fields fields;
  fields.source = "TF_CONFIG";
  if (jobs.empty()) { // TF: an empty cluster runs locally
    fields.world_size.set(1, "TF_CONFIG");
    fields.rank.set(0, "TF_CONFIG");
    return fields;
  }

  // multi_worker_util._validate_cluster_spec, in its order.
  for (const auto& [job, addresses] : jobs)
    if (!known_task_type(job))
      invalid("Disallowed task type found in cluster spec. Allowed types are (\"chief\", "
              "\"worker\", \"evaluator\", \"ps\") and the cluster spec is "
              + describe_cluster(jobs) + ".");
  const auto* task = config.contains("task") ? &config["task"] : nullptr;
  if (task == nullptr || !task->is_object() || !task->contains("type")
      || !task->contains("index"))
    invalid("When `cluster_spec` is given, you must also specify `task_type` and `task_id`.");
  if (!(*task)["type"].is_string())
    invalid("task.type is not a string");
  const auto type = (*task)["type"].get<std::string>();
  const auto& index_value = (*task)["index"];
  if (!index_value.is_number_unsigned() && !(index_value.is_string()))
    invalid("task.index is not a whole number");
  const auto index = index_value.is_string()
                         ? parse_count(index_value.get<std::string>(), "TF_CONFIG task.index")
                         : index_value.get<std::size_t>();
  if (!known_task_type(type))
    invalid("Unrecognized task_type: " + in_quotes(type)
            + ", valid task types are: \"chief\", \"worker\", \"evaluator\" and \"ps\".");
  if (!jobs.contains(type) && type != "evaluator")
    invalid("`task_type` " + in_quotes(type) + " not found in cluster_spec.");
  if (jobs.contains("chief") && jobs["chief"].size() > 1)
    invalid("There must be at most one 'chief' job.");
  if (jobs.contains("evaluator") && jobs["evaluator"].size() > 1)
    invalid("There must be at most one 'evaluator' job.");
  if (jobs.contains(type) && index >= jobs[type].size())
    invalid("The `task_id` " + std::to_string(index) + " exceeds the maximum id of " + type + ".");
  // What a collective cluster cannot have.
  if (type == "ps")
    invalid("There is no id for task_type 'ps': parameter servers take no part in "
            "collectives (MultiWorkerMirroredStrategy)");
  if (jobs.contains("ps"))
    invalid("the cluster has a `ps` job, which takes no part in collectives: "
            "MultiWorkerMirroredStrategy's cluster holds chief, worker and evaluator tasks");
  if (!jobs.contains("chief") && !jobs.contains("worker") && type != "evaluator")
    invalid("No `worker`, `chief` or `evaluator` tasks can be found in `cluster_spec`.");

  fields.task_type = type;
  fields.task_index = index;
  if (type == "evaluator") { // runs outside the group, alone
    fields.world_size.set(1, "TF_CONFIG");
    fields.rank.set(0, "TF_CONFIG");
    if (jobs.contains("evaluator"))
      fields.listen.set({"0.0.0.0", jobs["evaluator"][index].port}, "TF_CONFIG");
    return fields;
  }
  for (const auto* job : {"chief", "worker"})
    if (jobs.contains(job))
      fields.peers.insert(fields.peers.end(), jobs[job].begin(), jobs[job].end());
  const auto rank = type == "chief" ? 0 : index + (jobs.contains("chief") ? 1 : 0);
  fields.world_size.set(fields.peers.size(), "TF_CONFIG");
  fields.rank.set(rank, "TF_CONFIG task");
  fields.coordinator.set(fields.peers.front(), "TF_CONFIG");
  fields.listen.set({"0.0.0.0", fields.peers[rank].port}, "TF_CONFIG");
  // Workers on one host: those that share this worker's host name.
  std::size_t local_rank = 0;
  std::size_t local_world = 0;
  for (std::size_t r = 0; r < fields.peers.size(); ++r)
    if (fields.peers[r].host == fields.peers[rank].host) {
      local_rank += r < rank ? 1 : 0;
      ++local_world;
    }
  fields.local_rank.set(local_rank, "TF_CONFIG");
  fields.local_world_size.set(local_world, "TF_CONFIG");
  std::string seed;
  for (const auto& peer : fields.peers)
    seed += peer.to_string() + ",";
  fields.job_id.set(derived_job_id("tf", seed), "TF_CONFIG");
  return fields;
}

} // namespace lockstep::detail
