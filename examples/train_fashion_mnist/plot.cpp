#include "plot.hpp"

#include "printable.hpp"
#include "report.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>

extern char** environ;

namespace fashion_mnist {

namespace {

constexpr std::string_view script = R"(set terminal svg size 900,420 dynamic enhanced font 'sans,11' background rgb 'white'
set output 'curves.svg'
set datafile separator ','
set key autotitle columnhead
set multiplot layout 1,2 title 'Fashion-MNIST, MLP 784-256-128-100-10'
set xlabel 'epoch'
set grid
set title 'loss'
set ylabel 'cross-entropy'
plot 'metrics.csv' using 1:2 with linespoints lw 2 title 'train loss'
set title 'accuracy'
set ylabel 'accuracy'
set key bottom right
plot 'metrics.csv' using 1:3 with linespoints lw 2 title 'train', \
     '' using 1:4 with linespoints lw 2 title 'test'
unset multiplot
)";

std::string errno_text(int error) { return std::strerror(error); }

/// The first executable regular file named "gnuplot" in a directory of
/// PATH (absolute directories only: a relative entry would depend on the
/// working directory).
std::optional<std::filesystem::path> find_gnuplot() {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    const auto end = dirs.find(':');
    const auto dir = dirs.substr(0, end);
    dirs = end == std::string_view::npos ? std::string_view{} : dirs.substr(end + 1);
    if (dir.empty() || dir.front() != '/')
      continue;
    const auto candidate = std::filesystem::path(dir) / "gnuplot";
    struct stat info {};
    if (::stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode)
        && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return std::nullopt;
}

/// A directory only this process can enter, removed with its contents.
class private_directory {
public:
  private_directory() {
    auto pattern = (std::filesystem::temp_directory_path() / "train_fashion_mnist-plot-XXXXXX")
                       .string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::system_error(errno, std::generic_category(),
                              "cannot create a temporary directory for the plot");
    path_ = pattern;
  }
  ~private_directory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  private_directory(const private_directory&) = delete;
  private_directory& operator=(const private_directory&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }

private:
  std::filesystem::path path_;
};

/// Runs `program plot.gp` in `dir` with its stdout and stderr in
/// `dir`/gnuplot.log, waiting at most `timeout`. "" on exit status 0.
std::string run_gnuplot(const std::filesystem::path& program, const std::filesystem::path& dir,
                        std::chrono::milliseconds timeout) {
  const auto log = dir / "gnuplot.log";
  posix_spawn_file_actions_t actions;
  if (posix_spawn_file_actions_init(&actions) != 0)
    return "cannot start gnuplot: out of memory";
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  std::string name = "gnuplot", file = "plot.gp";
  char* argv[] = {name.data(), file.data(), nullptr};
  pid_t pid = 0;
  const auto started = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (started != 0)
    return "cannot start " + printable(program.native()) + ": " + errno_text(started);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const auto done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid)
      break;
    if (done < 0 && errno != EINTR)
      return "cannot wait for gnuplot: " + errno_text(errno);
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return "gnuplot did not finish in "
             + number_text(static_cast<double>(timeout.count()) / 1000) + " s and was killed";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return {};
  std::string output;
  {
    std::ifstream in{log};
    output.resize(4096);
    in.read(output.data(), static_cast<std::streamsize>(output.size()));
    output.resize(static_cast<std::size_t>(in.gcount()));
  }
  const auto how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                     : "signal " + std::to_string(WTERMSIG(status));
  return "gnuplot failed (" + how + "): " + printable(output, false);
}

/// Copies the file at `from` into `to`, opened for writing (created, or
/// truncated and written through whatever `to` is). "" on success.
std::string copy_into(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::ifstream in{from, std::ios::binary};
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (!in.eof() && in.fail())
    return "cannot read the plot gnuplot wrote";
  const int fd = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY
                                        | O_NONBLOCK, 0666);
  if (fd < 0)
    return "cannot write the plot to '" + printable(to.native()) + "': " + errno_text(errno);
  std::size_t written = 0;
  while (written < bytes.size()) {
    const auto n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      const auto error = n < 0 ? errno : EIO;
      ::close(fd);
      return "cannot write the plot to '" + printable(to.native()) + "': " + errno_text(error);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0)
    return "cannot write the plot to '" + printable(to.native()) + "': " + errno_text(errno);
  return {};
}

/// Puts the SVG at `from` at `to` (see plot_metrics).
std::string move_into_place(const std::filesystem::path& from, const std::filesystem::path& to) {
  struct stat info {};
  const bool replaceable = ::lstat(to.c_str(), &info) != 0 ? errno == ENOENT
                                                            : S_ISREG(info.st_mode);
  if (replaceable && ::rename(from.c_str(), to.c_str()) == 0)
    return {};
  return copy_into(from, to);
}

} // namespace

std::string plot_metrics(const std::vector<epoch_metrics>& epochs, const std::filesystem::path& svg,
                         std::chrono::milliseconds timeout) {
  const auto gnuplot = find_gnuplot();
  if (!gnuplot)
    return "gnuplot is not installed (apt-get install gnuplot-nox)";
  try {
    const private_directory dir;
    write_metrics_csv(dir.path() / "metrics.csv", epochs);
    {
      std::ofstream out{dir.path() / "plot.gp", std::ios::trunc};
      out << script;
      out.flush();
      if (!out)
        return "cannot write the plot's script to " + dir.path().string();
    }
    if (auto problem = run_gnuplot(*gnuplot, dir.path(), timeout); !problem.empty())
      return problem;
    return move_into_place(dir.path() / "curves.svg", svg);
  } catch (const std::exception& e) {
    return e.what();
  }
}

} // namespace fashion_mnist
