#pragma once

// tcp_ring_communicator: the ring's algorithm (collectives/ring_collectives.hpp)
// over the TCP ring between workers (transport/tcp/tcp_link.hpp), behind
// the communicator interface, for one rank per process: the `leaders`
// stage of a hierarchical_communicator whose local stage is the process's
// shared-memory group. Each process holds one of these, for its own rank.
//
// A collective whose caller passes a failure (options.failure) still meets
// the others, and every rank throws that failure; the ring stays usable. A
// broken ring (a neighbour's connection closed, or a deadline passed) is
// not: the link is shut down, so the other workers fail at once too, and
// this and every later collective throw what broke it (TF's multi-worker
// strategy fails fast the same way; restarts are the launcher's):
//
// * a lost worker: peer_lost_error naming it (the node's word, break_ring);
// * a deadline that passed: timeout_error (TF's DeadlineExceededError), at
//   the deadline, naming the collective (its op, its number among the
//   collectives between the workers, which every worker counts alike,
//   dtype and shape) and every worker that did not reach it. Which those
//   are, the ring cannot see: it asks the other workers (explain_timeouts:
//   the node asks over the control connections, a few milliseconds, at
//   most report_delay()) before it closes its links, and passes the error
//   on, so that the workers waiting in the same collective, and those that
//   come to it later, throw the same timeout_error.
//
// Beside the ring it may hold the same workers' mesh (a connection to every
// other worker: transport/tcp/tcp_mesh_link.hpp), for the algorithms that
// talk to any rank (mesh()). The ring and the mesh break together: a
// broken ring shuts the mesh down and the other way round.

#include <boost/asio/io_context.hpp>

#include <array>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "collectives/algorithm_choice.hpp"
#include "collectives/collective_fingerprint.hpp"
#include "collectives/communicator.hpp"
#include "collectives/ring_records.hpp"
#include "collectives/worker_session.hpp"
#include "collectives/worker_collectives.hpp"
#include "collectives/worker_timeout.hpp"
#include "runtime/error_value.hpp"
#include "transport/tcp/tcp_link.hpp"
#include "transport/tcp/tcp_mesh_link.hpp"

namespace lockstep::detail {

class tcp_ring_communicator final : public communicator {
public:
  /// `links`: the ring's connections, connected (connect_ring); `context`:
  /// the io_context of their sockets, kept alive as long as they are (null
  /// when the caller outlives the communicator); `mesh`: the same workers'
  /// mesh, connected (connect_mesh) with the same positions, or null.
  explicit tcp_ring_communicator(ring_links links,
                                 std::shared_ptr<boost::asio::io_context> context = nullptr,
                                 std::unique_ptr<tcp_mesh_link> mesh = nullptr);

  /// The mesh between the same workers (its ranks are the ring's), for
  /// the algorithms that talk to any rank; null without one. Used by the
  /// rank's own thread, as the ring is; broken with the ring.
  tcp_mesh_link* mesh() noexcept { return mesh_.get(); }

  /// Breaks the ring from another thread (a peer was lost, or another
  /// worker's collective timed out; `why` says so): the collective in
  /// progress and every later one throw `why` (its kind and message), here
  /// and, through the closed links, on the neighbours.
  void break_ring(const error_value& why) noexcept;

  /// In a progress answer: a worker that did not answer.
  static constexpr std::uint64_t no_answer = no_progress_answer;

  /// Which collective between the workers each worker reached, by rank
  /// (no_answer where one did not answer), asked when
  /// collective `seq` passed its deadline; empty when nobody could be asked.
  using progress_question = std::function<std::vector<std::uint64_t>(std::uint64_t seq)>;
  /// Tells the other workers that this worker's collective failed with
  /// `why`, which breaks the ring (they throw it too).
  using failure_notice = std::function<void(const error_value& why)>;

  /// How a deadline is explained (see the file comment): `ask` returns
  /// within `delay`; `tell` returns at once. Without them, a timeout_error
  /// says that the other workers could not be asked.
  void explain_timeouts(std::chrono::milliseconds delay, progress_question ask,
                        failure_notice tell);

  /// The last collective this worker started (0 for none).
  std::uint64_t reached() const noexcept;

