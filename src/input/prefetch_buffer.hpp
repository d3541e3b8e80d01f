#pragma once

// prefetch_buffer: the elements that a producer thread (the input actor,
// actors/input_actor.hpp) made ahead of a consumer and the consumer has not
// taken, with the end of the data and the producer's exception. Plain C++,
// no actor: the input actor fills it, the iterator of a `prefetch` stage
// (actors/prefetch_channel.cpp) empties it, and its tests run it between
// two threads under ThreadSanitizer.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

namespace lockstep::detail {

/// The elements a producer (an input actor) produced and its consumer has not taken,
/// shared by both. The producer runs on the actor's thread, never under the
/// buffer's lock; the consumer destroys it on its own thread (`cancel`),
/// unless the actor is still inside it when the consumer gives up waiting.
class prefetch_buffer {
public:
  /// Makes one element; null at the end of the data. May throw.
  using producer = std::function<std::shared_ptr<void>()>;

  explicit prefetch_buffer(producer produce);

  // -- the producer's side ------------------------------------------------------

  /// Produces one element into the buffer. False when the producer should
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

} // namespace lockstep::detail
