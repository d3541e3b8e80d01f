// lockstep-run: starts a multi-worker lockstep program on this host.
//
//   lockstep-run -n N [--replicas-per-worker K] [--max-restarts R] [--]
//                program [args...]
//
// Starts N copies of `program`, worker i with TF_CONFIG naming a cluster of
// N workers on loopback ports and task i, a fresh cluster token, a job id
// of its own, LOCKSTEP_GENERATION and LOCKSTEP_REPLICAS_PER_WORKER=K when
// given. The token lies in a file in memory (memfd, mode 0600, sealed)
// that no folder holds: the workers inherit its descriptor and read it as
// LOCKSTEP_CLUSTER_TOKEN_FILE=/proc/self/fd/N, and it vanishes with the
// last process that holds it, so no file of the secret outlives the job,
// however lockstep-run ends (SIGKILL included).
// Every line a worker writes (stdout or stderr) is printed with its rank in
// front, on the same stream. SIGINT, SIGTERM and SIGHUP are passed on to the
// workers. SIGUSR1 is passed on without stopping anyone
// (LOCKSTEP_DUMP_SIGNAL=SIGUSR1 in their environment unless set): each worker
// writes its flight recorders (lockstep/diagnostics.hpp). When a worker fails
// (a non-zero status or a signal), the others are stopped (SIGTERM, SIGKILL
// after 5 s) and every worker reaped. Then, as torchrun does, the whole world
// starts again (generation g + 1, on fresh ports, the same job and token) when
// restarts are left and every failure was a signal or
// lockstep::peer_lost_exit_status (a lost peer); the program resumes from its
// last checkpoint. Otherwise lockstep-run exits with the first failed worker's
// status (128 + the signal for a signal); 0 when all succeed.
//
// With --mpi (or LOCKSTEP_COMMUNICATOR=mpi in its environment), the N
// workers are one Open MPI job instead (lockstep_run_mpirun.hpp): one
// `mpirun -n N` per generation on this host, each rank taking its rank from
// OMPI_COMM_WORLD_RANK and rank 0's coordinator port from
// LOCKSTEP_COORDINATOR. Open MPI closes every inherited descriptor in its
// ranks, so they read the token through lockstep-run's own descriptor,
// LOCKSTEP_CLUSTER_TOKEN_FILE=/proc/<lockstep-run's pid>/fd/N (the same
// memory file, the same user, this host). mpirun's --tag-output is turned
// back into "[rank] " prefixes. When a rank fails, mpirun ends the job (a
// rank blocked inside an MPI call included) and exits with the first
// failure's status, which lockstep-run passes on; the processes of the job
// that outlive mpirun are killed (lockstep-run is their subreaper).
// SIGINT, SIGTERM and SIGHUP go to mpirun, which stops the ranks; SIGUSR1
// goes to mpirun, which passes it on to every rank. Should lockstep-run be
// killed outright (SIGKILL), mpirun dies with it (PR_SET_PDEATHSIG), and
// each rank with mpirun: a rank starts as `lockstep-run --mpirun-rank
// program args...`, which sets PR_SET_PDEATHSIG and execs the program
// (Open MPI's ranks would outlive a killed mpirun).

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lockstep/error.hpp"
#include "lockstep_run_mpirun.hpp"

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace {

constexpr const char* usage =
  "usage: lockstep-run -n N [--replicas-per-worker K] [--max-restarts R] [--mpi] [--]\n"
  "                    program [args...]\n"
  "Starts N workers of a multi-worker lockstep program on this host (TF_CONFIG,\n"
  "a fresh cluster token); prefixes their output with the rank; when one fails,\n"
  "stops the others, then restarts them all (up to R times, default 0) when the\n"
  "failure was a signal or a lost peer (exit status 75), else exits with its status.\n"
  "SIGUSR1 is passed on to every worker (LOCKSTEP_DUMP_SIGNAL=SIGUSR1 unless set):\n"
  "each writes its flight recorders and goes on.\n"
  "--mpi (implied by LOCKSTEP_COMMUNICATOR=mpi): the N workers are one Open MPI job,\n"
  "one `mpirun -n N` on this host per generation, their collectives over MPI\n"
  "(LOCKSTEP_COMMUNICATOR=mpi unless set). mpirun ends the job when a rank fails and\n"
  "lockstep-run exits with mpirun's status (a rank's signal n reads as 128 + n); it\n"
  "does not say which rank failed first (mpirun's message does).\n";

volatile sig_atomic_t forwarded_signal = 0;
volatile sig_atomic_t dump_requested = 0;

void on_signal(int signal) {
  forwarded_signal = signal;
}

void on_dump_signal(int) {
  dump_requested = 1;
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "lockstep-run: %s\n", message.c_str());
  std::exit(2);
}

