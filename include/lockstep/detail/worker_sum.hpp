#pragma once

// detail::worker_sum, the one collective between the workers that input and
// checkpoints need; vocabulary, so that the strategy's state below the API
// (src/replication/worker_services.hpp) names it. lockstep/input_context.hpp
// includes it.

#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <string>

namespace lockstep::detail {

/// Multi-worker: sums `counts` element-wise over the workers, in place
/// (one collective between them, named `tag` in its errors); with
/// `failure` set, every worker throws that error instead. Input's joint
/// end and checkpoints' agreement use it. Empty in one process.
using worker_sum = std::function<void(std::span<std::int64_t> counts, std::exception_ptr failure,
                                      const std::string& tag)>;

} // namespace lockstep::detail
