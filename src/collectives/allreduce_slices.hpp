#pragma once

// All-reduce between the threads of one process, over buffers they share.
//
// How it works: N ranks (participants of a collective_group) each call
// allreduce_slices with their own tensors: a pack of one or more input
// tensors of one dtype and an output tensor for each (the same shapes on
// every rank). The collective reduces the elements [begin, end) of the
// concatenation of the inputs (all of them by default). At the rendezvous
// each rank publishes its buffers (the group's payload) and the fingerprints
// are checked. The E elements of the range are cut into slices of about
// E/(4N) elements (at least a chunk), and each rank claims slices from the
// group (collective_group::claim) until none is left, so a rank that has a
// CPU takes the slices of one that waits for a CPU (4 replicas on 2 cores).
// A rank reduces a slice chunk by chunk, a chunk never crossing a tensor
// boundary: a chunk (chunk_bytes; by default 4 KiB up to 4 ranks, 16 KiB
// beyond) is copied from rank 0's input into a scratch block, combined
// with the inputs of ranks 1, ..., N-1 in that fixed
// order (so results are bit-identical on every run, on every rank, and to a
// one-by-one reduction of the pack's tensors), and written to every rank's
// output while it is still in cache. Which rank reduces a slice does not
// change its bits. Then all ranks meet at the group's barrier, so no rank
// returns before every slice of every output is written, and no rank's
// buffers go away while another reads them.
//
// Bytes moved: each element is read N times (once from each input) and
// written N times (once to each output): 2·N·S bytes of memory traffic in
// all for packs of S bytes, 2·S per rank; no rank touches another rank's
// slice. Nothing is sent: the ranks share memory. A pack of many small
// tensors costs one rendezvous and one barrier, and is never copied into a
// pack buffer.
//
// Small ranges meet once. When a rank's range fits in one chunk and in the
// group's inline area (collective_group::inline_capacity, 240 bytes), each
// rank publishes a copy of its elements with its arrival
// (collective_group::arrive_inline) and, once all have arrived, reduces the
// whole range from the copies in the same order, into its own outputs only.
// No rank reads another's buffers, so there is no barrier: a 4-byte
// all-reduce costs one rendezvous. Whether a collective goes inline is part
// of its fingerprint, so ranks that disagree (different chunk sizes) get a
// mismatch error, never each other's wrong data.
//
// Outputs may alias inputs (an in-place all-reduce, or any other pairing):
// tensors that share a buffer share it from element 0, and a rank reads and
// writes only the slices it claimed, in every buffer, reading a chunk from
// all inputs before writing it to any output. So a write never lands on an element
// another rank still has to read, and the barrier orders all writes before
// any return.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "collectives/collective_group.hpp"
#include "collectives/collective_options.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"

namespace lockstep::detail {

/// What a batch of tensors is, for fingerprints: its number of tensors and
/// hashes of their dtypes and of their shapes.
struct batch_signature {
  std::size_t tensors = 0;
  std::uint64_t dtypes = 0;
  std::uint64_t shapes = 0;
};

/// The signature of `tensors`.
batch_signature sign_batch(std::span<const tensor> tensors);

/// The fingerprint of collective `seq`, an all-reduce of `inputs[first,
/// last)` (one run of tensors of one dtype, reduced as one pack) of the
/// batch `batch` (sign_batch(inputs)), as a communicator between processes
/// issues it: one collective per run of one dtype.
collective_fingerprint all_reduce_fingerprint(std::uint64_t seq, reduce_op op,
                                              std::span<const tensor> inputs, std::size_t first,
                                              std::size_t last, const batch_signature& batch,
                                              const collective_options& options);

/// The fingerprint of collective `seq`, an all-gather of each rank's
/// `input` into `output` among `world` ranks of the communicator `what`
/// ("tcp_ring"), between processes. Throws value_error unless `output`
/// holds `world` blocks of the input's size and dtype.
collective_fingerprint all_gather_fingerprint(std::string_view what, std::size_t world,
                                              std::uint64_t seq, const tensor& input,
                                              const tensor& output,
                                              const collective_options& options);

/// The fingerprint of collective `seq`, a reduce-scatter with `op` of each
/// rank's `input` (every rank's blocks, in rank order), between processes.
collective_fingerprint reduce_scatter_fingerprint(std::uint64_t seq, reduce_op op,
                                                  const tensor& input,
                                                  const collective_options& options);

/// The fingerprint of collective `seq`, a broadcast of `buffers` from rank
/// `root`, between processes.
collective_fingerprint broadcast_fingerprint(std::uint64_t seq, std::size_t root,
                                             std::span<const tensor> buffers,
                                             const collective_options& options);

/// The chunk size for `ranks` ranks when collective_options::chunk_bytes is
/// 0. Up to 4 ranks, 4 KiB: the scratch block and the chunks streaming
/// through it stay in L1d (32 KiB here); measured on the 2-core VM, 2 ranks
/// reach 1.3-1.6x the algbw of 32 KiB chunks at 4-64 MiB, 4 ranks the same.
/// Beyond 4, 16 KiB: a chunk reads that many inputs one after another, and
/// runs of 4 KiB are too short for the hardware prefetcher (8 ranks: 16 KiB
/// chunks 1.3x the algbw of 4 KiB ones, as much as 32 KiB ones).
constexpr std::size_t default_chunk_bytes(std::size_t ranks) {
  return ranks <= 4 ? 4 * 1024 : 16 * 1024;
}

/// One rank's part of an all-reduce: the results of `inputs[i]` go to
/// `outputs[i]`; the collective reduces elements [begin, end) of the
/// concatenation of the inputs (`end` = whole: to the last element).
struct allreduce_buffers {
  static constexpr std::size_t whole = SIZE_MAX;
  std::span<const tensor> inputs;
  std::span<tensor> outputs;
  std::size_t begin = 0;
  std::size_t end = whole;
  /// The batch these tensors are a pack of; null: they are the batch.
  const batch_signature* batch = nullptr;
  /// With `batch`: the index of the pack's first tensor in the batch.
  std::size_t first_in_batch = 0;
};


/// Reduces `mine` with the other ranks' buffers of `group` under `op`,
/// doing `rank`'s slice of the work; see the file comment. Before the
/// rendezvous it throws value_error unless `mine` has as many outputs as
/// inputs, each output with its input's element count, and a valid range,
/// and dtype_error unless all have one dtype. Its sequence number is `seq`,
/// or group.next_seq(rank) when 0. Then throws as collective_group::arrive
/// and wait_all_done: dtype_error, shape_error or value_error when ranks
/// issued different collectives, timeout_error when a rank does not come.
/// After an error the outputs are unspecified.
void allreduce_slices(collective_group& group, std::size_t rank, reduce_op op,
                      const allreduce_buffers& mine, const collective_options& options,
                      std::uint64_t seq = 0);

/// One tensor per rank: `allreduce_slices` of {input} into {output}.
void allreduce_slices(collective_group& group, std::size_t rank, reduce_op op,
                      const tensor& input, tensor& output, const collective_options& options);

} // namespace lockstep::detail
