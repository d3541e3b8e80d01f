// lockstep-run's side of Open MPI's mpirun (`lockstep-run --mpi`): finding
// mpirun, its command line for one job of N ranks on this host, its tagged
// output split back into each rank's lines, and the processes a job leaves.

#pragma once

#include <sys/types.h>

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep_run {

/// The path of `name` as execvp would start it: `name` itself when it holds
/// a '/', else the first executable file of that name on PATH; nothing when
/// there is none.
std::optional<std::string> executable_path(const std::string& name);

/// mpirun's path on PATH, checked to be Open MPI's (its `--version` says
/// "Open MPI"): lockstep takes a rank from Open MPI's OMPI_COMM_WORLD_RANK.
/// Throws std::runtime_error saying what is missing or wrong.
std::string find_open_mpi_mpirun();

/// What one mpirun job is given.
struct mpirun_job {
  std::string mpirun;            // its path
  std::size_t ranks = 0;         // -n
  std::string program;           // the program's path (executable_path)
  std::vector<std::string> args; // the program's arguments
  /// lockstep-run's own path: each rank starts as `guard --mpirun-rank
  /// program args...` (rank_guard_flag), which sets PR_SET_PDEATHSIG and
  /// becomes the program.
  std::string guard;
  /// The variables every rank gets (NAME=VALUE): set in mpirun's own
  /// environment, which the ranks on this host inherit, and named to it
  /// with -x.
  std::vector<std::string> environment;
};

/// lockstep-run's first argument when it starts a rank under mpirun: it
/// asks for SIGKILL when its parent (mpirun) dies (PR_SET_PDEATHSIG, which
/// outlives exec) and execs the program, so that the ranks die with mpirun,
/// which dies with lockstep-run. Open MPI's ranks outlive a killed mpirun.
inline constexpr const char* rank_guard_flag = "--mpirun-rank";

/// Acts as `lockstep-run --mpirun-rank program args...`: `argv` is the
/// program's; never returns (exits 127 when it cannot start it, 137 when
/// mpirun died already).
[[noreturn]] void run_rank_guard(char** argv);

/// This executable's path (/proc/self/exe).
std::string own_path();

/// mpirun's argv for `job`: every rank on this host (--host localhost:N),
/// unbound (--bind-to none, as forked workers are), --oversubscribe when
/// there are more ranks than CPUs (Open MPI's ranks then yield when idle),
/// --allow-run-as-root when run as root, --tag-output, and -x per variable.
std::vector<std::string> mpirun_command(const mpirun_job& job);

/// Splits one of mpirun's streams, written with --tag-output
/// ("[1,R]<stdout>:text", one tag per piece a rank wrote, so one line may
/// come in several tagged pieces and pieces of ranks interleave), back into
/// each rank's lines, printed to `stream` with "[R] " in front as
/// lockstep-run prints a forked worker's. Text with no tag (mpirun's own
/// messages) is printed as it came.
class tagged_output {
public:
  explicit tagged_output(FILE* stream) : stream_(stream) {}

  /// Takes `size` more bytes of the stream; prints every line completed.
  void feed(const char* data, std::size_t size);

  /// The stream ended: prints what is left, every line unfinished included.
  void finish();

private:
  void take_line(const std::string& line);
  void print(std::optional<std::size_t> rank, const std::string& text);

  FILE* stream_;
  std::string raw_;                              // mpirun's bytes after the last newline
  std::map<std::size_t, std::string> partial_;   // each rank's unfinished line
};

/// The pids of the processes whose parent is `parent` now (from /proc),
/// zombies (ended, not yet reaped) left out.
std::vector<pid_t> children_of(pid_t parent);

/// Sends `signal` to every descendant of `root` (and to its process group:
/// mpirun gives each rank a group of its own), deepest first; not to root.
void signal_descendants(pid_t root, int signal);

} // namespace lockstep_run
