// multi_worker_mirrored_strategy with MPI's collectives between the
// workers (LOCKSTEP_COMMUNICATOR=mpi) under Open MPI's real mpirun: the
// strategy's collectives scenario (every op, dtype and size against closed
// forms) on 2 and 3 ranks; the mismatch scenario; the main job's metrics
// over MPI and over lockstep's own transport, the same; a rank killed
// mid-collective ends the job with an error and no process of it left;
// and the refusals: workers that are not one MPI job, another value.
// Then the same job under `lockstep-run --mpi` (one mpirun job that
// lockstep-run starts): the collectives scenario, a rank killed
// mid-collective, SIGUSR1 and SIGTERM passed on, lockstep-run killed by
// SIGKILL, and a wrong use (no mpirun, another MPI's mpirun).
// Exits 77 (skipped) without mpirun. MULTI_WORKER_PROGRAM,
// TRAIN_FASHION_MNIST and LOCKSTEP_RUN (set by meson) name the programs.

#define DOCTEST_CONFIG_IMPLEMENT
#include "fashion_mnist_files.hpp"
#include "worker_processes.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string token = "LOCKSTEP_CLUSTER_TOKEN=mpi-strategy-test-token-0123456789ab";

/// `argv` under `mpirun -n ranks`, with `exported` (NAME=VALUE) passed to
/// every rank; its output (every rank's) in `folder`/`name`.
process start_mpirun(const temp_folder& folder, int ranks, const std::vector<std::string>& argv,
                     const std::vector<std::string>& exported, const std::string& name) {
  std::vector<std::string> command{*on_path("mpirun")};
  if (::geteuid() == 0)
    command.push_back("--allow-run-as-root");
  command.insert(command.end(), {"--oversubscribe", "-n", std::to_string(ranks)});
  for (const auto& variable : exported)
    command.insert(command.end(), {"-x", variable});
  command.insert(command.end(), argv.begin(), argv.end());
  return spawn(command, environment_with({}), folder.path() / name);
}

/// The variables every rank gets: the coordinator, the token, and MPI's
/// collectives (or lockstep's own: `communicator`).
std::vector<std::string> job_variables(const std::string& communicator,
                                       std::vector<std::string> extra = {}) {
  extra.insert(extra.end(), {"LOCKSTEP_COORDINATOR=127.0.0.1:" + std::to_string(free_ports(1)),
                             token, "LOCKSTEP_COMMUNICATOR=" + communicator, "LOCKSTEP_LOG=info",
                             "CUDA_VISIBLE_DEVICES="});
  return extra;
}

std::string contents(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), {}};
}

/// How often `text` holds `part`.
std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
    ++n;
  return n;
}

/// The pids of the processes whose environment holds `variable` (NAME=VALUE).
std::vector<pid_t> processes_with(const std::string& variable) {
  std::vector<pid_t> pids;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::ifstream in(entry.path() / "environ");
    for (std::string item; std::getline(in, item, '\0');)
      if (item == variable)
        pids.push_back(std::stoi(name));
  }
  return pids;
}

/// `argv` under lockstep-run (its options first), with `extra` (NAME=VALUE,
/// in place of this process's NAME) in its environment; its output in
/// `folder`/`name`.
process start_lockstep_run(const temp_folder& folder, const std::vector<std::string>& argv,
                           std::vector<std::string> extra, const std::string& name) {
  std::vector<std::string> command{test_program("LOCKSTEP_RUN")};
  command.insert(command.end(), argv.begin(), argv.end());
  extra.push_back("CUDA_VISIBLE_DEVICES=");
  std::vector<std::string> environment;
  for (const auto& entry : environment_with({})) {
    bool replaced = false;
    for (const auto& variable : extra)
      replaced = replaced || entry.starts_with(variable.substr(0, variable.find('=') + 1));
    if (!replaced)
      environment.push_back(entry);
  }
  environment.insert(environment.end(), extra.begin(), extra.end());
  return spawn(command, environment, folder.path() / name);
}

} // namespace

TEST_CASE("the strategy's collectives over MPI: every op, dtype and size on 2 and 3 ranks") {
  for (const int ranks : {2, 3}) {
    CAPTURE(ranks);
    temp_folder folder;
    std::vector<process> job{start_mpirun(folder, ranks,
                                          {test_program("MULTI_WORKER_PROGRAM"), "collectives"},
                                          job_variables("mpi", {"LOCKSTEP_REPLICAS_PER_WORKER=2"}),
                                          "collectives.txt")};
    wait_all(job, 180s);
    const auto text = job[0].text();
    INFO(text);
    CHECK(job[0].exited_ok());
    const auto ok = "ok collectives: " + std::to_string(ranks) + " workers x 2 replicas";
    CHECK(count_of(text, ok) == static_cast<std::size_t>(ranks));
    CHECK(count_of(text, "MPI carries the collectives between the " + std::to_string(ranks)
                           + " workers")
          == static_cast<std::size_t>(ranks));
  }
}

