// One program under every launcher (docs/multi_worker.md, "Launchers"):
// tests/multi_worker_worker started as srun, torchrun, a Kubeflow
// PyTorchJob and a Kubeflow TFJob start it, each worker with exactly the
// variables that launcher sets, plus only what the docs tell users to add
// (the token; LOCKSTEP_REPLICAS_PER_WORKER; LOCKSTEP_COORDINATOR where the
// launcher names no coordinator). Every worker runs the
// collectives scenario (every op, dtype and size against closed forms) and
// logs at info level the cluster it resolved, which the test compares with
// what the launcher's variables mean. Then Open MPI's real mpirun, when it
// is installed, and one refusal per launcher. Last, lockstep-run killed by
// SIGKILL: no file of its token is left, and no worker. MULTI_WORKER_PROGRAM
// and LOCKSTEP_RUN (set by meson) name the worker program and lockstep-run.

#include "child_process.hpp"
#include "worker_processes.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

using environment = std::vector<std::string>;

const std::string token_text = "4c6f636b737465702d6c61756e63686572732d746573742d746f6b656e2d3031";

/// A token file as the docs have users make one (`openssl rand -hex 32`
/// into a file of mode 0600), standing in for a file on Slurm's shared
/// file system.
std::string token_file(const temp_folder& folder) {
  const auto path = folder.path() / "cluster-token";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  const auto text = token_text + "\n";
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(fd);
  return path.string();
}

/// The token as a Kubernetes Secret volume mounts it (defaultMode 0400):
/// `token` is a link to `..data/token`, `..data` a link to the current
/// version's folder, which holds the file. Returns the link's path.
std::string secret_volume(const temp_folder& folder) {
  const auto volume = folder.path() / "secret";
  const auto version = volume / "..2026_01_01_00_00_00.000000001";
  fs::create_directories(version);
  const auto path = version / "token";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0400);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, token_text.data(), token_text.size())
          == static_cast<ssize_t>(token_text.size()));
  ::close(fd);
  fs::create_directory_symlink(version.filename(), volume / "..data");
  fs::create_symlink("..data/token", volume / "token");
  return (volume / "token").string();
}

/// One worker program per entry of `environments`, each with `args`,
/// LOCKSTEP_LOG=info and that environment over this process's (without
/// any launcher's variables).
std::vector<process> start_workers(const temp_folder& folder,
                                   const std::vector<environment>& environments,
                                   const std::vector<std::string>& args) {
  std::vector<std::string> argv{test_program("MULTI_WORKER_PROGRAM")};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<process> workers;
  for (std::size_t i = 0; i < environments.size(); ++i) {
    auto env = environments[i];
    env.push_back("LOCKSTEP_LOG=info");
    workers.push_back(spawn(argv, environment_with(env),
                            folder.path() / ("worker" + std::to_string(i) + ".txt")));
  }
  return workers;
}

/// The cluster worker `rank` resolved, as cluster_resolver logs it at info
/// level, up to the job id.
std::string resolved(const std::string& source, std::size_t rank, std::size_t world,
                     std::size_t local_rank, std::size_t local_world,
                     const std::string& coordinator) {
  return "cluster from " + source + ": rank " + std::to_string(rank) + " of "
         + std::to_string(world) + " (local " + std::to_string(local_rank) + " of "
         + std::to_string(local_world) + "), coordinator " + coordinator + ", job ";
}

/// Each worker ended well, having run the collectives of `workers` x
/// `replicas`, and logged `expected[i]` (what resolved() gives, and the job
/// id or its start).
void require_cluster(std::vector<process>& workers, std::size_t replicas,
                     const std::vector<std::string>& expected) {
  wait_all(workers, 120s);
  require_all_ok(workers, "ok collectives: " + std::to_string(workers.size()) + " workers x "
                            + std::to_string(replicas) + " replicas");
  for (std::size_t i = 0; i < workers.size(); ++i) {
    const auto text = workers[i].text();
    CHECK_MESSAGE(text.find(expected[i]) != std::string::npos,
                  "worker " << i << " did not log '" << expected[i] << "':\n" << text);
  }
}

/// One worker that must fail (status 1) before it joins anything, with an
/// error that holds `why`.
void require_refused(const temp_folder& folder, const environment& env, const std::string& why) {
  auto worker = start_workers(folder, {env}, {"collectives"});
  wait_all(worker, 30s);
  const auto text = worker[0].text();
  CHECK_MESSAGE(worker[0].exited_with(1), worker[0].how() << ":\n" << text);
  CHECK_MESSAGE(text.find("worker failed: " + why) != std::string::npos, text);
}

