#pragma once

// Copies between host memory and CUDA memory, and between logical GPUs
// (the copy_function entries the CUDA kind registers). Host memory goes
// through the destination or source GPU's pinned staging chunks, two at a
// time so the host's memcpy of one overlaps the copy engine's transfer of
// the other. A copy to the host has finished when it returns; a copy from
// the host has read its source when it returns and finishes in the
// device's stream order. A copy between logical GPUs runs on the
// destination's stream, after the source's work so far (join_streams), and
// the source's stream waits for it before it goes on.

#include "lockstep/device_spec.hpp"

#include <cstddef>

namespace lockstep::detail {

void copy_host_to_cuda(const device_spec& to, void* destination, const device_spec& from,
                       const void* source, std::size_t bytes);

void copy_cuda_to_host(const device_spec& to, void* destination, const device_spec& from,
                       const void* source, std::size_t bytes);

void copy_cuda_to_cuda(const device_spec& to, void* destination, const device_spec& from,
                       const void* source, std::size_t bytes);

} // namespace lockstep::detail
