#pragma once

// input_actor: fills a prefetch buffer ahead of its consumer (the iterator
// of a dataset's `prefetch` stage). An event-based actor spawned detached,
// on its own thread, because producing an element runs the pipeline's user
// code (map functions), which may block for as long as it likes.
//
// Flow control is by credit: the consumer grants `buffer_size` elements when
// the actor starts and one more per element it takes, so the actor never
// holds more than `buffer_size` produced-but-unconsumed elements and never
// waits for room. Elements, the end of the data and the producer's exception
// go into the shared prefetch_buffer, where the consumer's thread waits for
// them with a deadline.
//
//   receives  input_demand{count}  produce `count` more elements (fewer if
//                                  the data ends, the producer throws or
//                                  the consumer cancelled)
//             exit_msg             stop (the consumer is gone)
//   sends     nothing: results go into the prefetch_buffer

#include "actors/messages.hpp"
#include "input/prefetch_buffer.hpp"

#include <caf/fwd.hpp>

#include <cstdint>
#include <memory>

namespace lockstep::actors {

/// Spawns a detached input actor that fills `buffer`, starting with
/// `initial_demand` elements. resource_error when its thread cannot start
/// (actor_system/detached_actor.hpp).
caf::actor spawn_input_actor(caf::actor_system& system, std::shared_ptr<detail::prefetch_buffer> buffer,
                             std::uint64_t initial_demand);

} // namespace lockstep::actors
