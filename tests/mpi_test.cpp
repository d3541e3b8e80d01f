// The collectives over MPI (src/communicators/mpi_communicator.hpp) under
// Open MPI's real mpirun, with 2 and 3 ranks (--oversubscribe: more ranks
// than CPUs here): each rank of tests/mpi_worker checks every collective,
// op, dtype and error path and prints "ok mpi: rank r of N"; then a
// program that initializes MPI itself, at MPI_THREAD_SERIALIZED (which
// suffices) and MPI_THREAD_SINGLE (refused), and finalizes it. Exits 77
// (skipped) where mpirun is not installed. MPI_WORKER (set by meson) names
// the worker program.

#define DOCTEST_CONFIG_IMPLEMENT
#include "child_process.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::optional<std::string> on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream folders(path != nullptr ? path : "");
  std::string folder;
  while (std::getline(folders, folder, ':')) {
    const auto candidate = fs::path(folder) / name;
    if (!folder.empty() && ::access(candidate.c_str(), X_OK) == 0)
      return candidate.string();
  }
  return std::nullopt;
}

std::string text_of(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), {}};
}

struct job {
  child_exit exit;
  std::string text;
};

/// Runs the worker (with `argument`, if any) under `mpirun -n ranks`,
/// passing it the variables `exported` (NAME=VALUE).
job run_job(int ranks, const std::string& argument,
            const std::vector<std::string>& exported = {}) {
  const char* worker = std::getenv("MPI_WORKER");
  REQUIRE_MESSAGE(worker != nullptr, "MPI_WORKER is not set (run the test through meson)");
  const auto out = fs::temp_directory_path()
                   / ("lockstep-mpi-test-" + std::to_string(::getpid()) + "-"
                      + std::to_string(ranks) + argument + ".txt");
  child_command command;
  command.argv = {*on_path("mpirun")};
  if (::geteuid() == 0)
    command.argv.push_back("--allow-run-as-root");
  // --timeout: mpirun ends the whole job, every rank, if it hangs.
  command.argv.insert(command.argv.end(), {"--oversubscribe", "--timeout", "240"});
  for (const auto& variable : exported)
    command.argv.insert(command.argv.end(), {"-x", variable});
  command.argv.insert(command.argv.end(), {"-n", std::to_string(ranks), worker});
  if (!argument.empty())
    command.argv.push_back(argument);
  command.out = out;
  command.limit = std::chrono::seconds{300};
  const auto exit = run_child_process(command);
  const auto text = text_of(out);
  fs::remove(out);
  return {exit, text};
}

/// Runs the worker under `mpirun -n ranks`, which must pass on every
/// rank; returns its output.
std::string run_ranks(int ranks, const std::string& argument = "") {
  const auto [exit, text] = run_job(ranks, argument);
  CHECK_MESSAGE(!exit.timed_out, "mpirun did not end:\n" << text);
  CHECK_MESSAGE(exit.status == 0, "mpirun exited with " << exit.status << ":\n" << text);
  for (int r = 0; r < ranks; ++r)
    CHECK_MESSAGE(text.find("ok mpi: rank " + std::to_string(r) + " of " + std::to_string(ranks))
                    != std::string::npos,
                  "rank " << r << " did not pass:\n" << text);
  return text;
}

} // namespace

TEST_CASE("mpi_communicator under mpirun -n 2") {
  const auto text = run_ranks(2);
  MESSAGE(text); // what the ranks observed of MPI's order
}

TEST_CASE("mpi_communicator under mpirun -n 3") {
  const auto text = run_ranks(3);
  MESSAGE(text);
}

TEST_CASE("a program that initializes MPI itself: at MPI_THREAD_SERIALIZED, and below it") {
  run_ranks(2, "serialized");
  const auto text = run_ranks(2, "single");
  MESSAGE(text);
}

TEST_CASE("a rank killed mid-collective ends the job under mpirun, and no rank is left") {
  // LOCKSTEP_FAULT (runtime/fault_injection.hpp): rank 1 kills itself in
  // its 3rd collective, before its agreement's record goes out or with its
  // all-reduce in flight; Open MPI's mpirun ends the others.
  for (const std::string phase : {"agree", "reduce-scatter"})
    for (const int ranks : {2, 3}) {
      CAPTURE(phase);
      CAPTURE(ranks);
      const auto [exit, text] = run_job(
        ranks, "killed", {"LOCKSTEP_FAULT=" + phase + ":kill:3", "LOCKSTEP_FAULT_RANK=1"});
      CHECK_MESSAGE(!exit.timed_out, "mpirun did not end:\n" << text);
      CHECK_MESSAGE(exit.status > 0, "mpirun exited with " << exit.status << ":\n" << text);
      CHECK_MESSAGE(text.find("LOCKSTEP_FAULT: killed at " + phase) != std::string::npos, text);
      CHECK_MESSAGE(text.find("survived") == std::string::npos, text);
      std::istringstream lines(text);
      std::string line;
      int pids = 0;
      while (std::getline(lines, line))
        if (line.rfind("worker pid ", 0) == 0) {
          ++pids;
          const auto pid = static_cast<pid_t>(std::stol(line.substr(11)));
          CHECK_MESSAGE(has_ended(pid), "rank process " << pid << " is left:\n" << text);
        }
      CHECK_MESSAGE(pids == ranks, "every rank prints its pid:\n" << text);
    }
}

int main(int argc, char** argv) {
  if (!on_path("mpirun")) {
    std::cout << "skipped: mpirun is not installed (Debian: openmpi-bin; tools/install-deps.sh)"
              << std::endl;
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
