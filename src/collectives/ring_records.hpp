#pragma once

// The records that the ranks of a ring pass around at the start of every
// collective (ring_collectives.hpp): what each rank issued (its
// fingerprint), the failure it passes on instead of data, if any, and, on
// the small all-reduce path, its data. One frame per rank (link::
// exchange_frame), little-endian:
//
//   u64 frame bytes after this field | u64 meta bytes | meta | payload
//   meta: the fingerprint's fields, then u64 failed (0 or 1) and, when 1,
//         u64 error kind and the error's message (error_value.hpp)
//
// Every rank ends up with every rank's frame. It compares each meta with
// its own byte for byte (the encoding is canonical: equal fingerprints give
// equal bytes); only when one differs, or some rank failed, does it decode
// them all, to throw the lowest failing rank's error or the mismatch error,
// the same words on every rank, since every rank holds the same frames.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <vector>

#include "collectives/collective_fingerprint.hpp"
#include "transport/link.hpp"

namespace lockstep::detail {

class ring_records {
public:
  /// The largest frame a rank accepts: a fingerprint's tag and an error
  /// message are short, and a payload is at most small_all_reduce_bytes.
  static constexpr std::size_t max_frame_bytes = 2 << 20;

  /// Starts a collective among `world` ranks: writes this rank's frame
  /// from `mine`, `failure` (null for none) and `payload`. The buffers of
  /// earlier collectives are kept, so in a steady state nothing is
  /// allocated.
  void start(std::size_t rank, std::size_t world, const collective_fingerprint& mine,
             const std::exception_ptr& failure, std::span<const std::uint8_t> payload);

  /// Rank r's frame: this rank's after start(), another's once received.
  std::span<const std::uint8_t> frame(std::size_t r) const { return frames_.at(r); }
  /// Where rank r's frame is received (link::exchange_frame).
  bytes& buffer(std::size_t r) { return frames_.at(r); }

  /// Once every frame is in: returns when every rank issued what this one
  /// did and none failed. Else throws the lowest failing rank's error (its
  /// lockstep type and message), else mismatch_error's error naming each
  /// worker and what it issued; value_error for a frame that is malformed.
  void check() const;

  /// Rank r's payload, once check() returned (as long as this rank's).
  std::span<const std::uint8_t> payload(std::size_t r) const;

  /// Errors name rank r "worker workers[r]" (a group of some of the
  /// cluster's workers), not "worker r".
  void name_workers(std::vector<std::size_t> workers) { workers_ = std::move(workers); }

private:
  /// Throws what check() throws, decoding every frame.
  [[noreturn]] void throw_disagreement() const;

  std::size_t rank_ = 0;
  bool failed_ = false;           // this rank passes a failure on
  std::vector<bytes> frames_;     // by rank
  std::vector<std::size_t> workers_; // by rank: the worker's number; empty: the rank
};

} // namespace lockstep::detail
