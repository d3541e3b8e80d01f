// Gloo's all-reduce over TCP as a peer of `bench/allreduce --workers`, for
// tools/compare_tcp.sh: in-place float SUM among N rank processes on this
// host, each with one buffer reused for every operation.
//
//   gloo_allreduce --ranks N --algorithm ring|halving_doubling
//                  [--sizes B,B,...] [--reps R] [--target-ms T] [--timeout-s S]
//
// The launcher forks the N ranks. Each rank opens a gloo::transport::tcp
// device on 127.0.0.1 and meets the others through a gloo::rendezvous::
// FileStore in a fresh temporary folder (behind a PrefixStore named after
// the launch), then connects the full mesh. The algorithms:
//
// - ring: gloo::allreduce(AllreduceOptions) with Algorithm::RING, the
//   options built anew for each call with the next tag, as PyTorch's
//   ProcessGroupGloo does. Unbound buffers; segments of at most 1 MiB.
// - halving_doubling: gloo::AllreduceHalvingDoubling<float>, constructed
//   once per size and run() for every call, as Caffe2 used it. Bound
//   buffers.
//
// The harness's own barrier and broadcast use the unbound-buffer API
// (gloo::barrier, gloo::broadcast), so they never resize a pair's send
// buffer under the ring (gloo's tcp pair pins SO_SNDBUF to the first bound
// message it sends).
//
// Per size, as bench/peers/mpi_allreduce.cpp: one all-reduce on known
// values is checked exactly on every rank (rank r holds (r + 1) * (i % 7 +
// 1), so every element must be n(n+1)/2 times (i % 7 + 1)); the buffer is
// zeroed; a warm-up estimates the time per operation, rank 0 picks K
// operations per batch to last about T ms and broadcasts it, and R batches
// of K back-to-back operations are timed on rank 0 after a barrier. Each
// batch prints one line, the form mpi_allreduce prints:
//
//   CSV,gloo,ALGORITHM,RANKS,BYTES,K,BATCH,US_PER_OP
//
// Every wait is bounded: gloo's context timeout (--timeout-s, default 60)
// covers the rendezvous, the connections and every operation; a rank that
// fails makes the launcher kill the others; the ranks die with the
// launcher. Exit status 0, 1 when a rank failed or a check found wrong
// elements, 2 for bad arguments.
//
// Built by tools/compare_tcp.sh with g++ and -lgloo (Debian's libgloo-dev);
// not part of the meson build, which does not depend on Gloo.

#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "peer_common.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

struct options {
  int ranks = 0;
  std::string algorithm;
  std::vector<std::size_t> sizes{4, 4096, 65536, 1 << 20, 16 << 20, 64 << 20};
  int reps = 3;
  double target_ms = 200;
  int timeout_s = 60;
};

[[noreturn]] void usage_error(const std::string& problem) {
  std::fprintf(stderr,
               "gloo_allreduce: %s\nusage: gloo_allreduce --ranks N --algorithm "
               "ring|halving_doubling [--sizes B,B,...] [--reps R] [--target-ms T] "
               "[--timeout-s S]\n",
               problem.c_str());
  std::exit(2);
}

/// A positive integer, or a usage error naming `flag`.
long long parse_positive(const std::string& flag, const std::string& text) {
  char* rest = nullptr;
  const auto value = std::strtoll(text.c_str(), &rest, 10);
  if (text.empty() || *rest != '\0' || value <= 0)
    usage_error(flag + ": '" + text + "' is not a positive integer");
  return value;
}

options parse(int argc, char** argv) {
  options opts;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc)
      usage_error(flag + ": missing value");
    const std::string value = argv[++i];
    if (flag == "--ranks")
      opts.ranks = static_cast<int>(std::min(parse_positive(flag, value), 1024LL));
    else if (flag == "--algorithm")
      opts.algorithm = value;
    else if (flag == "--sizes")
      // AllreduceHalvingDoubling counts elements in an int.
      opts.sizes = peers::parse_sizes(value, std::size_t{INT32_MAX} * sizeof(float), usage_error);
    else if (flag == "--reps")
      opts.reps = static_cast<int>(std::min(parse_positive(flag, value), 1000LL));
    else if (flag == "--target-ms")
      opts.target_ms = static_cast<double>(parse_positive(flag, value));
    else if (flag == "--timeout-s")
      opts.timeout_s = static_cast<int>(std::min(parse_positive(flag, value), 86400LL));
    else
      usage_error("unknown option " + flag);
  }
  if (opts.ranks < 2)
    usage_error("--ranks: at least 2 ranks are needed");
  if (opts.algorithm != "ring" && opts.algorithm != "halving_doubling")
    usage_error("--algorithm: expected ring or halving_doubling, not '" + opts.algorithm + "'");
  return opts;
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// -- one rank -------------------------------------------------------------------

/// One rank's connected context and the harness's collectives on it.
class rank_context {
public:
  rank_context(int rank, const options& opts, const std::string& store_dir)
      : rank_(rank), timeout_(std::chrono::seconds(opts.timeout_s)) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    attr.ai_family = AF_INET;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore file_store(store_dir);
    gloo::rendezvous::PrefixStore store("gloo_allreduce-" + std::to_string(::getppid()),
                                        file_store);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, opts.ranks);
    context->setTimeout(timeout_);
    context->connectFullMesh(store, device);
    context_ = std::move(context);
  }

  int rank() const { return rank_; }
  const std::shared_ptr<gloo::Context>& context() const { return context_; }

  void barrier() {
    gloo::BarrierOptions barrier_options(context_);
    barrier_options.setTag(harness_tag_++);
    barrier_options.setTimeout(timeout_);
    gloo::barrier(barrier_options);
  }

  /// Rank 0's `value`, on every rank.
  void broadcast(int& value) {
    gloo::BroadcastOptions broadcast_options(context_);
    broadcast_options.setOutput(&value, 1);
    broadcast_options.setRoot(0);
    broadcast_options.setTag(harness_tag_++);
    broadcast_options.setTimeout(timeout_);
    gloo::broadcast(broadcast_options);
  }

  /// The tag of the next ring all-reduce; apart from the harness's tags.
  std::uint32_t next_op_tag() { return op_tag_++; }

