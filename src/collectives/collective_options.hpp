#pragma once

// The options every collective takes, whatever communicator runs it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>

#include "collectives/algorithm_choice.hpp"
#include "lockstep/pack_options.hpp"

namespace lockstep::detail {

struct collective_options {
  /// How long a rank waits for the others, at the rendezvous and at the
  /// barrier, before it throws timeout_error.
  std::chrono::milliseconds timeout{std::chrono::seconds{60}};
  /// Names the collective in fingerprints, errors and the flight recorder;
  /// all ranks must pass the same tag.
  std::string tag;
  /// Test-only: bytes per chunk, so small tensors reach the multi-chunk
  /// path; 0 means the default (default_chunk_bytes). Rounded down to whole
  /// elements, at least one.
  std::size_t chunk_bytes = 0;
  /// The caller's epoch (collective_fingerprint::epoch); 0 for none.
  std::uint64_t epoch = 0;
  /// How an all-reduce of several tensors packs them (one collective per
  /// pack); every rank must pass the same.
  pack_options packing;
  /// The collective's number, where a composed communicator numbers its
  /// stages itself (hierarchical_communicator between processes: each
  /// stage, and each dtype run of an all-reduce, takes the number of the
  /// collective it is part of, so that every worker's errors and progress
  /// count the program's collectives); 0: the communicator numbers it.
  std::uint64_t seq = 0;
  /// Set when this rank cannot contribute (an earlier stage of a composed
  /// collective failed): it still meets the others, and the collective
  /// fails on every rank with this error instead of hanging the others.
  std::exception_ptr failure;
  /// The algorithm between workers for this call (communication_options::
  /// algorithm); unset: LOCKSTEP_ALGORITHM's, else the cost model's choice.
  /// Communicators with one algorithm (shared memory, MPI) ignore it.
  std::optional<detail::algorithm> algorithm;
};

} // namespace lockstep::detail
