#pragma once

// All-reduce between the threads of one process, over buffers they share.
//
// How it works: N ranks (participants of a collective_group) each hold one
// tensor of E elements; every rank passes the same `inputs` (inputs[r] is
// rank r's tensor) and `outputs` (outputs[r] receives rank r's result). The
// elements are cut into N slices; rank r owns slice r, the element range
// [r*E/N, (r+1)*E/N) with the remainder spread so slices differ by at most
// one element (a slice may be empty). After the rendezvous (fingerprints
// checked), rank r reduces its slice chunk by chunk: a chunk (chunk_bytes,
// 32 KiB by default) is copied from inputs[0] into a scratch block, combined
// with inputs[1], ..., inputs[N-1] in that fixed order (so results are
// bit-identical on every run and every rank), and written to every output
// while it is still in cache. Then all ranks meet at the group's barrier, so
// no rank returns before every slice of every output is written.
//
// Bytes moved: each element is read N times (once from each input) and
// written N times (once to each output): 2·N·S bytes of memory traffic in
// all for tensors of S bytes, 2·S per rank; no rank touches another rank's
// slice. Nothing is sent: the ranks share memory.
//
// Outputs may alias inputs (outputs[r] sharing inputs[r]'s buffer, for an
// in-place all-reduce, or any other pairing): tensors that share a buffer
// share it from element 0, and rank r reads and writes only its own slice in
// every buffer, reading a chunk from all inputs before writing it to any
// output. So a write never lands on an element another rank still has to
// read, and the barrier at the end orders all writes before any return.

#include <chrono>
#include <cstddef>
#include <span>
#include <string>

#include "collectives/collective_group.hpp"
#include "collectives/collective_op.hpp"
#include "lockstep/tensor.hpp"

namespace lockstep::detail {

/// Options every collective takes.
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
};

/// The chunk size when collective_options::chunk_bytes is 0: half of a
/// typical L1d + L2 budget per core, so a chunk and its scratch stay in cache.
inline constexpr std::size_t default_chunk_bytes = 32 * 1024;

/// Reduces `inputs` (one tensor per rank of `group`) into every tensor of
/// `outputs` with `op`, doing `rank`'s slice of the work; see the file
/// comment. Every rank calls it with the same spans, op and options. Before
/// the rendezvous it throws value_error unless both spans hold group.size()
/// tensors and all have one element count, and dtype_error unless all have
/// one dtype (each names the ranks). Then throws as collective_group::arrive
/// and wait_all_done: value_error on a mismatch between ranks, timeout_error
/// when a rank does not come. After an error the outputs are unspecified.
void allreduce_slices(collective_group& group, std::size_t rank, collective_op op,
                      std::span<const tensor> inputs, std::span<tensor> outputs,
                      const collective_options& options);

} // namespace lockstep::detail
