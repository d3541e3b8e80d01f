#pragma once

// The frame of a collective whose ranks share memory: check the buffers,
// make the fingerprint, meet at the rendezvous, do this rank's part, meet
// at the barrier. Used by the block collectives (host memory) and the
// device communicator (one kernel over every rank's device buffers).

#include "collectives/allreduce_slices.hpp"
#include "collectives/collective_group.hpp"
#include "collectives/collective_options.hpp"
#include "lockstep/error.hpp"
#include "lockstep/tensor.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <span>
#include <string>

namespace lockstep::detail {

/// The fingerprint of `rank`'s collective `op` over `buffer`: its next
/// sequence number (at least `first_seq`), dtype, shape, tag and epoch.
inline collective_fingerprint fingerprint_of(const collective_group& group, std::size_t rank,
                                             std::string op, const tensor& buffer,
                                             const collective_options& options,
                                             std::uint64_t first_seq = 0) {
  collective_fingerprint f;
  f.seq = std::max(group.next_seq(rank), first_seq);
  f.op = std::move(op);
  f.dtype = buffer.dtype();
  f.shape = buffer.shape();
  f.tag = options.tag;
  f.epoch = options.epoch;
  return f;
}

/// Checks that `output` holds `factor` times (or 1/`factor` of) `input`'s
/// elements, in one dtype.
inline void check_blocks(const collective_group& group, std::size_t rank, const char* op,
                  const tensor& input, const tensor& output, bool output_larger) {
  const auto prefix = [&] {
    return std::string{op} + " in group '" + group.tag() + "' (rank " + std::to_string(rank)
           + "): ";
  };
  if (rank >= group.size())
    throw value_error(prefix() + "rank out of range for a group of "
                      + std::to_string(group.size()));
  if (input.dtype() != output.dtype())
    throw dtype_error(prefix() + "the output is " + std::string(to_string(output.dtype()))
                      + ", the input " + std::string(to_string(input.dtype())));
  const auto n = static_cast<std::int64_t>(group.size());
  const auto [small, large] = output_larger ? std::pair{input.num_elements(), output.num_elements()}
                                            : std::pair{output.num_elements(), input.num_elements()};
  if (large != n * small)
    throw value_error(prefix() + "expected the " + (output_larger ? "output" : "input")
                      + " to hold " + std::to_string(n) + " blocks of the "
                      + (output_larger ? "input" : "output") + "'s " + std::to_string(small)
                      + " elements, got " + std::to_string(large));
}

/// The fingerprint of `rank`'s broadcast of `buffers` from `root`: every
/// buffer's dtype and shape go in, through the batch signature. Throws
/// value_error for a rank or root out of range.
inline collective_fingerprint broadcast_fingerprint(const collective_group& group,
                                                    std::size_t rank, std::size_t root,
                                                    std::span<const tensor> buffers,
                                                    const collective_options& options) {
  if (root >= group.size() || rank >= group.size())
    throw value_error("broadcast in group '" + group.tag() + "': rank " + std::to_string(rank)
                      + " or root " + std::to_string(root) + " out of range for a group of "
                      + std::to_string(group.size()));
  collective_fingerprint fingerprint;
  fingerprint.seq = group.next_seq(rank);
  fingerprint.op = "broadcast";
  fingerprint.reduction = "from rank " + std::to_string(root);
  fingerprint.tag = options.tag;
  fingerprint.epoch = options.epoch;
  fingerprint.tensors = buffers.size();
  const auto batch = sign_batch(buffers);
  fingerprint.batch_tensors = batch.tensors;
  fingerprint.batch_dtypes = batch.dtypes;
  fingerprint.batch_shapes = batch.shapes;
  std::size_t elements = 0;
  for (const auto& b : buffers)
    elements += static_cast<std::size_t>(b.num_elements());
  fingerprint.shape = {static_cast<std::int64_t>(elements)};
  if (!buffers.empty())
    fingerprint.dtype = buffers[0].dtype();
  return fingerprint;
}

/// Meets the others at `fingerprint`, publishing `payload`, runs `work`
/// (unless options.failure is set), and waits for every rank at the
/// barrier; a throwing `work` (or options.failure) fails the collective on
/// every rank.
template <class Work>
void run_collective(collective_group& group, std::size_t rank,
                    const collective_fingerprint& fingerprint, const void* payload,
                    const collective_options& options, Work work) {
  const auto deadline = collective_group::clock::now() + options.timeout;
  group.arrive(rank, fingerprint, deadline, payload);
  auto failure = options.failure;
  if (!failure) {
    try {
      work();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  group.wait_all_done(rank, fingerprint.seq, deadline, std::move(failure));
}

} // namespace lockstep::detail
