#pragma once

// collective_session: what every collective gets whatever moves its bytes.
// A communicator's ranks issue collectives with increasing sequence
// numbers; the session checks that all ranks issued the same collective
// (collective_fingerprint), keeps each collective's deadline, withdraws
// collectives that a failed call will never finish (cancel_below), fails a
// collective on every rank when one rank cannot do its share, and keeps a
// flight recorder of the last collectives for stall errors.
//
// The in-process implementation is collective_group (threads of one
// process meeting over shared memory); a transport between processes
// implements the same calls over its control connections.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

namespace lockstep::detail {

class collective_session {
public:
  virtual ~collective_session() = default;

  /// The number of ranks.
  virtual std::size_t size() const noexcept = 0;

  /// The sequence number `rank`'s next collective takes when its caller
  /// gives none: one more than its last.
  virtual std::uint64_t next_seq(std::size_t rank) const = 0;

  /// Withdraws every collective numbered below `seq` that has not started:
  /// its waiting ranks, and ranks arriving at it later, throw `reason`.
  virtual void cancel_below(std::uint64_t seq, std::exception_ptr reason) = 0;

  /// The `seq` of the last cancel_below() (0 if none).
  virtual std::uint64_t cancelled_below() const noexcept = 0;

  /// `rank` issues no more collectives in `epoch` (a call of its strategy):
  /// ranks waiting for it in one stop waiting and throw context_error.
  virtual void depart(std::size_t rank, std::uint64_t epoch) = 0;

  /// True while `rank` waits in (or works on) a collective numbered
  /// `from_seq` or above.
  virtual bool waiting(std::size_t rank, std::uint64_t from_seq) const noexcept = 0;

  /// Who a collective numbered `from_seq` or above waits for and where they
  /// are instead, with the last flight-recorder entries; "" if none waits.
  virtual std::string stall_report(std::uint64_t from_seq) const = 0;

  /// The flight recorder: the last collectives, oldest first, one a line.
  virtual std::string dump() const = 0;
};

} // namespace lockstep::detail