std::size_t parse_count(const char* flag, const char* text, std::size_t least) {
  char* end = nullptr;
  errno = 0;
  const auto value = std::strtoul(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < least || value > 4096)
    fail(std::string(flag) + " wants a whole number from " + std::to_string(least)
         + " to 4096, got '" + text + "'");
  return value;
}

/// True when a listener could bind `port` on every address now.
bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  if (fd >= 0)
    ::close(fd);
  return ok;
}

/// A port that nobody listens on right now, below the kernel's ephemeral
/// range (ip_local_port_range), so that no connection of this host is
/// given it before the worker listens there (an ephemeral port, free when
/// chosen, was once taken by another process's connection in between);
/// chosen at random, so that launches at the same time rarely meet.
int free_port() {
  int ephemeral_low = 32768;
  if (FILE* range = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(range, "%d", &ephemeral_low) != 1)
      ephemeral_low = 32768;
    std::fclose(range);
  }
  constexpr int lowest = 10000;
  if (ephemeral_low > lowest + 1) {
    std::mt19937 random(std::random_device{}());
    std::uniform_int_distribution<int> pick(lowest, ephemeral_low - 1);
    for (int attempt = 0; attempt < 1000; ++attempt)
      if (const int port = pick(random); bindable(port))
        return port;
  }
  fail("cannot find a free port from " + std::to_string(lowest) + " to "
       + std::to_string(ephemeral_low - 1));
}

/// 32 random bytes as 64 hex digits in a file in memory (memfd), readable
/// by this user only and sealed against changes; its descriptor, which the
/// workers inherit (it is not close-on-exec). No folder ever holds it.
int make_token_file() {
  std::array<unsigned char, 32> random{};
  const int source = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (source < 0 || ::read(source, random.data(), random.size()) != static_cast<ssize_t>(random.size()))
    fail("cannot read /dev/urandom for the cluster token");
  ::close(source);
  std::string hex;
  for (const auto byte : random) {
    static constexpr char digits[] = "0123456789abcdef";
    hex += digits[byte >> 4];
    hex += digits[byte & 15];
  }
  int fd = ::memfd_create("lockstep-cluster-token", MFD_ALLOW_SEALING);
  if (fd >= 0 && fd <= STDERR_FILENO) { // a closed standard stream: a worker's would replace it
    const int above = ::fcntl(fd, F_DUPFD, STDERR_FILENO + 1);
    ::close(fd);
    fd = above;
  }
  if (fd < 0)
    fail(std::string("cannot create the cluster token's memory file (memfd_create): ")
         + std::strerror(errno));
  if (::fchmod(fd, 0600) != 0 || ::write(fd, hex.data(), hex.size()) != static_cast<ssize_t>(hex.size())
      || ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    fail(std::string("cannot write the cluster token's memory file: ") + std::strerror(errno));
  return fd;
}

struct worker {
  pid_t pid = -1;
  int out = -1; // the read ends of its stdout and stderr pipes
  int err = -1;
  std::string out_partial, err_partial;
  std::optional<int> status; // as waitpid reports it
};

void print_lines(std::size_t rank, std::string& partial, const char* data, std::size_t size,
                 FILE* stream, bool flush_rest) {
  partial.append(data, size);
  std::size_t start = 0;
  for (auto end = partial.find('\n'); end != std::string::npos; end = partial.find('\n', start)) {
    std::fprintf(stream, "[%zu] %.*s\n", rank, static_cast<int>(end - start),
                 partial.data() + start);
    start = end + 1;
  }
  partial.erase(0, start);
  if (flush_rest && !partial.empty()) {
    std::fprintf(stream, "[%zu] %s\n", rank, partial.c_str());
    partial.clear();
  }
  std::fflush(stream);
}

/// Reads what is there on `fd` (closing it at its end) and prints it.
void drain(std::size_t rank, int& fd, std::string& partial, FILE* stream) {
  char buffer[4096];
  const auto got = ::read(fd, buffer, sizeof buffer);
  if (got > 0) {
    print_lines(rank, partial, buffer, static_cast<std::size_t>(got), stream, false);
    return;
  }
  if (got < 0 && (errno == EINTR || errno == EAGAIN))
    return;
  print_lines(rank, partial, nullptr, 0, stream, true);
  ::close(fd);
  fd = -1;
}

std::string tf_config(const std::vector<int>& ports, std::size_t index) {
  std::string workers;
  for (const auto port : ports)
    workers += (workers.empty() ? "\"127.0.0.1:" : ",\"127.0.0.1:") + std::to_string(port) + "\"";
  return "{\"cluster\":{\"worker\":[" + workers + "]},\"task\":{\"type\":\"worker\",\"index\":"
         + std::to_string(index) + "}}";
}

pid_t spawn(char** program, const std::vector<std::string>& extra_environment, int out_fd,
            int err_fd) {
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0)
    fail(std::string("fork failed: ") + std::strerror(errno));
  if (pid > 0)
    return pid;
  ::setpgid(0, 0); // its own group, so a signal reaches its children too
  // Its own group escapes a kill of the launcher's: should the launcher die
  // without stopping it (SIGKILL), the worker dies too, never left running.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher)
    std::_Exit(128 + SIGKILL); // the launcher died before prctl took effect
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  for (const auto& entry : extra_environment)
    ::putenv(const_cast<char*>(entry.c_str()));
  ::execvp(program[0], program);
  std::fprintf(stderr, "lockstep-run: cannot start %s: %s\n", program[0], std::strerror(errno));
  std::_Exit(127);
}