/// A listener on `port` of every address while it lives: torchrun's agent
/// store, which holds MASTER_PORT on the first node.
class port_holder {
public:
  explicit port_holder(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
  }
  ~port_holder() { ::close(fd_); }
  port_holder(const port_holder&) = delete;
  port_holder& operator=(const port_holder&) = delete;

private:
  int fd_;
};

// -- Slurm ---------------------------------------------------------------

/// What srun gives task `task` of a step of `tasks` tasks on this one node
/// (job 4242, step 0), and the token file the batch script exported; with
/// `reserved_ports` (`srun --resv-ports`), SLURM_STEP_RESV_PORTS.
environment srun_task(std::size_t task, std::size_t tasks, const std::string& token,
                      const std::string& reserved_ports = "") {
  const auto n = std::to_string(tasks);
  environment variables{"SLURM_PROCID=" + std::to_string(task),
                        "SLURM_LOCALID=" + std::to_string(task),
                        "SLURM_NODEID=0",
                        "SLURM_NTASKS=" + n,
                        "SLURM_NPROCS=" + n,
                        "SLURM_STEP_NUM_TASKS=" + n,
                        "SLURM_STEP_NUM_NODES=1",
                        "SLURM_NNODES=1",
                        "SLURM_JOB_NUM_NODES=1",
                        "SLURM_STEP_NODELIST=localhost",
                        "SLURM_JOB_NODELIST=localhost",
                        "SLURM_NODELIST=localhost",
                        "SLURMD_NODENAME=localhost",
                        "SLURM_STEP_TASKS_PER_NODE=" + n,
                        "SLURM_TASKS_PER_NODE=" + n,
                        "SLURM_JOB_ID=4242",
                        "SLURM_JOBID=4242",
                        "SLURM_STEP_ID=0",
                        "SLURM_STEPID=0",
                        "SLURM_JOB_NAME=launchers",
                        "SLURM_CPUS_ON_NODE=2",
                        "SLURM_LAUNCH_NODE_IPADDR=127.0.0.1",
                        "LOCKSTEP_CLUSTER_TOKEN_FILE=" + token};
  if (!reserved_ports.empty())
    variables.push_back("SLURM_STEP_RESV_PORTS=" + reserved_ports);
  return variables;
}

// -- torchrun ------------------------------------------------------------

/// What torchrun (static rendezvous, one node, --nproc-per-node N, no
/// --rdzv-id: run id "none") gives worker `rank`; its agent holds
/// MASTER_PORT.
environment torchrun_worker(std::size_t rank, std::size_t workers, int master_port) {
  const auto r = std::to_string(rank);
  const auto n = std::to_string(workers);
  return {"RANK=" + r,
          "LOCAL_RANK=" + r,
          "GROUP_RANK=0",
          "ROLE_RANK=" + r,
          "ROLE_NAME=default",
          "LOCAL_WORLD_SIZE=" + n,
          "WORLD_SIZE=" + n,
          "GROUP_WORLD_SIZE=1",
          "ROLE_WORLD_SIZE=" + n,
          "MASTER_ADDR=127.0.0.1",
          "MASTER_PORT=" + std::to_string(master_port),
          "TORCHELASTIC_RESTART_COUNT=0",
          "TORCHELASTIC_MAX_RESTARTS=0",
          "TORCHELASTIC_RUN_ID=none",
          "TORCHELASTIC_USE_AGENT_STORE=True",
          "TORCH_NCCL_ASYNC_ERROR_HANDLING=1"};
}

// -- Kubeflow ------------------------------------------------------------

/// What the training operator gives pod `rank` of a PyTorchJob with one
/// Master and `pods` - 1 Workers (RANK: master 0, worker i is i + 1), with
/// an elasticPolicy (maxRestarts 3); MASTER_ADDR stands in for the
/// master's service name.
environment pytorchjob_pod(std::size_t rank, std::size_t pods, int master_port,
                           const std::string& token) {
  return {"MASTER_ADDR=localhost",
          "MASTER_PORT=" + std::to_string(master_port),
          "WORLD_SIZE=" + std::to_string(pods),
          "RANK=" + std::to_string(rank),
          "PET_NPROC_PER_NODE=auto",
          "PET_NODE_RANK=" + std::to_string(rank),
          "PET_RDZV_ENDPOINT=launchers-worker-0:" + std::to_string(master_port),
          "PET_RDZV_BACKEND=c10d",
          "PET_NNODES=" + std::to_string(pods - 1),
          "PET_MAX_RESTARTS=3",
          "PYTHONUNBUFFERED=0",
          "LOCKSTEP_CLUSTER_TOKEN_FILE=" + token};
}

