#include "plot.hpp"

#include "printable.hpp"
#include "report.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

namespace fashion_mnist {

namespace {

/// The commands after the data: the SVG goes to gnuplot's stdout.
constexpr std::string_view commands = R"(set terminal svg size 900,420 dynamic enhanced font 'sans,11' background rgb 'white'
set datafile separator ','
set key autotitle columnhead
set multiplot layout 1,2 title 'Fashion-MNIST, MLP 784-256-128-100-10'
set xlabel 'epoch'
set grid
set title 'loss'
set ylabel 'cross-entropy'
plot $metrics using 1:2 with linespoints lw 2 title 'train loss'
set title 'accuracy'
set ylabel 'accuracy'
set key bottom right
plot $metrics using 1:3 with linespoints lw 2 title 'train', \
     $metrics using 1:4 with linespoints lw 2 title 'test'
unset multiplot
)";

/// gnuplot's whole input: the metrics as an inline data block (numbers and
/// the fixed header only, never a path), then the commands.
std::string script(const std::vector<epoch_metrics>& epochs) {
  return "$metrics << EOD\n" + metrics_csv(epochs) + "EOD\n" + std::string(commands);
}

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

/// `fd`, moved above the standard streams (close-on-exec) when it is one
/// of them (this process runs with one closed): a child's dup2 onto 0, 1
/// or 2 must not find its source already there.
int above_standard_streams(int fd) noexcept {
  if (fd < 0 || fd > STDERR_FILENO)
    return fd;
  const int above = ::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  ::close(fd);
  return above;
}

/// A descriptor that closes itself, never one of the standard streams.
class descriptor {
public:
  explicit descriptor(int fd = -1) noexcept : fd_(above_standard_streams(fd)) {}
  ~descriptor() { reset(); }
  descriptor(descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  descriptor(const descriptor&) = delete;
  descriptor& operator=(const descriptor&) = delete;
  descriptor& operator=(descriptor&&) = delete;

  int get() const noexcept { return fd_; }
  void reset() noexcept {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
  }

private:
  int fd_;
};

/// A file in memory (memfd: in no folder, gone with its last descriptor)
/// holding `text`, positioned at its start. Close-on-exec.
descriptor memory_file(const char* name, std::string_view text) {
  descriptor file{::memfd_create(name, MFD_CLOEXEC)};
  if (file.get() < 0)
    throw std::system_error(errno, std::generic_category(), "cannot create a memory file");
  for (std::size_t written = 0; written < text.size();) {
    const auto n = ::write(file.get(), text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      throw std::system_error(errno, std::generic_category(), "cannot write a memory file");
    written += static_cast<std::size_t>(n);
  }
  if (::lseek(file.get(), 0, SEEK_SET) != 0)
    throw std::system_error(errno, std::generic_category(), "cannot rewind a memory file");
  return file;
}

/// The first 4096 bytes of the memory file `file`.
std::string head_of(const descriptor& file) {
  std::string text(4096, '\0');
  const auto n = ::pread(file.get(), text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return text;
}

/// Waits for `pid` until `deadline`; its wait status, or nullopt when the
/// deadline passed first.
std::optional<int> wait_until(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    int status = 0;
    const auto done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid)
      return status;
    if (done < 0 && errno != EINTR)
      return -1;
    if (std::chrono::steady_clock::now() >= deadline)
      return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

/// Runs `program` (gnuplot) on `input` with its stdout, the SVG, read
/// into `svg` and its stderr kept in memory, waiting at most `timeout`.
/// Everything it reads and writes is in memory or a pipe: nothing is left
/// in any folder, however this process ends. It dies with this process
/// (PR_SET_PDEATHSIG), never left running as an orphan. "" on exit status 0.
std::string run_gnuplot(const std::filesystem::path& program, std::string_view input,
                        std::string& svg, std::chrono::milliseconds timeout) {
  const auto stdin_file = memory_file("gnuplot-input", input);
  const auto stderr_file = memory_file("gnuplot-stderr", "");
  int out_pipe[2], exec_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0)
    return "cannot start gnuplot: " + errno_text(errno);
  descriptor out_read{out_pipe[0]}, out_write{out_pipe[1]};
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0)
    return "cannot start gnuplot: " + errno_text(errno);
  descriptor exec_read{exec_pipe[0]}, exec_write{exec_pipe[1]};
  if (out_read.get() < 0 || out_write.get() < 0 || exec_read.get() < 0 || exec_write.get() < 0)
    return "cannot start gnuplot: " + errno_text(errno);
  std::string name = "gnuplot";
  char* argv[] = {name.data(), nullptr};
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0)
    return "cannot start gnuplot: " + errno_text(errno);
  if (pid == 0) {
    // The child of a process with threads: only async-signal-safe calls
    // until exec. The death signal survives exec; the check catches a
    // parent that died before prctl.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      ::_exit(127);
    if (::dup2(stdin_file.get(), 0) >= 0 && ::dup2(out_write.get(), 1) >= 0
        && ::dup2(stderr_file.get(), 2) >= 0)
      ::execv(program.c_str(), argv);
    const int error = errno;
    (void) !::write(exec_write.get(), &error, sizeof error);
    ::_exit(127);
  }
  out_write.reset();
  exec_write.reset();
  int exec_error = 0;
  ssize_t got = 0;
  while ((got = ::read(exec_read.get(), &exec_error, sizeof exec_error)) < 0 && errno == EINTR) {
  }
  if (got == sizeof exec_error) {
    (void) wait_until(pid, std::chrono::steady_clock::time_point::max());
    return "cannot start " + printable(program.native()) + ": " + errno_text(exec_error);
  }

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto timed_out = [&] {
    ::kill(pid, SIGKILL);
    (void) wait_until(pid, std::chrono::steady_clock::time_point::max());
    return "gnuplot did not finish in "
           + number_text(static_cast<double>(timeout.count()) / 1000) + " s and was killed";
  };
  for (;;) { // its stdout to its end
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return timed_out();
    pollfd ready{out_read.get(), POLLIN, 0};
    const auto polled = ::poll(&ready, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1000)));
    if (polled < 0 && errno != EINTR)
      return "cannot read gnuplot's output: " + errno_text(errno);
    if (polled <= 0)
      continue;
    char buffer[65536];
    const auto n = ::read(out_read.get(), buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n < 0)
      return "cannot read gnuplot's output: " + errno_text(errno);
    if (n == 0)
      break;
    svg.append(buffer, static_cast<std::size_t>(n));
  }
  const auto status = wait_until(pid, deadline);
  if (!status)
    return timed_out();
  if (WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
    return {};
  const auto how = WIFEXITED(*status) ? "exit status " + std::to_string(WEXITSTATUS(*status))
                                      : "signal " + std::to_string(WTERMSIG(*status));
  return "gnuplot failed (" + how + "): " + printable(head_of(stderr_file), false);
}

/// Writes `bytes` into `to`, opened for writing (created, or truncated and
/// written through whatever `to` is: /dev/null or a symbolic link is
/// written through, never replaced). "" on success.
std::string write_plot(std::string_view bytes, const std::filesystem::path& to) {
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

} // namespace

std::string plot_metrics(const std::vector<epoch_metrics>& epochs, const std::filesystem::path& svg,
                         std::chrono::milliseconds timeout) {
  const auto gnuplot = find_gnuplot();
  if (!gnuplot)
    return "gnuplot is not installed (apt-get install gnuplot-nox)";
  try {
    std::string plot;
    if (auto problem = run_gnuplot(*gnuplot, script(epochs), plot, timeout); !problem.empty())
      return problem;
    if (plot.empty())
      return "gnuplot wrote no plot";
    return write_plot(plot, svg);
  } catch (const std::exception& e) {
    return e.what();
  }
}

} // namespace fashion_mnist