TEST_CASE("over MPI, different collectives give every worker the ring's error, and the job goes "
          "on") {
  temp_folder folder;
  std::vector<process> job{start_mpirun(folder, 2,
                                        {test_program("MULTI_WORKER_PROGRAM"), "mismatch"},
                                        job_variables("mpi", {"LOCKSTEP_REPLICAS_PER_WORKER=2"}),
                                        "mismatch.txt")};
  wait_all(job, 120s);
  const auto text = job[0].text();
  INFO(text);
  CHECK(job[0].exited_ok());
  CHECK(count_of(text, "ok mismatch") == 2);
}

TEST_CASE("the main job over MPI gives the metrics it gives over lockstep's own transport") {
  temp_folder folder;
  const auto data = folder.path() / "data";
  write_data(data, 128, 32);
  const auto train = [&](const std::string& communicator) {
    const auto dir = folder.path() / communicator;
    fs::create_directories(dir);
    std::vector<process> job{start_mpirun(
      folder, 2,
      {test_program("TRAIN_FASHION_MNIST"), "--data-dir", data.string(), "--metrics",
       (dir / "metrics.csv").string(), "--checkpoint-dir", (dir / "ckpt").string(), "--replicas",
       "1", "--global-batch", "32", "--epochs", "2", "--seed", "3"},
      job_variables(communicator), communicator + ".txt")};
    wait_all(job, 180s);
    INFO(job[0].text());
    REQUIRE(job[0].exited_ok());
    return contents(dir / "metrics.csv");
  };
  const auto over_mpi = train("mpi");
  const auto own = train("lockstep");
  // Two workers: one combining step, which MPI and lockstep round alike;
  // the time columns differ.
  const auto figures = [](const std::string& csv) {
    std::string out;
    std::istringstream in(csv);
    for (std::string line; std::getline(in, line);) {
      std::size_t at = 0;
      for (int field = 0; field < 4 && at != std::string::npos; ++field)
        at = line.find(',', at + 1);
      out += line.substr(0, at) + "\n";
    }
    return out;
  };
  CHECK(count_of(over_mpi, "\n") == 3); // the header and 2 epochs
  CHECK(figures(over_mpi) == figures(own));
}

TEST_CASE("a rank killed mid-collective ends the MPI job with an error, and no process of it is "
          "left") {
  temp_folder folder;
  const auto tag = "LOCKSTEP_MPI_TEST_JOB=" + std::to_string(::getpid());
  // tests/multi_worker_worker's `lost kill`: the last worker kills itself
  // in the second all-reduce. Open MPI's mpirun then ends the job.
  std::vector<process> job{start_mpirun(folder, 3,
                                        {test_program("MULTI_WORKER_PROGRAM"), "lost", "kill"},
                                        job_variables("mpi", {tag}), "lost.txt")};
  wait_all(job, 120s);
  INFO(job[0].text());
  CHECK(!job[0].exited_ok());
  CHECK(processes_with(tag).empty());
}

TEST_CASE("workers that are not one MPI job are refused, naming the ranks; another value is "
          "refused") {
  temp_folder folder;
  const auto base = free_ports(2);
  const auto start = [&](const std::string& communicator) {
    std::vector<process> workers;
    for (std::size_t i = 0; i < 2; ++i)
      workers.push_back(spawn({test_program("MULTI_WORKER_PROGRAM"), "collectives"},
                              environment_with({tf_config(base, 2, i), token,
                                                "LOCKSTEP_COMMUNICATOR=" + communicator,
                                                "CUDA_VISIBLE_DEVICES="}),
                              folder.path() / (communicator + std::to_string(i) + ".txt")));
    wait_all(workers, 120s);
    return workers;
  };
  // Started without mpirun, each is an MPI job of its own (a singleton).
  auto workers = start("mpi");
  CHECK(!workers[1].exited_ok());
  CHECK_MESSAGE(workers[1].text().find("this process is MPI rank 0 of 1 but lockstep worker 1 of "
                                       "2: the workers must be one MPI job")
                  != std::string::npos,
                workers[1].text());
  workers = start("nccl");
  for (const auto& w : workers) {
    CHECK(!w.exited_ok());
    CHECK_MESSAGE(w.text().find("LOCKSTEP_COMMUNICATOR must be \"lockstep\" or \"mpi\", got "
                                "'nccl'")
                    != std::string::npos,
                  w.text());
  }
}

