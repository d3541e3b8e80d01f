#pragma once

// The timeout_error of a collective between worker processes, naming the
// workers that did not reach it, from what each says it reached (the node
// asks them over its control connections: node/node.hpp). The TCP ring and
// a host's shared-memory group that is part of several hosts word it alike.

#include "collectives/collective_fingerprint.hpp"
#include "runtime/error_value.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

namespace lockstep::detail {

/// In `reached`: a worker that did not answer.
inline constexpr std::uint64_t no_progress_answer = ~std::uint64_t{0};

/// The timeout_error of collective `f` on worker `worker`, which waited
/// `timeout`: `reached[w]` is the last collective worker w started (0 for
/// none; no_progress_answer where it did not answer), empty when nobody
/// could be asked.
error_value worker_timeout(const collective_fingerprint& f, std::size_t worker,
                           std::chrono::milliseconds timeout,
                           std::span<const std::uint64_t> reached);

} // namespace lockstep::detail
