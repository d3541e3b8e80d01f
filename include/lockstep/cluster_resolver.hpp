#pragma once

// Where a multi-worker program's cluster comes from. Every worker runs the
// same program; a launcher (Kubeflow's TFJob, torchrun or PyTorchJob,
// mpirun, srun, lockstep-run) tells each process who it is through
// environment variables. cluster_resolver reads them, in this precedence
// (the innermost launcher wins, and explicit settings win over all):
//
//   1. `cluster_options` fields set by the program;
//   2. `LOCKSTEP_*` variables: LOCKSTEP_WORLD_SIZE, LOCKSTEP_RANK,
//      LOCKSTEP_LOCAL_RANK, LOCKSTEP_LOCAL_WORLD_SIZE, LOCKSTEP_COORDINATOR
//      (host:port), LOCKSTEP_LISTEN (host:port), LOCKSTEP_JOB_ID,
//      LOCKSTEP_GENERATION;
//   3. `TF_CONFIG` (TF's rules: task types chief, worker, evaluator; at most
//      one chief; the chief is rank 0, worker i is rank i + #chief; the
//      evaluator is outside the group; `ps` and `sparseCluster` refused);
//   4. torchrun / PyTorchJob: RANK, WORLD_SIZE, MASTER_ADDR (and
//      MASTER_PORT, LOCAL_RANK, LOCAL_WORLD_SIZE, TORCHELASTIC_RUN_ID,
//      TORCHELASTIC_RESTART_COUNT); the coordinator is MASTER_ADDR:MASTER_PORT,
//      or MASTER_PORT + 1 when TORCHELASTIC_USE_AGENT_STORE is "True"
//      (torchrun's store holds MASTER_PORT; 65535 then needs an override);
//      a run id of "none" (torchrun's default) counts as unset;
//   5. Open MPI: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (it
//      names no coordinator: give one with an option or LOCKSTEP_COORDINATOR);
//   6. Slurm: SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST
//      (compressed host lists such as `gpu[01-04,7]`), SLURM_STEP_TASKS_PER_NODE
//      (`2(x3),1`), SLURM_JOB_ID, SLURM_RESTART_COUNT; a worker listens on
//      its local rank's port of SLURM_STEP_RESV_PORTS (`srun --resv-ports`,
//      `12000-12003`) when set, else on port_base + local rank, and the
//      coordinator is the first host's first port;
//   7. none of these: one process, no network.
//
// The first of 3-6 that is present gives the cluster; 1 and 2 override its
// fields one by one (so an Open MPI job gets its coordinator from 2). A
// malformed or contradictory setting is a value_error naming the variable
// or field, raised by the constructor, before any socket opens. Which
// source was used is logged at info level and kept in `source`.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {

/// A host and a TCP port, written "host:port" (IPv6: "[::1]:port").
struct network_address {
  std::string host;
  std::uint16_t port = 0; // 0: any free port (a listen address only)

  /// Parses "host:port"; a value_error names `what` (e.g. "MASTER_ADDR")
  /// when the text is no such address.
  static network_address parse(std::string_view text, std::string_view what);

  std::string to_string() const;

  friend bool operator==(const network_address&, const network_address&) = default;
};

/// The most workers a cluster may have: the resolver refuses a larger world
/// size (a typo such as 4294967297 would otherwise size the rendezvous's
/// lists), and the control plane's frames are sized for it.
inline constexpr std::size_t max_world_size = 65536;

/// What a worker learns about its cluster.
struct cluster_spec {
  /// Names the job; workers of different jobs refuse each other.
  std::string job_id;
  /// How many times the launcher restarted the job's world (0 for its
  /// first start): part of every handshake, so that a worker left over
  /// from an earlier generation cannot join a later one.
  std::uint64_t generation = 0;
  /// Workers in the collective group, and this worker's place in it.
  std::size_t world_size = 1;
  std::size_t rank = 0;
  /// Workers on this host, and this worker's place among them.
  std::size_t local_rank = 0;
  std::size_t local_world_size = 1;
  /// Rank 0's control address; empty when world_size is 1.
  std::optional<network_address> coordinator;
  /// Where this worker listens (host "0.0.0.0" and port 0 unless the source
  /// names them).
  network_address listen{"0.0.0.0", 0};
  /// Every rank's address, when the source lists them (TF_CONFIG, Slurm);
  /// else empty and learned at the rendezvous.
  std::vector<network_address> peers;
  /// TF_CONFIG's task type ("chief", "worker", "evaluator") and index;
  /// empty and 0 for other sources.
  std::string task_type;
  std::size_t task_index = 0;
  /// "options", "LOCKSTEP_*", "TF_CONFIG", "torchrun", "Open MPI", "Slurm"
  /// or "single process".
  std::string source = "single process";

  /// True for an evaluator: it runs alone, outside the collective group.
  bool is_evaluator() const { return task_type == "evaluator"; }

  /// TF's is_chief: the chief, the evaluator, or rank 0 when there is no
  /// chief.
  bool is_chief() const;

  friend bool operator==(const cluster_spec&, const cluster_spec&) = default;
};

/// Settings a program passes explicitly; each overrides every source.
struct cluster_options {
  std::optional<std::size_t> world_size;
  std::optional<std::size_t> rank;
  std::optional<std::size_t> local_rank;
  std::optional<std::size_t> local_world_size;
  std::optional<std::string> coordinator; // "host:port"
  std::optional<std::string> listen;      // "host:port"
  std::optional<std::string> job_id;
  std::optional<std::uint64_t> generation;
  /// Slurm: the port of local rank 0 on every host (TF's default 8888),
  /// unless the step reserved ports (SLURM_STEP_RESV_PORTS).
  std::uint16_t slurm_port_base = 8888;
};

/// Resolves the cluster once, at construction (see the file comment).
class cluster_resolver {
public:
  /// Environment variables by name.
  using environment = std::map<std::string, std::string, std::less<>>;

  /// Reads this process's environment.
  explicit cluster_resolver(const cluster_options& options = {});

  /// Reads `variables` instead of the environment (tests, launchers).
  cluster_resolver(const cluster_options& options, const environment& variables);

  const cluster_spec& spec() const noexcept { return spec_; }

  /// This process's environment variables.
  static environment process_environment();

private:
  cluster_spec spec_;
};

} // namespace lockstep