  /// Counts the collectives from 1 again: the node's own collectives at
  /// the start (the shared-memory probe, node/host_group.hpp) are not the
  /// program's, whose errors number its collectives as it issued them.
  /// Every worker calls it at the same point, between collectives.
  void restart_numbering() noexcept;

  /// How long after a deadline a timeout_error may come (asking the others).
  std::chrono::milliseconds report_delay() const noexcept override;

  /// When a link fails, wait up to `grace` for break_ring to say why (the
  /// node learns which worker was lost on its control connections about
  /// as fast as the ring sees a neighbour close), so the error names the
  /// lost worker rather than the neighbour that closed its link.
  void await_explanations(std::chrono::milliseconds grace) noexcept;

  /// The algorithm of each call between the workers (algorithm_choice.hpp):
  /// the call's (collective_options::algorithm, for an all-reduce), else
  /// LOCKSTEP_ALGORITHM's (read at construction), else the cheapest under
  /// the link costs (LOCKSTEP_LINK_COSTS, else probe_links); the ring where
  /// the workers have no mesh or no costs yet.
  algorithm algorithm_for(collective_kind kind, std::size_t bytes,
                          const collective_options& options) const;

  /// Measures α and β over the mesh (link_probe.hpp) unless
  /// LOCKSTEP_LINK_COSTS gave them, so that algorithm_for chooses: every
  /// worker calls it once, at the same point, before the program's
  /// collectives. Throws the links' errors (the ring is then broken).
  link_costs probe_links(std::chrono::milliseconds timeout);

  std::string name() const override;
  std::size_t size() const noexcept override;
  collective_session& session() noexcept override;

  void all_reduce(std::size_t rank, reduce_op op, std::span<const tensor> inputs,
                  std::span<tensor> outputs, const collective_options& options,
                  std::uint64_t first_seq = 0) override;
  void reduce_scatter(std::size_t rank, reduce_op op, const tensor& input, tensor& output,
                      const collective_options& options) override;
  void all_gather(std::size_t rank, const tensor& input, tensor& output,
                  const collective_options& options) override;
  void broadcast(std::size_t rank, std::size_t root, std::span<tensor> buffers,
                 const collective_options& options) override;

private:
  /// Runs `work(f, deadline)` as collective `f` on the ring: the work
  /// agrees on `f` (with the caller's failure) and moves the data, in one
  /// pass or two (ring_collectives.hpp); records the outcome; turns a
  /// broken ring into peer_lost_error, a deadline into timeout_error.
  template <class Work>
  void run(std::size_t rank, collective_fingerprint f, const collective_options& options,
           Work work);

  /// The timeout_error of collective `f`, which waited `timeout` until the
  /// deadline and then stalled as `stalled` says: asks which workers
  /// reached it (explain_timeouts) and names those that did not.
  error_value explain_timeout(const collective_fingerprint& f, std::chrono::milliseconds timeout,
                              const std::string& stalled) const;

  /// The links a collective runs on: the ring's and the mesh, if any.
  worker_links links() noexcept;

  /// Takes `costs` for the choice and paces the mesh by them.
  void use_costs(const link_costs& costs);

  /// Shuts the ring's link and the mesh down (safe from any thread): the
  /// neighbours and the peers fail at once instead of at their deadlines.
  void shut_down_links() noexcept;

  std::shared_ptr<boost::asio::io_context> context_; // destroyed after the links
  std::size_t worker_; // this worker's number in the cluster (not its ring position)
  tcp_link link_;
  std::unique_ptr<tcp_mesh_link> mesh_; // null without a mesh; closes before the ring
  ring_records records_; // the agreements' buffers, reused: the hot path allocates little
  worker_session session_;
  mutable std::mutex mutex_; // guards what other threads read: the fields below
  error_value broken_;        // why the ring broke; its message empty while it works
  std::condition_variable explained_; // notified when broken_ is set
  std::chrono::milliseconds grace_{0};
  std::chrono::milliseconds report_delay_{0};
  progress_question ask_;     // set before the first collective
  failure_notice tell_;
  algorithm_override forced_;          // LOCKSTEP_ALGORITHM, read at construction
  std::optional<link_costs> costs_;    // given or measured (probe_links)
};

} // namespace lockstep::detail