/// TF_CONFIG as the training operator writes it for task `type` `index` of
/// a TFJob with one chief and `workers` workers, all on this host from
/// port `base` (the chief first); `sparse` as with enableDynamicWorker.
std::string tf_config(const std::string& type, std::size_t index, std::size_t workers, int base,
                      bool sparse = false) {
  std::string worker_list;
  for (std::size_t i = 0; i < workers; ++i)
    worker_list += (i == 0 ? "\"localhost:" : ",\"localhost:") + std::to_string(base + 1 + i)
                   + "\"";
  return "TF_CONFIG={\"cluster\":{\"chief\":[\"localhost:" + std::to_string(base)
         + "\"],\"worker\":[" + worker_list + "]},\"task\":{\"type\":\"" + type
         + "\",\"index\":" + std::to_string(index) + "},\"environment\":\"cloud\""
         + (sparse ? ",\"sparseCluster\":true" : "") + "}";
}

} // namespace

TEST_CASE("Slurm: srun's variables, 3 tasks on one node, ports from the program's port base") {
  temp_folder folder;
  const auto token = token_file(folder);
  const auto base = free_ports(3); // tasks 0, 1, 2 listen on base + local rank
  std::vector<environment> tasks;
  std::vector<std::string> expected;
  for (std::size_t task = 0; task < 3; ++task) {
    tasks.push_back(srun_task(task, 3, token));
    expected.push_back(resolved("Slurm", task, 3, task, 3, "localhost:" + std::to_string(base))
                       + "slurm-4242.0");
  }
  auto workers = start_workers(folder, tasks, {"--slurm-port-base", std::to_string(base),
                                               "collectives"});
  require_cluster(workers, 1, expected);
}

TEST_CASE("Slurm: srun --resv-ports, 3 tasks on one node listen on the step's reserved ports") {
  temp_folder folder;
  const auto token = token_file(folder);
  const auto base = free_ports(3);
  const auto reserved = std::to_string(base) + "-" + std::to_string(base + 2);
  std::vector<environment> tasks;
  std::vector<std::string> expected;
  for (std::size_t task = 0; task < 3; ++task) {
    tasks.push_back(srun_task(task, 3, token, reserved));
    expected.push_back(resolved("Slurm", task, 3, task, 3, "localhost:" + std::to_string(base))
                       + "slurm-4242.0");
  }
  // No --slurm-port-base: the reserved ports replace the default base.
  auto workers = start_workers(folder, tasks, {"collectives"});
  require_cluster(workers, 1, expected);
}

TEST_CASE("Slurm: a step whose task counts disagree is refused naming the variables") {
  temp_folder folder;
  auto task = srun_task(0, 3, token_file(folder));
  std::replace(task.begin(), task.end(), std::string("SLURM_STEP_TASKS_PER_NODE=3"),
               std::string("SLURM_STEP_TASKS_PER_NODE=2"));
  require_refused(folder, task,
                  "Slurm: SLURM_STEP_TASKS_PER_NODE places 2 tasks but SLURM_STEP_NUM_TASKS is 3");
}

TEST_CASE("torchrun: 2 workers x 2 replicas, the coordinator on MASTER_PORT + 1 while "
          "torchrun's agent store holds MASTER_PORT") {
  temp_folder folder;
  const auto ports = free_ports(2);
  const port_holder agent_store(ports);
  const auto coordinator = "127.0.0.1:" + std::to_string(ports + 1);
  std::vector<environment> ranks;
  std::vector<std::string> expected;
  for (std::size_t rank = 0; rank < 2; ++rank) {
    auto env = torchrun_worker(rank, 2, ports);
    env.insert(env.end(), {"LOCKSTEP_CLUSTER_TOKEN=" + token_text,
                           "LOCKSTEP_REPLICAS_PER_WORKER=2"});
    ranks.push_back(env);
    // Run id "none" is no run id: a job id derived from MASTER_ADDR:MASTER_PORT.
    expected.push_back(resolved("torchrun", rank, 2, rank, 2, coordinator) + "torch-");
  }
  auto workers = start_workers(folder, ranks, {"collectives"});
  require_cluster(workers, 2, expected);
  for (auto& worker : workers) {
    const auto text = worker.text();
    CHECK_MESSAGE(text.find("job torch-none") == std::string::npos, text);
    CHECK_MESSAGE(text.find("coordinator from MASTER_PORT + 1: torchrun's store holds "
                            "MASTER_PORT")
                    != std::string::npos,
                  text);
  }
}

