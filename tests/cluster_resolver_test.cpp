// cluster_resolver: every launcher's variables (TF_CONFIG, torchrun,
// Open MPI, Slurm, LOCKSTEP_*), their precedence, explicit options, and
// each malformed or contradictory setting, which must be a value_error
// naming the variable or field. Explicit environments only: nothing here
// reads this process's. Suite 'unit'.

#include "lockstep/cluster_resolver.hpp"

#include "cluster_resolver/cluster_sources.hpp"
#include "cluster_resolver/slurm_hostlist.hpp"
#include "lockstep/error.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace lockstep;

namespace {

using env = cluster_resolver::environment;

cluster_spec resolve(const env& variables, const cluster_options& options = {}) {
  return cluster_resolver(options, variables).spec();
}

/// The value_error's message for resolving `variables`.
std::string refusal(const env& variables, const cluster_options& options = {}) {
  return error_of<value_error>([&] { resolve(variables, options); });
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::string chief_and_two_workers =
  R"({"cluster": {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2223"]},)";

} // namespace

TEST_CASE("no launcher: one process") {
  const auto spec = resolve({{"HOME", "/root"}});
  CHECK(spec.world_size == 1);
  CHECK(spec.rank == 0);
  CHECK(spec.source == "single process");
  CHECK(spec.job_id == "local");
  CHECK_FALSE(spec.coordinator);
  CHECK(spec.is_chief());
}

TEST_CASE("network_address: host:port, IPv6 in brackets, and what is not an address") {
  CHECK(network_address::parse("h1:2222", "X") == network_address{"h1", 2222});
  const auto v6 = network_address::parse("[::1]:80", "X");
  CHECK(v6.host == "::1");
  CHECK(v6.to_string() == "[::1]:80");
  CHECK(contains(error_of<value_error>([] { network_address::parse("h1", "ADDR"); }),
                 "ADDR = \"h1\" is not a host:port address: no ':port'"));
  CHECK(contains(error_of<value_error>([] { network_address::parse("h1:70000", "ADDR"); }),
                 "the port is not a number from 0 to 65535"));
  CHECK(contains(error_of<value_error>([] { network_address::parse("::1:80", "ADDR"); }),
                 "in brackets"));
  CHECK(contains(error_of<value_error>([] { network_address::parse(":80", "ADDR"); }),
                 "no host"));
}

TEST_CASE("TF_CONFIG: the chief is rank 0, worker i is rank i + 1") {
  const auto worker = resolve(
    {{"TF_CONFIG", chief_and_two_workers + R"("task": {"type": "worker", "index": 1}})"}});
  CHECK(worker.source == "TF_CONFIG");
  CHECK(worker.world_size == 3);
  CHECK(worker.rank == 2);
  CHECK(worker.task_type == "worker");
  CHECK(worker.task_index == 1);
  CHECK(worker.coordinator == network_address{"c0", 2222});
  CHECK(worker.listen == network_address{"0.0.0.0", 2223});
  REQUIRE(worker.peers.size() == 3);
  CHECK(worker.peers[1] == network_address{"w0", 2222});
  CHECK(worker.local_world_size == 1); // no other worker on host w1
  CHECK_FALSE(worker.is_chief());

  const auto chief = resolve(
    {{"TF_CONFIG", chief_and_two_workers + R"("task": {"type": "chief", "index": 0}})"}});
  CHECK(chief.rank == 0);
  CHECK(chief.is_chief());
  CHECK(chief.job_id == worker.job_id); // every worker derives the same id
  CHECK(chief.job_id.rfind("tf-", 0) == 0);
}

TEST_CASE("TF_CONFIG: without a chief, worker 0 is the chief; one host gives local ranks") {
  const auto spec = resolve({{"TF_CONFIG", R"({"cluster": {"worker": ["localhost:5000",
    "localhost:5001", "localhost:5002"]}, "task": {"type": "worker", "index": 2}})"}});
  CHECK(spec.rank == 2);
  CHECK(spec.local_rank == 2);
  CHECK(spec.local_world_size == 3);
  CHECK_FALSE(spec.is_chief());
  const auto first = resolve({{"TF_CONFIG", R"({"cluster": {"worker": ["localhost:5000",
    "localhost:5001"]}, "task": {"type": "worker", "index": 0}})"}});
  CHECK(first.is_chief());
}