private:
  int rank_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::Context> context_;
  std::uint32_t harness_tag_ = 1u << 30;
  std::uint32_t op_tag_ = 0;
};

/// One in-place SUM all-reduce of `buffer` by the chosen algorithm; the
/// buffer must keep its address while the returned function is used.
std::function<void()> make_all_reduce(const std::string& algorithm, rank_context& ctx,
                                      std::vector<float>& buffer) {
  if (algorithm == "ring")
    return [&ctx, &buffer] {
      gloo::AllreduceOptions all_reduce_options(ctx.context());
      all_reduce_options.setOutput(buffer.data(), buffer.size());
      all_reduce_options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      void (*sum)(void*, const void*, const void*, std::size_t) = &gloo::sum<float>;
      all_reduce_options.setReduceFunction(sum);
      all_reduce_options.setTag(ctx.next_op_tag());
      gloo::allreduce(all_reduce_options);
    };
  auto halving_doubling = std::make_shared<gloo::AllreduceHalvingDoubling<float>>(
    ctx.context(), std::vector<float*>{buffer.data()}, static_cast<int>(buffer.size()));
  return [halving_doubling] { halving_doubling->run(); };
}

/// Checks one all-reduce of known values; the number of wrong elements.
std::size_t check_once(const std::function<void()>& all_reduce, std::vector<float>& buffer,
                       int rank, int ranks) {
  peers::fill_known(buffer, rank);
  all_reduce();
  return peers::count_wrong(buffer, ranks);
}

/// Runs rank `rank`'s part of the benchmark; its exit status.
int run_rank(int rank, const options& opts, const std::string& store_dir) {
  rank_context ctx(rank, opts, store_dir);
  int status = 0;
  for (const auto bytes : opts.sizes) {
    std::vector<float> buffer(bytes / sizeof(float));
    const auto all_reduce = make_all_reduce(opts.algorithm, ctx, buffer);
    if (const auto wrong = check_once(all_reduce, buffer, rank, opts.ranks)) {
      std::fprintf(stderr, "gloo_allreduce: %s, rank %d, %zu bytes: %zu wrong elements\n",
                   opts.algorithm.c_str(), rank, bytes, wrong);
      status = 1;
    }
    std::fill(buffer.begin(), buffer.end(), 0.0f);
    // Warm-up: the first operation is untimed, the next ones estimate.
    const int warmup = bytes <= 65536 ? 20 : bytes <= (1 << 20) ? 5 : 3;
    all_reduce();
    const auto start = seconds_now();
    for (int i = 1; i < warmup; ++i)
      all_reduce();
    const double per_op = (seconds_now() - start) / (warmup - 1);
    int batch = static_cast<int>(std::clamp(std::ceil(opts.target_ms / 1e3 / per_op), 3.0, 5000.0));
    ctx.broadcast(batch);
    for (int rep = 0; rep < opts.reps; ++rep) {
      ctx.barrier();
      const auto begin = seconds_now();
      for (int i = 0; i < batch; ++i)
        all_reduce();
      const auto elapsed = seconds_now() - begin;
      if (rank == 0)
        std::printf("CSV,gloo,%s,%d,%zu,%d,%d,%.3f\n", opts.algorithm.c_str(), opts.ranks, bytes,
                    batch, rep, elapsed / batch * 1e6);
    }
    std::fflush(stdout);
    ctx.barrier(); // no rank frees its buffer while another still sends to it
  }
  return status;
}

// -- the launcher ---------------------------------------------------------------

/// Forks the ranks and waits for them; the first failure kills the rest.
int run_ranks(const options& opts, const std::string& store_dir) {
  const auto launcher = ::getpid();
  std::vector<pid_t> children;
  int status = 0;
  for (int rank = 0; rank < opts.ranks && status == 0; ++rank) {
    const auto pid = ::fork();
    if (pid == 0) {
      // Die with the launcher (killed by a timeout, say), not after it.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != launcher)
        std::_Exit(1);
      int rank_status = 1;
      try {
        rank_status = run_rank(rank, opts, store_dir);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gloo_allreduce: %s, rank %d of %d: %s\n", opts.algorithm.c_str(),
                     rank, opts.ranks, e.what());
      }
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(rank_status);
    }
    if (pid < 0) {
      std::perror("gloo_allreduce: fork");
      status = 1;
    } else {
      children.push_back(pid);
    }
  }
  for (std::size_t running = children.size(); running > 0; --running) {
    int wait_status = 0;
    const auto pid = ::waitpid(-1, &wait_status, 0);
    if (pid < 0)
      break;
    if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
      if (status == 0)
        for (const auto child : children)
          if (child != pid)
            ::kill(child, SIGKILL);
      status = 1;
    }
  }
  return status;
}

} // namespace

int main(int argc, char** argv) {
  const auto opts = parse(argc, argv);
  const auto temp = std::filesystem::temp_directory_path() / "gloo_allreduce-XXXXXX";
  std::string store_dir = temp.string();
  if (::mkdtemp(store_dir.data()) == nullptr) {
    std::perror("gloo_allreduce: mkdtemp");
    return 1;
  }
  std::fflush(stdout);
  const int status = run_ranks(opts, store_dir);
  std::error_code ignored;
  std::filesystem::remove_all(store_dir, ignored);
  return status;
}