TEST_CASE("torchrun: MASTER_PORT 65535 leaves the coordinator no port beside the store, and "
          "rank 0 says so") {
  temp_folder folder;
  auto env = torchrun_worker(0, 2, 65535);
  env.push_back("LOCKSTEP_CLUSTER_TOKEN=" + token_text);
  require_refused(folder, env,
                  "cluster from torchrun: a world of 2 workers needs the coordinator's address "
                  "(rank 0's host:port), and torchrun gives none: MASTER_PORT 65535 is "
                  "torchrun's store's");
}

TEST_CASE("Kubeflow PyTorchJob: a Master and 2 Workers, the program run directly in each pod") {
  temp_folder folder;
  const auto token = secret_volume(folder);
  const auto master_port = free_ports(1);
  std::vector<environment> pods;
  std::vector<std::string> expected;
  for (std::size_t rank = 0; rank < 3; ++rank) {
    pods.push_back(pytorchjob_pod(rank, 3, master_port, token));
    // No LOCAL_RANK: one worker per pod. No TORCHELASTIC_RUN_ID: a job id
    // derived from the master's address, alike in every pod.
    expected.push_back(resolved("torchrun", rank, 3, 0, 1,
                                "localhost:" + std::to_string(master_port))
                       + "torch-");
  }
  auto workers = start_workers(folder, pods, {"collectives"});
  require_cluster(workers, 1, expected);
}

TEST_CASE("Kubeflow PyTorchJob: a pod with another WORLD_SIZE is refused naming the field") {
  temp_folder folder;
  const auto token = token_file(folder);
  const auto master_port = free_ports(1);
  auto master = pytorchjob_pod(0, 2, master_port, token);
  auto stray = pytorchjob_pod(1, 3, master_port, token);
  auto workers = start_workers(folder, {master, stray}, {"refused", "world size 3, the "
                                                                    "coordinator's is 2"});
  wait_all(workers, 60s);
  require_all_ok(workers, "");
  CHECK_MESSAGE(workers[0].text().find("join timed out") != std::string::npos, workers[0].text());
  CHECK_MESSAGE(workers[1].text().find("refused: worker 1: world size 3, the coordinator's is 2")
                  != std::string::npos,
                workers[1].text());
}

TEST_CASE("Kubeflow TFJob: a chief and 2 workers x 2 replicas from TF_CONFIG") {
  temp_folder folder;
  const auto token = secret_volume(folder);
  const auto base = free_ports(3); // the chief's port, then each worker's
  const auto chief = "localhost:" + std::to_string(base);
  std::vector<environment> pods;
  std::vector<std::string> expected;
  for (std::size_t rank = 0; rank < 3; ++rank) {
    const auto config = rank == 0 ? tf_config("chief", 0, 2, base)
                                  : tf_config("worker", rank - 1, 2, base);
    pods.push_back({config, "LOCKSTEP_CLUSTER_TOKEN_FILE=" + token,
                    "LOCKSTEP_REPLICAS_PER_WORKER=2"});
    // Every address names localhost: one host, its local ranks.
    expected.push_back(resolved("TF_CONFIG", rank, 3, rank, 3, chief) + "tf-");
  }
  auto workers = start_workers(folder, pods, {"collectives"});
  require_cluster(workers, 2, expected);
}

TEST_CASE("Kubeflow TFJob: enableDynamicWorker's sparse TF_CONFIG is refused naming it") {
  temp_folder folder;
  const auto base = free_ports(3);
  require_refused(folder,
                  {tf_config("worker", 0, 2, base, true),
                   "LOCKSTEP_CLUSTER_TOKEN_FILE=" + token_file(folder)},
                  "TF_CONFIG: sparseCluster is set");
}