TEST_CASE("TF_CONFIG: an evaluator runs alone, outside the group") {
  const auto spec = resolve({{"TF_CONFIG", R"({"cluster": {"worker": ["w0:1", "w1:2"],
    "evaluator": ["e0:3"]}, "task": {"type": "evaluator", "index": 0}})"}});
  CHECK(spec.is_evaluator());
  CHECK(spec.world_size == 1);
  CHECK(spec.rank == 0);
  CHECK(spec.is_chief()); // TF's is_chief says so for the evaluator
  CHECK(spec.listen.port == 3);
}

TEST_CASE("TF_CONFIG: TF's sparse form {index: address}, and an empty cluster runs locally") {
  const auto spec = resolve({{"TF_CONFIG", R"({"cluster": {"worker": {"1": "w1:2", "0": "w0:1"}},
    "task": {"type": "worker", "index": 1}})"}});
  CHECK(spec.rank == 1);
  CHECK(spec.peers[0] == network_address{"w0", 1});
  const auto local = resolve({{"TF_CONFIG", R"({"task": {"type": "worker", "index": 0}})"}});
  CHECK(local.world_size == 1);
  CHECK(local.source == "TF_CONFIG");
}

TEST_CASE("TF_CONFIG: TF's errors, and what a collective cluster refuses") {
  const auto config = [](const std::string& text) { return env{{"TF_CONFIG", text}}; };
  CHECK(contains(refusal(config("{not json")), "TF_CONFIG: not valid JSON"));
  CHECK(contains(refusal(config("[1]")), "expected a JSON object"));
  CHECK(contains(refusal(config(R"({"cluster": {"worker": ["w0:1"]}})")),
                 "When `cluster_spec` is given, you must also specify `task_type` and `task_id`."));
  CHECK(contains(refusal(config(R"({"cluster": {"chief": ["a:1", "b:1"], "worker": ["w:1"]},
                                   "task": {"type": "worker", "index": 0}})")),
                 "There must be at most one 'chief' job."));
  CHECK(contains(refusal(config(R"({"cluster": {"worker": ["w:1"]},
                                   "task": {"type": "boss", "index": 0}})")),
                 "Unrecognized task_type: \"boss\""));
  CHECK(contains(refusal(config(R"({"cluster": {"worker": ["w:1"]},
                                   "task": {"type": "chief", "index": 0}})")),
                 "`task_type` \"chief\" not found in cluster_spec."));
  CHECK(contains(refusal(config(R"({"cluster": {"worker": ["w:1"]},
                                   "task": {"type": "worker", "index": 1}})")),
                 "The `task_id` 1 exceeds the maximum id of worker."));
  CHECK(contains(refusal(config(R"({"cluster": {"master": ["m:1"]},
                                   "task": {"type": "worker", "index": 0}})")),
                 "Disallowed task type found in cluster spec"));
  CHECK(contains(refusal(config(R"({"cluster": {"worker": ["w:1"], "ps": ["p:1"]},
                                   "task": {"type": "ps", "index": 0}})")),
                 "There is no id for task_type 'ps'"));
  CHECK(contains(refusal(config(R"({"cluster": {"worker": ["w:1"], "ps": ["p:1"]},
                                   "task": {"type": "worker", "index": 0}})")),
                 "has a `ps` job"));
  CHECK(contains(refusal(config(R"({"cluster": {"worker": ["w:1"]}, "sparseCluster": true,
                                   "task": {"type": "worker", "index": 0}})")),
                 "sparseCluster"));
  CHECK(contains(refusal(config(R"({"cluster": {"worker": ["w0"]},
                                   "task": {"type": "worker", "index": 0}})")),
                 "TF_CONFIG cluster.worker[0] = \"w0\" is not a host:port address"));
  CHECK(contains(refusal(config(R"({"cluster": {"worker": {"0": "w0:1", "2": "w2:1"}},
                                   "task": {"type": "worker", "index": 0}})")),
                 "cluster.worker has no task 1"));
  CHECK(contains(refusal(config(R"({"cluster": {"worker": ["w0:1"]},
                                   "task": {"type": "worker", "index": -1}})")),
                 "task.index is not a whole number"));
}

TEST_CASE("torchrun and PyTorchJob") {
  const auto spec = resolve({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                             {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"},
                             {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "run7"}});
  CHECK(spec.source == "torchrun");
  CHECK(spec.rank == 3);
  CHECK(spec.world_size == 4);
  CHECK(spec.local_rank == 1);
  CHECK(spec.local_world_size == 2);
  CHECK(spec.coordinator == network_address{"10.0.0.1", 29500});
  CHECK(spec.job_id == "torch-run7");
  CHECK(spec.listen.port == 0); // not the coordinator: any free port
  CHECK(spec.peers.empty());

  // PyTorchJob without torchrun: one process per pod, no LOCAL_*.
  const auto master = resolve({{"RANK", "0"}, {"WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "job-master-0"}, {"MASTER_PORT", "23456"}});
  CHECK(master.local_world_size == 1);
  CHECK(master.listen.port == 23456); // rank 0 listens where the others connect

  CHECK(contains(refusal({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}}),
                 "MASTER_PORT is not"));
  CHECK(contains(refusal({{"RANK", "one"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"},
                          {"MASTER_PORT", "1"}}),
                 "RANK = \"one\" is not a whole number"));
  CHECK(contains(refusal({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"},
                          {"MASTER_PORT", "1"}}),
                 "rank 2 (RANK) is not below the world size 2 (WORLD_SIZE)"));
  CHECK(contains(refusal({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"},
                          {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}}),
                 "local rank 2 (LOCAL_RANK) is not below the local world size 2"));
}

TEST_CASE("torchrun's agent store holds MASTER_PORT: the coordinator takes the next port") {
  const env agent{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"},
                  {"MASTER_PORT", "29500"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  const auto spec = resolve(agent);
  CHECK(spec.coordinator == network_address{"node0", 29501});
  CHECK(spec.listen.port == 29501); // rank 0 listens there, beside the store
  const auto fields = detail::from_torchrun(agent);
  REQUIRE(fields);
  CHECK(fields->coordinator.from == "MASTER_PORT + 1: torchrun's store holds MASTER_PORT");

  // The job id still comes from MASTER_ADDR:MASTER_PORT, as every worker sees them.
  auto no_store = agent;
  no_store.erase("TORCHELASTIC_USE_AGENT_STORE");
  CHECK(resolve(no_store).coordinator == network_address{"node0", 29500});
  CHECK(resolve(no_store).job_id == spec.job_id);
  no_store["TORCHELASTIC_USE_AGENT_STORE"] = "False"; // torchrun's word for no store
  CHECK(resolve(no_store).coordinator == network_address{"node0", 29500});

  auto overridden = agent;
  overridden["LOCKSTEP_COORDINATOR"] = "node0:7000";
  CHECK(resolve(overridden).coordinator == network_address{"node0", 7000});

  auto last_port = agent;
  last_port["MASTER_PORT"] = "65535";
  const auto why = refusal(last_port);
  CHECK(contains(why, "cluster from torchrun: a world of 2 workers needs the coordinator"));
  CHECK(contains(why, "MASTER_PORT 65535 is torchrun's store's"));
  CHECK(contains(why, "set LOCKSTEP_COORDINATOR"));
  last_port["LOCKSTEP_COORDINATOR"] = "node0:7000";
  CHECK(resolve(last_port).coordinator == network_address{"node0", 7000});
  last_port.erase("LOCKSTEP_COORDINATOR");
  CHECK(resolve(last_port, {.coordinator = "node0:7001"}).coordinator
        == network_address{"node0", 7001});
}

TEST_CASE("torchrun's run id \"none\" (no --rdzv-id) is no run id") {
  const env unnamed{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"},
                    {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "none"}};
  const auto id = resolve(unnamed).job_id;
  CHECK(id != "torch-none");
  CHECK(id.rfind("torch-", 0) == 0);
  auto absent = unnamed;
  absent.erase("TORCHELASTIC_RUN_ID");
  CHECK(resolve(absent).job_id == id); // derived from MASTER_ADDR:MASTER_PORT alike
  auto elsewhere = unnamed;
  elsewhere["MASTER_PORT"] = "29600";
  CHECK(resolve(elsewhere).job_id != id); // another job, another id
  auto named = unnamed;
  named["TORCHELASTIC_RUN_ID"] = "nonesuch";
  CHECK(resolve(named).job_id == "torch-nonesuch");
}

TEST_CASE("Open MPI names no coordinator: it comes from LOCKSTEP_COORDINATOR") {
  const env mpi{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  const auto why = refusal(mpi);
  CHECK(contains(why, "cluster from Open MPI: a world of 2 workers needs the coordinator"));
  CHECK(contains(why, "LOCKSTEP_COORDINATOR"));

  auto with_coordinator = mpi;
  with_coordinator["LOCKSTEP_COORDINATOR"] = "127.0.0.1:6000";
  const auto spec = resolve(with_coordinator);
  CHECK(spec.source == "Open MPI");
  CHECK(spec.coordinator == network_address{"127.0.0.1", 6000});
  CHECK(spec.listen.port == 6000); // rank 0
  CHECK(spec.local_world_size == 2);
  CHECK(spec.job_id.rfind("mpi-", 0) == 0);
  with_coordinator["PMIX_NAMESPACE"] = "prterun-host-123@1";
  CHECK(resolve(with_coordinator).job_id == "mpi-prterun-host-123@1");
}

TEST_CASE("Slurm: hosts expanded, tasks laid out per host, ports from the base") {
  const env slurm{{"SLURM_PROCID", "3"}, {"SLURM_STEP_NUM_TASKS", "5"},
                  {"SLURM_STEP_NODELIST", "node[01-02],gpu7"},
                  {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"}, {"SLURM_JOB_ID", "123"},
                  {"SLURM_STEP_ID", "4"}};
  const auto spec = resolve(slurm);
  CHECK(spec.source == "Slurm");
  CHECK(spec.rank == 3);
  CHECK(spec.world_size == 5);
  CHECK(spec.local_rank == 1); // the second task on node02
  CHECK(spec.local_world_size == 2);
  CHECK(spec.listen == network_address{"0.0.0.0", 8889});
  CHECK(spec.coordinator == network_address{"node01", 8888});
  REQUIRE(spec.peers.size() == 5);
  CHECK(spec.peers[3] == network_address{"node02", 8889});
  CHECK(spec.peers[4] == network_address{"gpu7", 8888});
  CHECK(spec.job_id == "slurm-123.4");
  CHECK(resolve(slurm, {.slurm_port_base = 9000}).peers[4].port == 9000);

  auto wrong = slurm;
  wrong["SLURM_STEP_NUM_TASKS"] = "6";
  CHECK(contains(refusal(wrong), "places 5 tasks but SLURM_STEP_NUM_TASKS is 6"));
  wrong = slurm;
  wrong["SLURM_STEP_TASKS_PER_NODE"] = "2,3";
  CHECK(contains(refusal(wrong), "SLURM_STEP_TASKS_PER_NODE lists 2 hosts but "
                                 "SLURM_STEP_NODELIST 3"));
  wrong = slurm;
  wrong["SLURM_STEP_NODELIST"] = "node[01-02";
  CHECK(contains(refusal(wrong), "SLURM_STEP_NODELIST = \"node[01-02\" is not a Slurm list"));
  wrong = slurm;
  wrong.erase("SLURM_STEP_TASKS_PER_NODE");
  CHECK(contains(refusal(wrong), "SLURM_STEP_TASKS_PER_NODE is not"));
  wrong = slurm;
  wrong["SLURM_PROCID"] = "5";
  CHECK(contains(refusal(wrong), "SLURM_PROCID 5 is not below SLURM_STEP_NUM_TASKS 5"));
}

TEST_CASE("Slurm with srun --resv-ports: each task listens on its local rank's reserved port") {
  const env slurm{{"SLURM_PROCID", "3"}, {"SLURM_STEP_NUM_TASKS", "5"},
                  {"SLURM_STEP_NODELIST", "node[01-02],gpu7"},
                  {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"}, {"SLURM_JOB_ID", "123"},
                  {"SLURM_STEP_RESV_PORTS", "12000,12005-12006"}};
  const auto spec = resolve(slurm);
  CHECK(spec.listen == network_address{"0.0.0.0", 12005}); // local rank 1 on node02
  CHECK(spec.coordinator == network_address{"node01", 12000});
  REQUIRE(spec.peers.size() == 5);
  CHECK(spec.peers[0] == network_address{"node01", 12000});
  CHECK(spec.peers[1] == network_address{"node01", 12005});
  CHECK(spec.peers[2] == network_address{"node02", 12000});
  CHECK(spec.peers[4] == network_address{"gpu7", 12000});
  // The reserved ports win over the program's port base.
  CHECK(resolve(slurm, {.slurm_port_base = 9000}).listen.port == 12005);
  const auto fields = detail::from_slurm(slurm, 8888);
  REQUIRE(fields);
  CHECK(fields->listen.from == "SLURM_STEP_RESV_PORTS");
  CHECK(fields->coordinator.from == "SLURM_STEP_NODELIST, SLURM_STEP_RESV_PORTS");

  auto rank0 = slurm;
  rank0["SLURM_PROCID"] = "0";
  rank0["SLURM_STEP_RESV_PORTS"] = "12000-12003";
  CHECK(resolve(rank0).listen.port == 12000); // the coordinator's port

  auto too_few = slurm;
  too_few["SLURM_STEP_RESV_PORTS"] = "12000";
  CHECK(contains(refusal(too_few), "SLURM_STEP_RESV_PORTS = \"12000\" reserves 1 ports but "
                                   "node01 runs 2 tasks (SLURM_STEP_TASKS_PER_NODE)"));
  auto malformed = slurm;
  malformed["SLURM_STEP_RESV_PORTS"] = "12003-12000";
  CHECK(contains(refusal(malformed), "SLURM_STEP_RESV_PORTS = \"12003-12000\" is not a Slurm "
                                     "list: a descending range"));
  malformed["SLURM_STEP_RESV_PORTS"] = "70000-70001";
  CHECK(contains(refusal(malformed), "70000-70001 is not within the ports 1 to 65535"));
  malformed["SLURM_STEP_RESV_PORTS"] = "port";
  CHECK(contains(refusal(malformed), "SLURM_STEP_RESV_PORTS = \"port\" is not a whole number"));
}

TEST_CASE("Slurm's compressed lists") {
  using detail::expand_hostlist;
  using detail::expand_tasks_per_node;
  CHECK(expand_hostlist("a,b", "L") == std::vector<std::string>{"a", "b"});
  CHECK(expand_hostlist("n[08-11]", "L")
        == std::vector<std::string>{"n08", "n09", "n10", "n11"});
  CHECK(expand_hostlist("r[1-2]n[3,5]", "L")
        == std::vector<std::string>{"r1n3", "r1n5", "r2n3", "r2n5"});
  CHECK(expand_hostlist("gpu[1-2,4]-ib,login", "L")
        == std::vector<std::string>{"gpu1-ib", "gpu2-ib", "gpu4-ib", "login"});
  CHECK(expand_tasks_per_node("2(x3),1", "T") == std::vector<std::size_t>{2, 2, 2, 1});
  using detail::expand_port_list;
  CHECK(expand_port_list("12000-12003", "P")
        == std::vector<std::uint16_t>{12000, 12001, 12002, 12003});
  CHECK(expand_port_list("12000,12005-12006", "P")
        == std::vector<std::uint16_t>{12000, 12005, 12006});
  CHECK(expand_port_list("65535", "P") == std::vector<std::uint16_t>{65535});
  CHECK(contains(error_of<value_error>([] { expand_port_list("0-1", "P"); }),
                 "0-1 is not within the ports 1 to 65535"));
  CHECK(contains(error_of<value_error>([] { expand_port_list("1-65535,1-2", "P"); }),
                 "more than 65535 ports"));
  CHECK(contains(error_of<value_error>([] { expand_port_list("1,,2", "P"); }),
                 "is not a Slurm list"));
  CHECK(contains(error_of<value_error>([] { expand_hostlist("n[3-1]", "L"); }),
                 "a descending range 3-1"));
  CHECK(contains(error_of<value_error>([] { expand_hostlist("n[[1]]", "L"); }), "nested"));
  CHECK(contains(error_of<value_error>([] { expand_hostlist("a,,b", "L"); }), "an empty name"));
  CHECK(contains(error_of<value_error>([] { expand_hostlist("n[1-x]", "L"); }),
                 "is not a whole number"));
  CHECK(contains(error_of<value_error>([] { expand_hostlist("n[0-99999999]", "L"); }),
                 "more than"));
  CHECK(contains(error_of<value_error>([] { expand_tasks_per_node("2(3)", "T"); }),
                 "expected N or N(xM)"));
}

TEST_CASE("precedence: TF_CONFIG > torchrun > Open MPI > Slurm; LOCKSTEP_* and options on top") {
  const env torch{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"},
                  {"MASTER_PORT", "1"}};
  auto both = torch;
  both["TF_CONFIG"] =
    R"({"cluster": {"worker": ["w0:1", "w1:1", "w2:1"]}, "task": {"type": "worker", "index": 0}})";
  CHECK(resolve(both).source == "TF_CONFIG");

  auto inside_slurm = torch;
  inside_slurm["SLURM_PROCID"] = "0";
  inside_slurm["SLURM_STEP_NODELIST"] = "n1";
  CHECK(resolve(inside_slurm).source == "torchrun");

  auto overridden = torch;
  overridden["LOCKSTEP_COORDINATOR"] = "head:7000";
  overridden["LOCKSTEP_JOB_ID"] = "nightly";
  const auto spec = resolve(overridden);
  CHECK(spec.source == "torchrun");
  CHECK(spec.coordinator == network_address{"head", 7000});
  CHECK(spec.job_id == "nightly");
  CHECK(resolve(overridden, {.coordinator = "opt:8000"}).coordinator
        == network_address{"opt", 8000});

  overridden["LOCKSTEP_RANK"] = "5";
  CHECK(contains(refusal(overridden),
                 "rank 5 (LOCKSTEP_RANK) is not below the world size 2 (WORLD_SIZE)"));
  CHECK(contains(refusal({{"LOCKSTEP_LISTEN", "nowhere"}}), "LOCKSTEP_LISTEN = \"nowhere\""));
}

TEST_CASE("LOCKSTEP_* or options alone describe a cluster") {
  const auto spec = resolve({{"LOCKSTEP_WORLD_SIZE", "2"}, {"LOCKSTEP_RANK", "1"},
                             {"LOCKSTEP_COORDINATOR", "127.0.0.1:5000"}});
  CHECK(spec.source == "LOCKSTEP_*");
  CHECK(spec.rank == 1);
  const auto from_options =
    resolve({}, {.world_size = 3, .rank = 0, .coordinator = "127.0.0.1:5001"});
  CHECK(from_options.source == "options");
  CHECK(from_options.listen.port == 5001);
  CHECK(contains(refusal({{"LOCKSTEP_RANK", "1"}}), "no world size"));
  CHECK(contains(refusal({{"LOCKSTEP_WORLD_SIZE", "2"}}), "no rank"));
  CHECK(contains(refusal({{"LOCKSTEP_WORLD_SIZE", "0"}, {"LOCKSTEP_RANK", "0"}}),
                 "world size 0 (LOCKSTEP_WORLD_SIZE) must be at least 1"));
  CHECK(contains(refusal({}, {.world_size = 2, .rank = 0, .coordinator = "x"}),
                 "cluster_options::coordinator = \"x\""));
}

TEST_CASE("a world size beyond max_world_size is refused at resolution, naming the limit") {
  const env at_limit{{"LOCKSTEP_WORLD_SIZE", std::to_string(max_world_size)},
                     {"LOCKSTEP_RANK", "7"}, {"LOCKSTEP_COORDINATOR", "127.0.0.1:5000"}};
  CHECK(resolve(at_limit).world_size == max_world_size);
  for (const auto* size : {"65537", "4294967297"}) {
    const auto why = refusal({{"LOCKSTEP_WORLD_SIZE", size}, {"LOCKSTEP_RANK", "1"},
                              {"LOCKSTEP_COORDINATOR", "127.0.0.1:5000"}});
    CHECK_MESSAGE(contains(why, std::string("world size ") + size
                                  + " (LOCKSTEP_WORLD_SIZE) is more than 65536, the most workers "
                                    "lockstep supports"),
                  why);
  }
}

TEST_CASE("the generation: the launcher's restart count, LOCKSTEP_GENERATION and options on top") {
  const env torch{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}};
  CHECK(resolve(torch).generation == 0);
  auto restarted = torch;
  restarted["TORCHELASTIC_RESTART_COUNT"] = "2";
  CHECK(resolve(restarted).generation == 2);
  const env slurm{{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "2"},
                  {"SLURM_STEP_NODELIST", "n1"}, {"SLURM_STEP_TASKS_PER_NODE", "2"},
                  {"SLURM_RESTART_COUNT", "3"}};
  CHECK(resolve(slurm).generation == 3);
  // A variable Slurm sets is no restart count for torchrun's workers.
  auto both = torch;
  both["SLURM_RESTART_COUNT"] = "5";
  CHECK(resolve(both).generation == 0);
  restarted["LOCKSTEP_GENERATION"] = "7";
  CHECK(resolve(restarted).generation == 7);
  CHECK(resolve(restarted, {.generation = 9}).generation == 9);
  restarted["LOCKSTEP_GENERATION"] = "-1";
  CHECK(contains(refusal(restarted), "LOCKSTEP_GENERATION = \"-1\" is not a whole number"));
}
