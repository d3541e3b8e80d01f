#pragma once

// thread_scratch: the scratch block of the calling thread that an
// algorithm combines received data through (allreduce_slices' slices, the
// ring's chunks), kept between calls, so that a call costs no memset and
// no page faults. Aligned to a cache line: malloc's 16-byte alignment put
// the block at an address that depended on what the thread had allocated
// before, and a block that straddles cache lines made the same all-reduce
// 1.5x slower (every vector load and store of the accumulator split in
// two).

#include <cstddef>

namespace lockstep::detail {

/// At least `bytes` bytes, 64-byte aligned, this thread's own. Valid until
/// this thread's next call: an algorithm takes it once per call and holds
/// it through no other collective.
std::byte* thread_scratch(std::size_t bytes);

} // namespace lockstep::detail
