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

#include <caf/fwd.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

namespace lockstep::actors {

/// The elements an input actor produced and its consumer has not taken,
/// shared by both. The producer runs on the actor's thread, never under the
/// buffer's lock; the consumer destroys it on its own thread (`cancel`),
/// unless the actor is still inside it when the consumer gives up waiting.
class prefetch_buffer {
public:
  /// Makes one element; null at the end of the data. May throw.
  using producer = std::function<std::shared_ptr<void>()>;

  explicit prefetch_buffer(producer produce);

  // -- the actor's side ---------------------------------------------------------

  /// Produces one element into the buffer. False when the actor should
  /// produce no more: the data ended, the producer threw, or the consumer
  /// cancelled.
  bool produce_one();

  // -- the consumer's side --------------------------------------------------------

  /// Takes the next element, waiting at most `timeout`: an element, or null
  /// at the end of the data. Rethrows the producer's exception once, after
  /// the elements produced before it (then the data has ended). Throws
  /// timeout_error if nothing arrives in time.
  std::shared_ptr<void> take(std::chrono::milliseconds timeout);

  /// Stops production: waits at most `timeout` for an element being
  /// produced, then destroys the producer and the unconsumed elements on the
  /// calling thread. False if the producer was still running at the
  /// deadline (the actor destroys it when that call returns).
  bool cancel(std::chrono::milliseconds timeout);

  /// How many elements the producer made (for diagnostics).
  std::uint64_t produced() const;

  /// How many produced elements wait for the consumer.
  std::size_t ready() const;

private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  producer produce_;
  std::deque<std::shared_ptr<void>> ready_;
  std::exception_ptr error_;
  std::uint64_t produced_ = 0;
  bool ended_ = false;
  bool producing_ = false;
  bool cancelled_ = false;
  /// The consumer stopped waiting for a running producer call.
  bool abandoned_ = false;
};

/// Spawns a detached input actor that fills `buffer`, starting with
/// `initial_demand` elements. resource_error when its thread cannot start
/// (actors/detached_actor.hpp).
caf::actor spawn_input_actor(caf::actor_system& system, std::shared_ptr<prefetch_buffer> buffer,
                             std::uint64_t initial_demand);

} // namespace lockstep::actors