TEST_CASE("Open MPI: mpirun -np 2 with the coordinator and the token passed by -x") {
  const auto mpirun = on_path("mpirun");
  if (!mpirun) {
    MESSAGE("skipped: mpirun is not installed (Debian: openmpi-bin; tools/install-deps.sh)");
    return;
  }
  temp_folder folder;
  const auto coordinator = "127.0.0.1:" + std::to_string(free_ports(1));
  const auto run = [&](const std::vector<std::string>& exported, const std::string& name) {
    std::vector<std::string> argv{*mpirun};
    if (::geteuid() == 0)
      argv.push_back("--allow-run-as-root");
    argv.insert(argv.end(), {"--oversubscribe", "-np", "2"});
    for (const auto& variable : exported)
      argv.insert(argv.end(), {"-x", variable});
    argv.insert(argv.end(), {test_program("MULTI_WORKER_PROGRAM"), "collectives"});
    auto launcher = std::vector<process>{spawn(argv, environment_with({}), folder.path() / name)};
    wait_all(launcher, 120s);
    return launcher[0];
  };

  SUBCASE("2 workers x 2 replicas form one cluster") {
    const auto mpi = run({"LOCKSTEP_COORDINATOR=" + coordinator, "LOCKSTEP_CLUSTER_TOKEN="
                          + token_text, "LOCKSTEP_REPLICAS_PER_WORKER=2", "LOCKSTEP_LOG=info"},
                         "mpirun.txt");
    const auto text = mpi.text();
    CHECK_MESSAGE(mpi.exited_ok(), mpi.how() << ":\n" << text);
    const std::string ok = "ok collectives: 2 workers x 2 replicas";
    const auto first = text.find(ok);
    CHECK_MESSAGE((first != std::string::npos && text.find(ok, first + 1) != std::string::npos),
                  "both ranks must print '" << ok << "':\n" << text);
    for (std::size_t rank = 0; rank < 2; ++rank)
      CHECK_MESSAGE(text.find(resolved("Open MPI", rank, 2, rank, 2, coordinator) + "mpi-")
                      != std::string::npos,
                    text);
  }
  SUBCASE("without LOCKSTEP_COORDINATOR every rank fails naming it") {
    const auto mpi = run({"LOCKSTEP_CLUSTER_TOKEN=" + token_text}, "no-coordinator.txt");
    const auto text = mpi.text();
    CHECK_MESSAGE(!mpi.exited_ok(), text);
    CHECK_MESSAGE(text.find("Open MPI names none: set LOCKSTEP_COORDINATOR") != std::string::npos,
                  text);
  }
}

// -- lockstep-run ----------------------------------------------------------


TEST_CASE("lockstep-run: a launcher killed by SIGKILL leaves no token file, and no worker") {
  temp_folder folder;
  // Where lockstep-run would write a file: $TMPDIR (else /tmp).
  const auto tmp = folder.path() / "tmp";
  fs::create_directory(tmp);
  // Each worker reads the token through the path it is given (as the
  // library does), says so with its pid, and waits.
  const std::string script = R"(echo "token of $(wc -c < "$LOCKSTEP_CLUSTER_TOKEN_FILE") bytes";
    echo "ready $$"; exec sleep 60)";
  auto launcher = std::vector<process>{
    spawn({test_program("LOCKSTEP_RUN"), "-n", "2", "sh", "-c", script},
          environment_with({"TMPDIR=" + tmp.string()}), folder.path() / "run.txt")};
  std::vector<pid_t> workers;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (workers.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
    workers.clear();
    std::istringstream lines{launcher[0].text()};
    for (std::string line; std::getline(lines, line);)
      if (const auto at = line.find("] ready "); at != std::string::npos)
        workers.push_back(std::stoi(line.substr(at + 8)));
  }
  REQUIRE_MESSAGE(workers.size() == 2, launcher[0].text());
  REQUIRE(::kill(launcher[0].pid, SIGKILL) == 0);
  wait_all(launcher, 10s);
  const auto text = launcher[0].text();
  CHECK_MESSAGE(text.find("[0] token of 64 bytes") != std::string::npos, text);
  CHECK_MESSAGE(text.find("[1] token of 64 bytes") != std::string::npos, text);
  // No file of the secret is left where lockstep-run could have put one.
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(tmp))
    left.push_back(entry.path().string());
  CHECK_MESSAGE(left.empty(), "left in $TMPDIR: " << left.front());
  // The workers died with their launcher.
  const auto gone_by = std::chrono::steady_clock::now() + 10s;
  for (const auto pid : workers) {
    while (!has_ended(pid) && std::chrono::steady_clock::now() < gone_by)
      std::this_thread::sleep_for(20ms);
    CHECK_MESSAGE(has_ended(pid), "worker " << pid << " outlived its launcher");
    if (!has_ended(pid))
      ::kill(pid, SIGKILL);
  }
}
