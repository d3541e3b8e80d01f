// lockstep-run's side of Open MPI's mpirun (lockstep_run_mpirun.hpp).

#include "lockstep_run_mpirun.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace lockstep_run {

namespace {

/// The parent of every process now, by pid (from /proc/PID/stat); not of
/// the zombies (processes ended, not yet reaped) unless `zombies`.
std::map<pid_t, pid_t> parents(bool zombies) {
  std::map<pid_t, pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr)
    return out;
  while (const dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0')
      continue;
    std::ifstream in(std::string("/proc/") + entry->d_name + "/stat");
    std::string stat;
    std::getline(in, stat);
    // "pid (command) state ppid ...": the command may hold spaces and ')'.
    const auto close = stat.rfind(')');
    if (close == std::string::npos)
      continue;
    char state = 0;
    long parent = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %ld", &state, &parent) == 2
        && (zombies || state != 'Z'))
      out[static_cast<pid_t>(pid)] = static_cast<pid_t>(parent);
  }
  ::closedir(proc);
  return out;
}

/// The standard output and error of `argv`, run to its end.
std::string output_of(const std::vector<std::string>& argv) {
  int pipe_ends[2];
  if (::pipe2(pipe_ends, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0)
    throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    ::dup2(pipe_ends[1], STDOUT_FILENO);
    ::dup2(pipe_ends[1], STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::_Exit(127);
  }
  ::close(pipe_ends[1]);
  std::string text;
  char buffer[4096];
  for (;;) {
    const auto got = ::read(pipe_ends[0], buffer, sizeof buffer);
    if (got > 0)
      text.append(buffer, static_cast<std::size_t>(got));
    else if (got == 0 || errno != EINTR)
      break;
  }
  ::close(pipe_ends[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return text;
}

/// When `text` at `at` starts with an --tag-output tag, "[J,R]<stdout>:"
/// (or <stderr>, <stddiag>), its rank R and the tag's length.
std::optional<std::pair<std::size_t, std::size_t>> tag_at(const std::string& text,
                                                          std::size_t at) {
  std::size_t i = at;
  const auto digits = [&] {
    const auto first = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9')
      ++i;
    return i > first;
  };
  if (text[i++] != '[' || !digits() || i >= text.size() || text[i++] != ',')
    return std::nullopt;
  const auto rank_start = i;
  if (!digits())
    return std::nullopt;
  const auto rank = std::stoul(text.substr(rank_start, i - rank_start));
  for (const char* name : {"]<stdout>:", "]<stderr>:", "]<stddiag>:"})
    if (text.compare(i, std::strlen(name), name) == 0)
      return std::pair{rank, i + std::strlen(name) - at};
  return std::nullopt;
}

} // namespace

std::optional<std::string> executable_path(const std::string& name) {
  if (name.empty())
    return std::nullopt;
  if (name.find('/') != std::string::npos)
    return ::access(name.c_str(), X_OK) == 0 ? std::optional(name) : std::nullopt;
  const char* path = std::getenv("PATH");
  const std::string folders = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  for (std::size_t start = 0; start <= folders.size();) {
    auto end = folders.find(':', start);
    if (end == std::string::npos)
      end = folders.size();
    const auto folder = folders.substr(start, end - start);
    const auto candidate = (folder.empty() ? std::string(".") : folder) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

void run_rank_guard(char** argv) {
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) // mpirun died before prctl took effect
    std::_Exit(128 + SIGKILL);
  ::execvp(argv[0], argv);
  std::fprintf(stderr, "lockstep-run: cannot start %s: %s\n", argv[0], std::strerror(errno));
  std::_Exit(127);
}

std::string own_path() {
  char path[4096];
  const auto size = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (size <= 0)
    throw std::runtime_error(std::string("cannot read /proc/self/exe: ") + std::strerror(errno));
  return std::string(path, static_cast<std::size_t>(size));
}

std::string find_open_mpi_mpirun() {
  const auto mpirun = executable_path("mpirun");
  if (!mpirun)
    throw std::runtime_error(
      "--mpi (or LOCKSTEP_COMMUNICATOR=mpi) starts the workers as one Open MPI job, but mpirun "
      "is not on PATH (Debian: apt install openmpi-bin)");
  const auto version = output_of({*mpirun, "--version"});
  if (version.find("Open MPI") == std::string::npos)
    throw std::runtime_error(*mpirun + " is not Open MPI's mpirun (its --version says '"
                             + version.substr(0, version.find('\n'))
                             + "'): lockstep takes each worker's rank from Open MPI's "
                               "OMPI_COMM_WORLD_RANK");
  return *mpirun;
}

std::vector<std::string> mpirun_command(const mpirun_job& job) {
  const auto ranks = std::to_string(job.ranks);
  std::vector<std::string> command{job.mpirun};
  if (::geteuid() == 0)
    command.push_back("--allow-run-as-root");
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus > 0 && job.ranks > static_cast<std::size_t>(cpus))
    command.push_back("--oversubscribe");
  command.insert(command.end(), {"--host", "localhost:" + ranks, "-n", ranks, "--bind-to", "none",
                                 "--tag-output"});
  for (const auto& variable : job.environment)
    command.insert(command.end(), {"-x", variable.substr(0, variable.find('='))});
  command.insert(command.end(), {job.guard, rank_guard_flag, job.program});
  command.insert(command.end(), job.args.begin(), job.args.end());
  return command;
}

void tagged_output::feed(const char* data, std::size_t size) {
  raw_.append(data, size);
  std::size_t start = 0;
  for (auto end = raw_.find('\n'); end != std::string::npos; end = raw_.find('\n', start)) {
    take_line(raw_.substr(start, end - start));
    start = end + 1;
  }
  raw_.erase(0, start);
}

void tagged_output::finish() {
  if (!raw_.empty())
    take_line(raw_);
  raw_.clear();
  for (auto& [rank, text] : partial_)
    if (!text.empty())
      print(rank, text);
  partial_.clear();
}

void tagged_output::take_line(const std::string& line) {
  // Who wrote the text read so far: nobody tagged it yet (mpirun), or a rank.
  std::optional<std::size_t> owner;
  std::string untagged;
  for (std::size_t i = 0; i < line.size();) {
    if (line[i] == '[')
      if (const auto tag = tag_at(line, i)) {
        owner = tag->first;
        i += tag->second;
        continue;
      }
    if (owner)
      partial_[*owner] += line[i];
    else
      untagged += line[i];
    ++i;
  }
  // The newline ends the line of whoever wrote last; the other ranks' pieces
  // wait for theirs.
  if (!untagged.empty() || !owner)
    print(std::nullopt, untagged);
  if (owner) {
    print(*owner, partial_[*owner]);
    partial_[*owner].clear();
  }
}

void tagged_output::print(std::optional<std::size_t> rank, const std::string& text) {
  if (rank)
    std::fprintf(stream_, "[%zu] %s\n", *rank, text.c_str());
  else
    std::fprintf(stream_, "%s\n", text.c_str());
  std::fflush(stream_);
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& [pid, its_parent] : parents(false))
    if (its_parent == parent)
      out.push_back(pid);
  return out;
}

void signal_descendants(pid_t root, int signal) {
  const auto all = parents(true);
  std::vector<pid_t> found{root};
  for (std::size_t next = 0; next < found.size(); ++next)
    for (const auto& [pid, parent] : all)
      if (parent == found[next])
        found.push_back(pid);
  for (std::size_t i = found.size(); i-- > 1;) {
    if (::getpgid(found[i]) == found[i])
      ::kill(-found[i], signal);
    ::kill(found[i], signal);
  }
}

} // namespace lockstep_run