TEST_CASE("lockstep-run with LOCKSTEP_COMMUNICATOR=mpi runs one mpirun job: the collectives "
          "give what they give under mpirun") {
  temp_folder folder;
  // LOCKSTEP_COMMUNICATOR=mpi in lockstep-run's environment implies --mpi.
  std::vector<process> job{start_lockstep_run(
    folder, {"-n", "2", "--replicas-per-worker", "2", test_program("MULTI_WORKER_PROGRAM"),
             "collectives"},
    {"LOCKSTEP_COMMUNICATOR=mpi", "LOCKSTEP_LOG=info"}, "collectives.txt")};
  wait_all(job, 120s);
  const auto text = job[0].text();
  INFO(text);
  CHECK(job[0].exited_ok());
  // Every line carries its rank, as lockstep-run's forked workers' do.
  for (const std::string rank : {"[0] ", "[1] "}) {
    CHECK(count_of(text, rank + "ok collectives: 2 workers x 2 replicas") == 1);
    CHECK(count_of(text, "MPI carries the collectives between the 2 workers") == 2);
  }
  // The cluster came from Open MPI's variables, the token through
  // lockstep-run's descriptor.
  CHECK(count_of(text, "cluster from Open MPI: rank ") == 2);
}

TEST_CASE("a rank killed mid-collective under lockstep-run --mpi ends the job with an error, and "
          "no process of it is left") {
  const auto program = test_program("MULTI_WORKER_PROGRAM");
  struct kill_case {
    std::string what;
    std::vector<std::string> argv, environment;
    std::string printed; // what the killed rank printed
  };
  const std::vector<kill_case> cases{
    // The last of 3 workers kills itself before the second all-reduce,
    // which the others are in.
    {"lost kill", {program, "lost", "kill"}, {}, ""},
    // LOCKSTEP_FAULT (runtime/fault_injection.hpp): worker 1 kills itself in
    // its 3rd collective, before its agreement's record goes out, or as its
    // all-reduce's data starts, when the others are blocked inside
    // MPI_Allreduce, which only mpirun can end.
    {"agree",
     {program, "collectives"},
     {"LOCKSTEP_FAULT=agree:kill:3", "LOCKSTEP_FAULT_RANK=1"},
     "[1] LOCKSTEP_FAULT: killed at agree"},
    {"reduce-scatter",
     {program, "collectives"},
     {"LOCKSTEP_FAULT=reduce-scatter:kill:3", "LOCKSTEP_FAULT_RANK=1"},
     "[1] LOCKSTEP_FAULT: killed at reduce-scatter"}};
  for (const auto& c : cases) {
    CAPTURE(c.what);
    temp_folder folder;
    const auto tag = "LOCKSTEP_MPI_TEST_JOB=run-" + std::to_string(::getpid());
    auto argv = c.argv;
    argv.insert(argv.begin(), {"-n", "3", "--mpi"});
    auto environment = c.environment;
    environment.push_back(tag);
    std::vector<process> job{start_lockstep_run(folder, argv, environment, "killed.txt")};
    wait_all(job, 60s);
    const auto text = job[0].text();
    INFO(text);
    REQUIRE(job[0].status);
    CHECK(WIFEXITED(*job[0].status));
    CHECK(!job[0].exited_ok());
    CHECK(text.find(c.printed) != std::string::npos);
    CHECK(text.find("lockstep-run: the MPI job failed (mpirun's exit status ") != std::string::npos);
    // lockstep-run, mpirun and every rank carry the tag.
    CHECK(processes_with(tag).empty());
  }
}

TEST_CASE("lockstep-run --mpi passes SIGUSR1 on to every rank through mpirun, and SIGTERM stops "
          "the job") {
  temp_folder folder;
  const auto tag = "LOCKSTEP_MPI_TEST_JOB=signals-" + std::to_string(::getpid());
  const std::string script = R"(trap 'echo "got USR1"' USR1; echo ready;
    while :; do sleep 0.1; done)";
  std::vector<process> launcher{
    start_lockstep_run(folder, {"-n", "2", "--mpi", "sh", "-c", script}, {tag}, "run.txt")};
  const auto wait_for = [&](const std::string& part, std::size_t count) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (count_of(launcher[0].text(), part) < count && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(50ms);
    return count_of(launcher[0].text(), part) == count;
  };
  REQUIRE_MESSAGE(wait_for("] ready", 2), launcher[0].text());
  REQUIRE(::kill(launcher[0].pid, SIGUSR1) == 0);
  CHECK_MESSAGE(wait_for("] got USR1", 2), launcher[0].text());
  CHECK(launcher[0].text().find("[0] got USR1") != std::string::npos);
  CHECK(launcher[0].text().find("[1] got USR1") != std::string::npos);
  REQUIRE(::kill(launcher[0].pid, SIGTERM) == 0);
  wait_all(launcher, 30s);
  INFO(launcher[0].text());
  CHECK(launcher[0].exited_with(128 + SIGTERM));
  CHECK(processes_with(tag).empty());
}

