#pragma once

// What a rank issued for one collective, and the hash that condenses it:
// transport-neutral, so every communicator (threads of one process, TCP
// between processes, NCCL) checks the same fingerprints before it moves a
// byte, and the multi-worker protocol sends them as data.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <span>
#include <exception>

#include "runtime/fingerprint_hash.hpp"

#include "lockstep/dtype.hpp"
#include "lockstep/tensor.hpp"

namespace lockstep::detail {

/// What a rank issued: two ranks may only run a collective together when
/// their fingerprints are equal.
struct collective_fingerprint {
  /// The rank's sequence number for this collective (from 1 up).
  std::uint64_t seq = 0;
  /// The collective, e.g. "all_reduce".
  std::string op;
  /// How elements combine, e.g. "sum"; empty for collectives that do not.
  std::string reduction;
  lockstep::dtype dtype = lockstep::dtype::f32;
  /// The tensor's shape; for a pack of several tensors, {elements}.
  shape_t shape;
  /// The caller's tag (collective_options::tag); may be empty.
  std::string tag;
  /// How many tensors a pack holds (1 for a plain tensor).
  std::size_t tensors = 1;
  /// For a pack: a hash of its tensors' shapes and element range, so packs
  /// of the same size but different layouts differ.
  std::uint64_t layout = 0;
  /// The batch the collective is a pack of (the whole batch, so that ranks
  /// whose batches differ are told how, even when their packs differ): its
  /// number of tensors and hashes of their dtypes and of their shapes.
  std::size_t batch_tensors = 0;
  std::uint64_t batch_dtypes = 0;
  std::uint64_t batch_shapes = 0;
  /// The caller's epoch (a strategy's run call), 0 for none: a rank that
  /// departs this epoch (collective_group::depart) will not come.
  std::uint64_t epoch = 0;
  /// True for a collective whose ranks publish their data inline
  /// (collective_group::arrive_inline); it must be the same on every rank.
  bool inline_data = false;
  /// Elements per claimed slice (allreduce_slices), which depends on the
  /// chunk size; 0 where there are none. It must be the same on every rank.
  std::size_t slice = 0;
  /// The algorithm between workers (algorithm_choice.hpp), where the
  /// communicator chooses one per call; empty elsewhere. Ranks that chose
  /// differently (a per-call choice that differs) are told so.
  std::string algorithm;

  /// The bytes of one rank's data: elements of `shape` times the dtype size.
  std::size_t bytes() const;

  /// "all_reduce #3 sum float32 [4]" (a pack: "... float32 pack of 3
  /// tensors [20]"), then " tag 'x'" when tagged.
  std::string to_string() const;

  /// What follows the op and sequence number in to_string() (and, with the
  /// bytes, in the flight recorder): " sum float32 [4] tag 'x'".
  std::string details(bool with_bytes) const;

  friend bool operator==(const collective_fingerprint&, const collective_fingerprint&) = default;
};

/// The error for ranks whose fingerprints differ (`by_rank[r]` is what rank
/// r issued; at least one differs from rank 0's), the one a reduction of
/// mismatched values raises: dtype_error when dtypes differ, shape_error
/// when shapes do, else value_error. The message names the first rank that
/// differs from rank 0 and how, then what every rank issued, naming rank r
/// "<rank_noun> r" ("replica 1", "worker 2"), or "<rank_noun> numbers[r]"
/// where given (a group of some of the workers names each by its number
/// in the cluster); `group` names the group. Every rank that sees the same
/// fingerprints builds the same error, so every transport reports a
/// mismatch alike.
std::exception_ptr mismatch_error(std::span<const collective_fingerprint* const> by_rank,
                                  std::string_view rank_noun, std::string_view group,
                                  std::span<const std::size_t> numbers = {});

} // namespace lockstep::detail
