#pragma once

// Worker processes for the benchmarks between processes (tcp_ring,
// allreduce --workers): fork W workers on this host and collect rank 0's
// figures, and the loopback TCP bound those benchmarks compare with.

#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

namespace lockstep::bench {

/// Forks `world` processes, each running `work(rank)`; rank 0's result
/// (`figures` numbers) comes back through a pipe. Call it before this
/// process starts any thread (an actor system, a strategy): a forked child
/// has only the forking thread. Empty when a worker failed.
template <class Work>
std::vector<double> run_processes(std::size_t world, std::size_t figures, Work work) {
  int report[2];
  if (::pipe(report) != 0)
    return {};
  std::vector<pid_t> children;
  for (std::size_t rank = 0; rank < world; ++rank) {
    const auto pid = ::fork();
    if (pid == 0) {
      ::close(report[0]);
      try {
        const std::vector<double> results = work(rank);
        const auto bytes = results.size() * sizeof(double);
        if (rank == 0 && ::write(report[1], results.data(), bytes) != static_cast<ssize_t>(bytes))
          std::_Exit(1);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "worker %zu of %zu: %s\n", rank, world, e.what());
        std::_Exit(1);
      }
      std::_Exit(0);
    }
    if (pid > 0)
      children.push_back(pid);
  }
  ::close(report[1]);
  std::vector<double> results(figures);
  const auto wanted = static_cast<ssize_t>(figures * sizeof(double));
  ssize_t got = 0;
  while (got < wanted) {
    const auto n = ::read(report[0], reinterpret_cast<char*>(results.data()) + got,
                          static_cast<std::size_t>(wanted - got));
    if (n <= 0)
      break;
    got += n;
  }
  ::close(report[0]);
  bool failed = got != wanted || children.size() != world;
  for (const auto pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed = failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  if (failed)
    return {};
  return results;
}

/// A TCP socket listening on a free loopback port, and that port; -1 and 0
/// when none could be opened.
struct loopback_listener {
  int fd;
  std::uint16_t port;
};
loopback_listener listen_on_loopback();

/// The bound of an all-reduce between processes on this host (network.md
/// §1.5): two processes each send 64 MiB messages to the other over
/// loopback TCP while receiving the other's (two opposite streams, a ring's
/// own exchange) for about `budget_ms`; the total payload bytes per second
/// of both directions, one sample per repetition. Empty when it failed.
std::vector<double> loopback_stream_rates(std::size_t reps, std::size_t budget_ms);

/// One all-reduce figure between workers, in bytes per second: algbw = S /
/// t, busbw = algbw · 2(W−1)/W (nccl-tests' definitions) and the bound P /
/// 2(W−1) from the two streams' total rate P.
struct worker_figures {
  double algbw;
  double busbw;
  double bound;
};

/// The header of the table that print_worker_row fills.
void print_worker_table_header();

/// Prints the row "| W | bytes | time us | algbw | busbw | bound | of
/// bound |" (GB/s, GB = 1e9 B) of `bytes` reduced in `seconds` among
/// `world` workers, and returns its figures. A `stream_rate` of 0 (no
/// bound measured) prints "-" for the bound and leaves `bound` 0.
worker_figures print_worker_row(std::size_t world, std::size_t bytes, double seconds,
                                double stream_rate);

} // namespace lockstep::bench