TEST_CASE("lockstep-run --mpi killed by SIGKILL: mpirun and every rank die with it") {
  temp_folder folder;
  const auto tag = "LOCKSTEP_MPI_TEST_JOB=sigkill-" + std::to_string(::getpid());
  // Each rank reads the token through the path it is given (lockstep-run's
  // descriptor, as the library does), says so, and waits.
  const std::string script = R"(echo "token of $(wc -c < "$LOCKSTEP_CLUSTER_TOKEN_FILE") bytes";
    echo "ready"; exec sleep 60)";
  std::vector<process> launcher{
    start_lockstep_run(folder, {"-n", "2", "--mpi", "sh", "-c", script}, {tag}, "run.txt")};
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (count_of(launcher[0].text(), "] ready") < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  REQUIRE_MESSAGE(count_of(launcher[0].text(), "] ready") == 2, launcher[0].text());
  // lockstep-run, mpirun and 2 ranks (a rank between its echo and its exec
  // may show no environment for a moment).
  const auto seen_by = std::chrono::steady_clock::now() + 10s;
  while (processes_with(tag).size() != 4 && std::chrono::steady_clock::now() < seen_by)
    std::this_thread::sleep_for(20ms);
  REQUIRE(processes_with(tag).size() == 4);
  REQUIRE(::kill(launcher[0].pid, SIGKILL) == 0);
  wait_all(launcher, 10s);
  const auto text = launcher[0].text();
  INFO(text);
  CHECK(text.find("[0] token of 64 bytes") != std::string::npos);
  CHECK(text.find("[1] token of 64 bytes") != std::string::npos);
  const auto gone_by = std::chrono::steady_clock::now() + 10s;
  while (!processes_with(tag).empty() && std::chrono::steady_clock::now() < gone_by)
    std::this_thread::sleep_for(20ms);
  const auto left = processes_with(tag);
  CHECK_MESSAGE(left.empty(), left.size() << " process(es) of the job outlived lockstep-run");
  for (const auto pid : left)
    ::kill(pid, SIGKILL);
}

TEST_CASE("lockstep-run --mpi without Open MPI's mpirun is a clear error, and starts nothing") {
  temp_folder folder;
  const auto program = test_program("MULTI_WORKER_PROGRAM");
  // No mpirun on PATH.
  std::vector<process> job{start_lockstep_run(folder, {"-n", "2", "--mpi", program, "collectives"},
                                              {"PATH=" + folder.path().string()}, "none.txt")};
  wait_all(job, 30s);
  CHECK(job[0].exited_with(2));
  CHECK_MESSAGE(job[0].text().find("lockstep-run: --mpi (or LOCKSTEP_COMMUNICATOR=mpi) starts the "
                                   "workers as one Open MPI job, but mpirun is not on PATH")
                  != std::string::npos,
                job[0].text());
  CHECK(job[0].text().find("[0]") == std::string::npos);
  // An mpirun that is not Open MPI's (MPICH's says "HYDRA build details").
  const auto fake = folder.path() / "mpirun";
  std::ofstream(fake) << "#!/bin/sh\necho 'HYDRA build details:'\n";
  fs::permissions(fake, fs::perms::owner_all);
  job = {start_lockstep_run(folder, {"-n", "2", program, "collectives"},
                            {"PATH=" + folder.path().string(), "LOCKSTEP_COMMUNICATOR=mpi"},
                            "other.txt")};
  wait_all(job, 30s);
  CHECK(job[0].exited_with(2));
  CHECK_MESSAGE(job[0].text().find(" is not Open MPI's mpirun (its --version says 'HYDRA build "
                                   "details:')")
                  != std::string::npos,
                job[0].text());
}

int main(int argc, char** argv) {
  if (!on_path("mpirun")) {
    std::printf("skipped: mpirun is not installed (Debian: openmpi-bin; tools/install-deps.sh)\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