int exit_code(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

/// How a worker ended, in words.
std::string described(int status) {
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " ("
           + "SIG" + sigabbrev_np(WTERMSIG(status)) + ")";
  const int code = WEXITSTATUS(status);
  std::string text = "exit status " + std::to_string(code);
  if (code == lockstep::peer_lost_exit_status)
    text += ": it lost a peer";
  else if (code == 2)
    text += ": a configuration error";
  return text;
}

/// A failure that a fresh world may get past: a signal or a lost peer.
bool is_restartable(int status) {
  return WIFSIGNALED(status) || WEXITSTATUS(status) == lockstep::peer_lost_exit_status;
}

/// What the launcher was asked for.
struct launch {
  std::size_t workers = 0;
  std::optional<std::size_t> replicas;
  std::size_t max_restarts = 0;
  char** program = nullptr;
  /// LOCKSTEP_CLUSTER_TOKEN_FILE: /proc/self/fd/N, N the token's memory
  /// file, which every worker inherits.
  std::string token_file;
  std::string job_id;
  /// --mpi: mpirun's path; the workers are one Open MPI job.
  std::optional<std::string> mpirun;
  /// The program's path, found as execvp would (--mpi: mpirun gets it).
  std::string program_path;
  /// --mpi: lockstep-run's own path, which starts each rank (rank_guard_flag).
  std::string guard;
};

/// How one generation ended.
struct generation_end {
  /// The exit status lockstep-run gives it: 0, or the first failure's.
  int code = 0;
  /// Whether starting the world again may help: every failure that
  /// happened before lockstep-run stopped the others was restartable, and
  /// the user did not interrupt.
  bool restartable = false;
};

/// The variables (NAME=VALUE) every worker of generation `generation` gets,
/// forked or under mpirun.
std::vector<std::string> job_variables(const launch& job, std::uint64_t generation) {
  std::vector<std::string> environment{"LOCKSTEP_CLUSTER_TOKEN_FILE=" + job.token_file,
                                       "LOCKSTEP_JOB_ID=" + job.job_id,
                                       "LOCKSTEP_GENERATION=" + std::to_string(generation)};
  if (job.replicas)
    environment.push_back("LOCKSTEP_REPLICAS_PER_WORKER=" + std::to_string(*job.replicas));
  if (std::getenv("LOCKSTEP_DUMP_SIGNAL") == nullptr)
    environment.push_back("LOCKSTEP_DUMP_SIGNAL=SIGUSR1");
  return environment;
}

/// Runs generation `generation` of the world to its end: every worker
/// reaped and its output printed.
generation_end run_generation(const launch& job, std::uint64_t generation) {
  std::vector<int> ports;
  for (std::size_t i = 0; i < job.workers; ++i)
    ports.push_back(free_port());
  std::vector<worker> all(job.workers);
  for (std::size_t i = 0; i < job.workers; ++i) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      fail(std::string("pipe failed: ") + std::strerror(errno));
    auto environment = job_variables(job, generation);
    environment.push_back("TF_CONFIG=" + tf_config(ports, i));
    all[i].pid = spawn(job.program, environment, out[1], err[1]);
    ::close(out[1]);
    ::close(err[1]);
    all[i].out = out[0];
    all[i].err = err[0];
  }

  generation_end end;
  bool stopping = false; // lockstep-run has told the workers to stop
  // When the workers still running get SIGKILL; never until they are stopped.
  auto kill_at = std::chrono::steady_clock::time_point::max();
  const auto stop_all = [&](int signal) {
    for (const auto& w : all)
      if (!w.status)
        ::kill(-w.pid, signal);
  };
  for (;;) {
    if (dump_requested != 0) { // passed on; nobody stops
      dump_requested = 0;
      for (const auto& w : all)
        if (!w.status)
          ::kill(w.pid, SIGUSR1);
    }
    if (forwarded_signal != 0) {
      stop_all(forwarded_signal);
      if (end.code == 0)
        end.code = 128 + forwarded_signal;
      end.restartable = false; // the user's word
      stopping = true;
      forwarded_signal = 0;
      kill_at = std::chrono::steady_clock::now() + std::chrono::seconds{5};
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<std::size_t, bool>> owners; // worker, is stderr
    for (std::size_t i = 0; i < job.workers; ++i) {
      if (all[i].out >= 0) {
        fds.push_back({all[i].out, POLLIN, 0});
        owners.emplace_back(i, false);
      }
      if (all[i].err >= 0) {
        fds.push_back({all[i].err, POLLIN, 0});
        owners.emplace_back(i, true);
      }
    }
    if (!fds.empty() && ::poll(fds.data(), fds.size(), 100) > 0)
      for (std::size_t k = 0; k < fds.size(); ++k)
        if (fds[k].revents != 0) {
          auto& w = all[owners[k].first];
          if (owners[k].second)
            drain(owners[k].first, w.err, w.err_partial, stderr);
          else
            drain(owners[k].first, w.out, w.out_partial, stdout);
        }
    if (fds.empty())
      ::poll(nullptr, 0, 100);
    bool running = false;
    bool newly_failed = false;
    for (std::size_t i = 0; i < job.workers; ++i) {
      auto& w = all[i];
      int status = 0;
      if (!w.status && ::waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.status = status;
        // Workers that lockstep-run stopped end as it made them: no cause.
        if (exit_code(status) != 0 && !stopping) {
          std::fprintf(stderr, "lockstep-run: worker %zu failed (%s)\n", i,
                       described(status).c_str());
          if (end.code == 0) { // the first failure
            end.code = exit_code(status);
            end.restartable = true;
          }
          end.restartable = end.restartable && is_restartable(status);
          newly_failed = true;
        }
      }
      running = running || !w.status || w.out >= 0 || w.err >= 0;
    }
    if (newly_failed) {
      stop_all(SIGTERM);
      stopping = true;
      kill_at = std::chrono::steady_clock::now() + std::chrono::seconds{5};
    }
    if (!running)
      break;
    if (std::chrono::steady_clock::now() > kill_at) {
      stop_all(SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
  }
  return end;
}

/// How mpirun ended, in words.
std::string described_mpirun(int status) {
  if (WIFSIGNALED(status))
    return "mpirun was killed by signal " + std::to_string(WTERMSIG(status)) + " (SIG"
           + sigabbrev_np(WTERMSIG(status)) + ")";
  const int code = WEXITSTATUS(status);
  std::string text = "mpirun's exit status " + std::to_string(code);
  if (code == lockstep::peer_lost_exit_status)
    text += ": a worker lost a peer";
  else if (code > 128 && sigabbrev_np(code - 128) != nullptr)
    text += ": a worker was killed by signal " + std::to_string(code - 128) + " (SIG"
            + sigabbrev_np(code - 128) + "), as mpirun reports it";
  else if (code == 2)
    text += ": a configuration error";
  return text;
}

/// Kills what is left of the job once mpirun ended: the processes it
/// started that outlived it, which came to lockstep-run (their subreaper),
/// each with its process group; then reaps every child (mpirun's ranks that
/// it killed but did not reap come here too).
void end_leftovers() {
  for (;;) {
    int ended = 0;
    while (::waitpid(-1, &ended, WNOHANG) > 0) {
    }
    const auto left = lockstep_run::children_of(::getpid());
    if (left.empty())
      return;
    std::fprintf(stderr, "lockstep-run: %zu process(es) of the MPI job outlived mpirun; killing "
                 "them\n", left.size());
    for (const auto pid : left) {
      lockstep_run::signal_descendants(pid, SIGKILL);
      if (::getpgid(pid) == pid)
        ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
    int status = 0;
    while (::waitpid(-1, &status, 0) > 0 || errno == EINTR) {
    }
  }
}

/// Runs generation `generation` as one mpirun job to its end: mpirun
/// reaped, every rank's output printed, no process of the job left.
generation_end run_mpi_generation(const launch& job, std::uint64_t generation) {
  lockstep_run::mpirun_job mpi;
  mpi.mpirun = *job.mpirun;
  mpi.ranks = job.workers;
  mpi.program = job.program_path;
  for (char** arg = job.program + 1; *arg != nullptr; ++arg)
    mpi.args.emplace_back(*arg);
  mpi.guard = job.guard;
  mpi.environment = job_variables(job, generation);
  // Rank 0 listens for the others there; the rest on ephemeral ports.
  mpi.environment.push_back("LOCKSTEP_COORDINATOR=127.0.0.1:" + std::to_string(free_port()));
  if (std::getenv("LOCKSTEP_COMMUNICATOR") == nullptr)
    mpi.environment.push_back("LOCKSTEP_COMMUNICATOR=mpi");
  const auto command = lockstep_run::mpirun_command(mpi);
  std::vector<char*> argv;
  for (const auto& arg : command)
    argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    fail(std::string("pipe failed: ") + std::strerror(errno));
  const pid_t pid = spawn(argv.data(), mpi.environment, out[1], err[1]);
  ::close(out[1]);
  ::close(err[1]);
  lockstep_run::tagged_output out_lines(stdout), err_lines(stderr);
  std::array<std::pair<int, lockstep_run::tagged_output*>, 2> streams{
    std::pair{out[0], &out_lines}, std::pair{err[0], &err_lines}};

  generation_end end;
  std::optional<int> status;
  bool stopping = false;
  auto kill_at = std::chrono::steady_clock::time_point::max();
  for (;;) {
    if (dump_requested != 0) { // mpirun passes SIGUSR1 on to every rank
      dump_requested = 0;
      if (!status)
        ::kill(pid, SIGUSR1);
    }
    if (forwarded_signal != 0) {
      if (!status)
        ::kill(pid, forwarded_signal); // mpirun stops every rank
      if (end.code == 0)
        end.code = 128 + forwarded_signal;
      end.restartable = false; // the user's word
      stopping = true;
      forwarded_signal = 0;
      // mpirun's own SIGTERM-then-SIGKILL takes a few seconds at most.
      kill_at = std::chrono::steady_clock::now() + std::chrono::seconds{10};
    }
    std::vector<pollfd> fds;
    for (const auto& [fd, lines] : streams)
      if (fd >= 0)
        fds.push_back({fd, POLLIN, 0});
    if (fds.empty())
      ::poll(nullptr, 0, 100);
    else if (::poll(fds.data(), fds.size(), 100) > 0)
      for (auto& [fd, lines] : streams) {
        if (fd < 0)
          continue;
        for (const auto& p : fds)
          if (p.fd == fd && p.revents != 0) {
            char buffer[4096];
            const auto got = ::read(fd, buffer, sizeof buffer);
            if (got > 0) {
              lines->feed(buffer, static_cast<std::size_t>(got));
            } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
              lines->finish();
              ::close(fd);
              fd = -1;
            }
          }
      }
    int ended = 0;
    if (!status && ::waitpid(pid, &ended, WNOHANG) == pid) {
      status = ended;
      end_leftovers(); // also lets the pipes end when a leftover holds them
    }
    if (status && streams[0].first < 0 && streams[1].first < 0)
      break;
    if (!status && std::chrono::steady_clock::now() > kill_at) {
      lockstep_run::signal_descendants(pid, SIGKILL);
      ::kill(pid, SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
  }
  if (exit_code(*status) != 0 && !stopping) {
    std::fprintf(stderr, "lockstep-run: the MPI job failed (%s)\n",
                 described_mpirun(*status).c_str());
    end.code = exit_code(*status);
    const int code = WIFEXITED(*status) ? WEXITSTATUS(*status) : 0;
    end.restartable = WIFSIGNALED(*status) || code == lockstep::peer_lost_exit_status
                      || code > 128;
  }
  return end;
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::strcmp(argv[1], lockstep_run::rank_guard_flag) == 0)
    lockstep_run::run_rank_guard(argv + 2); // a rank under mpirun: becomes the program
  launch job;
  bool mpi = false;
  int first = 1;
  for (; first < argc; ++first) {
    const std::string arg = argv[first];
    if (arg == "--") {
      ++first;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      std::fputs(usage, stdout);
      return 0;
    }
    if (arg == "-n" && first + 1 < argc) {
      job.workers = parse_count("-n", argv[++first], 1);
      continue;
    }
    if (arg == "--replicas-per-worker" && first + 1 < argc) {
      job.replicas = parse_count("--replicas-per-worker", argv[++first], 1);
      continue;
    }
    if (arg == "--mpi") {
      mpi = true;
      continue;
    }
    if (arg == "--max-restarts" && first + 1 < argc) {
      job.max_restarts = parse_count("--max-restarts", argv[++first], 0);
      continue;
    }
    if (!arg.empty() && arg[0] == '-')
      fail("unknown or incomplete option '" + arg + "'\n" + usage);
    break;
  }
  if (job.workers == 0 || first >= argc)
    fail(std::string("give -n and a program\n") + usage);
  job.program = argv + first;
  if (const char* communicator = std::getenv("LOCKSTEP_COMMUNICATOR");
      communicator != nullptr && std::string(communicator) == "mpi")
    mpi = true; // forked workers would be refused: each an MPI job of its own
  const int token_fd = make_token_file();
  job.token_file = "/proc/self/fd/" + std::to_string(token_fd);
  if (mpi) {
    try {
      job.mpirun = lockstep_run::find_open_mpi_mpirun();
    } catch (const std::exception& e) {
      fail(e.what());
    }
    const auto path = lockstep_run::executable_path(job.program[0]);
    if (!path)
      fail(std::string("cannot start ") + job.program[0] + ": "
           + (std::strchr(job.program[0], '/') != nullptr ? "no executable file there"
                                                          : "not found on PATH"));
    job.program_path = *path;
    try {
      job.guard = lockstep_run::own_path();
    } catch (const std::exception& e) {
      fail(e.what());
    }
    // Open MPI closes the descriptors its ranks would inherit: they open
    // this process's instead (the same user on the same host).
    job.token_file = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(token_fd);
    // Each rank's cluster comes from Open MPI's variables; TF_CONFIG would
    // take precedence over them.
    ::unsetenv("TF_CONFIG");
    // The ranks that outlive mpirun come here, to be killed and reaped.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  job.job_id = "lockstep-run-" + std::to_string(::getpid()) + "-"
               + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());

  struct sigaction action{};
  action.sa_handler = on_signal;
  for (const int s : {SIGINT, SIGTERM, SIGHUP})
    ::sigaction(s, &action, nullptr);
  struct sigaction dump{};
  dump.sa_handler = on_dump_signal;
  ::sigaction(SIGUSR1, &dump, nullptr);

  int code = 0;
  for (std::size_t generation = 0;; ++generation) {
    const auto end = job.mpirun ? run_mpi_generation(job, generation)
                                : run_generation(job, generation);
    code = end.code;
    if (code == 0 || !end.restartable)
      break;
    if (generation == job.max_restarts) {
      if (job.max_restarts > 0)
        std::fprintf(stderr, "lockstep-run: no restarts left (%zu of %zu used); giving up\n",
                     generation, job.max_restarts);
      break;
    }
    std::fprintf(stderr,
                 "lockstep-run: every worker of generation %zu reaped; restarting all %zu from "
                 "their last checkpoint: restart %zu of %zu (generation %zu)\n",
                 generation, job.workers, generation + 1, job.max_restarts, generation + 1);
  }
  return code;
}
