#pragma once

// worker_session: the collective_session of a communicator of which this
// process holds one rank, a worker's (the TCP ring between workers, the
// shared-memory group of a host's workers): its sequence numbers, the
// collectives withdrawn, the one it runs now, and its flight recorder.
// The other ranks are other processes, so nobody here waits for this
// rank: a departure is a no-op, and the other workers learn of it from
// the fingerprints' epochs. Thread-safe.

#include "collectives/collective_fingerprint.hpp"
#include "collectives/collective_options.hpp"
#include "collectives/collective_session.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

namespace lockstep::detail {

class worker_session final : public collective_session {
public:
  /// Rank `rank` of `ranks`, worker `worker` of the cluster; `what` names
  /// the communicator in errors ("tcp_ring"), `waits_on` where a stalled
  /// collective waits ("the ring of workers").
  worker_session(std::string what, std::size_t rank, std::size_t ranks, std::size_t worker,
                 std::string waits_on);

  std::size_t size() const noexcept override { return ranks_; }
  std::uint64_t next_seq(std::size_t rank) const override;
  void cancel_below(std::uint64_t seq, std::exception_ptr reason) override;
  std::uint64_t cancelled_below() const noexcept override;
  void depart(std::size_t rank, std::uint64_t epoch) override;
  bool waiting(std::size_t rank, std::uint64_t from_seq) const noexcept override;
  std::string stall_report(std::uint64_t from_seq) const override;
  std::string dump() const override;

  /// value_error unless `rank` is this process's.
  void check_rank(std::size_t rank) const;
  /// The number of this rank's next collective: `options.seq` where the
  /// caller numbers it, else next_seq(rank) or `first_seq`, the larger.
  std::uint64_t number(std::size_t rank, const collective_options& options,
                       std::uint64_t first_seq = 0) const;
  /// Collective `seq` starts: throws the reason it was withdrawn with
  /// (cancel_below), else it runs now.
  void begin(std::uint64_t seq);
  /// The running collective ended: `issued` and `outcome` ("completed",
  /// "failed", ...) go to the flight recorder.
  void end(const collective_fingerprint& issued, const char* outcome);
  /// The last collective begun (0 for none).
  std::uint64_t last_begun() const noexcept;
  /// Counts the collectives from 1 again (tcp_ring_communicator::restart_numbering).
  void restart_numbering() noexcept;

private:
  const std::string what_;
  const std::size_t rank_;
  const std::size_t ranks_;
  const std::size_t worker_;
  const std::string waits_on_;
  mutable std::mutex mutex_; // guards the fields below
  std::uint64_t last_seq_ = 0;
  std::uint64_t cancelled_below_ = 0;
  std::exception_ptr cancel_reason_;
  std::uint64_t running_ = 0; // 0 for none
  /// The last collectives and how each ended, in a ring of slots
  /// (overwritten by assignment, which reuses the strings' buffers; dump()
  /// formats them).
  struct flight_entry {
    collective_fingerprint issued;
    const char* outcome = nullptr;
  };
  std::array<flight_entry, 16> flight_;
  std::size_t flights_ = 0; // entries ever written
};

} // namespace lockstep::detail
