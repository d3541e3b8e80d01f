#pragma once

// The frame of a collective whose ranks share memory: meet at the
// rendezvous, do this rank's part, meet at the barrier. Used by the block
// collectives (host memory) and the device communicator (one kernel over
// every rank's device buffers).

#include "collectives/collective_group.hpp"
#include "collectives/collective_options.hpp"
#include "lockstep/tensor.hpp"

#include <algorithm>
#include <exception>
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
