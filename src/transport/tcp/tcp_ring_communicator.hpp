#pragma once

// tcp_ring_communicator: the ring collectives (ring_collectives.hpp) behind
// the communicator interface, for one rank per process: the `leaders`
// stage of a hierarchical_communicator whose local stage is the process's
// shared-memory group. Each process holds one of these, for its own rank.
//
// A collective whose caller passes a failure (options.failure) still meets
// the others, and every rank throws that failure; the ring stays usable. A
// broken ring (a neighbour's connection closed, or a deadline passed) is
// not: the links are closed, so the other workers fail at once too, and
// this and every later collective throw peer_lost_error naming what
// happened (TF's multi-worker strategy fails fast the same way; restarts
// are the launcher's).

#include <boost/asio/io_context.hpp>

#include <array>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "collectives/collective_fingerprint.hpp"
#include "collectives/communicator.hpp"
#include "transport/tcp/ring_links.hpp"
#include "transport/tcp/ring_records.hpp"

namespace lockstep::detail {

class tcp_ring_communicator final : public communicator, private collective_session {
public:
  /// `context`: the io_context of the links' sockets, kept alive as long
  /// as they are (null when the caller outlives the communicator).
  explicit tcp_ring_communicator(ring_links links,
                                 std::shared_ptr<boost::asio::io_context> context = nullptr);

  /// Breaks the ring from another thread (a peer was lost, `why` names
  /// it): the collective in progress and every later one throw
  /// peer_lost_error(why), here and, through the closed links, on the
  /// neighbours.
  void break_ring(const std::string& why) noexcept;

  /// When a link fails, wait up to `grace` for break_ring to say why (the
  /// node learns which worker was lost on its control connections about
  /// as fast as the ring sees a neighbour close), so the error names the
  /// lost worker rather than the neighbour that closed its link.
  void await_explanations(std::chrono::milliseconds grace) noexcept;

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
  // -- collective_session, for this process's rank ------------------------------
  std::uint64_t next_seq(std::size_t rank) const override;
  void cancel_below(std::uint64_t seq, std::exception_ptr reason) override;
  std::uint64_t cancelled_below() const noexcept override;
  void depart(std::size_t rank, std::uint64_t epoch) override;
  bool waiting(std::size_t rank, std::uint64_t from_seq) const noexcept override;
  std::string stall_report(std::uint64_t from_seq) const override;
  std::string dump() const override;

  /// Runs `work(f, deadline)` as collective `f` on the ring: the work
  /// agrees on `f` (with the caller's failure) and moves the data, in one
  /// pass or two (ring_collectives.hpp); records the outcome; turns a
  /// broken ring into peer_lost_error.
  template <class Work>
  void run(std::size_t rank, collective_fingerprint f, const collective_options& options,
           Work work);

  void check_rank(std::size_t rank) const;

  std::shared_ptr<boost::asio::io_context> context_; // destroyed after the links
  ring_links links_;
  ring_records records_; // the agreements' buffers, reused: the hot path allocates little
  mutable std::mutex mutex_; // guards what other threads read: the fields below
  std::uint64_t last_seq_ = 0;
  std::uint64_t cancelled_below_ = 0;
  std::exception_ptr cancel_reason_;
  std::uint64_t running_ = 0; // the collective in progress, 0 for none
  std::string broken_;        // why the ring broke; empty while it works
  std::condition_variable explained_; // notified when broken_ is set
  std::chrono::milliseconds grace_{0};
  /// The flight recorder: the last collectives and how each ended, in a
  /// ring of slots (overwritten by assignment, which reuses the strings'
  /// buffers; dump() formats them).
  struct flight_entry {
    collective_fingerprint issued;
    const char* outcome = nullptr;
  };
  std::array<flight_entry, 16> flight_;
  std::size_t flights_ = 0; // entries ever written
};

} // namespace lockstep::detail
