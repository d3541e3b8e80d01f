// The consumer's end of dataset::prefetch: a prefetch_channel
// (lockstep/detail/dataset_stages.hpp, the input layer's declaration) owns
// one input actor (input_actor.hpp) and the buffer it fills. Defined here,
// with the actors, so that input never includes the actor layer above it.

#include "lockstep/dataset.hpp"
#include "lockstep/runtime_options.hpp"

#include "actor_system/actor_system.hpp"
#include "actors/input_actor.hpp"
#include "runtime/log.hpp"
#include "runtime/timeline.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

namespace lockstep::detail {

struct prefetch_channel::impl {
  impl(std::size_t buffer_size, std::chrono::milliseconds timeout, producer produce)
    : system(detail::shared_actor_system()),
      buffer(std::make_shared<prefetch_buffer>(std::move(produce))),
      actor(actors::spawn_input_actor(*system, buffer, buffer_size)),
      timeout(timeout) {}

  ~impl() {
    if (!buffer->cancel(timeout))
      LOCKSTEP_LOG_WARN("prefetch: an input element was still being produced {} ms after its "
                        "iterator was destroyed; the input actor discards it when it is done",
                        timeout.count());
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  }

  // Declared first, destroyed last: the actor system outlives the actor's
  // handle and the buffer.
  std::shared_ptr<caf::actor_system> system;
  std::shared_ptr<prefetch_buffer> buffer;
  caf::actor actor;
  std::chrono::milliseconds timeout;
};

prefetch_channel::prefetch_channel(std::size_t buffer_size,
                                   std::optional<std::chrono::milliseconds> timeout,
                                   producer produce)
  : impl_(std::make_unique<impl>(buffer_size, timeout.value_or(get_runtime_options().timeout),
                                 std::move(produce))) {}

prefetch_channel::~prefetch_channel() = default;

prefetch_channel::prefetch_channel(prefetch_channel&&) noexcept = default;

prefetch_channel& prefetch_channel::operator=(prefetch_channel&&) noexcept = default;

std::shared_ptr<void> prefetch_channel::next() {
  detail::timeline_scope waiting{
    timeline_on() ? timeline_track(track_kind::input, 0, "input wait") : 0, "input wait", "input"};
  auto element = impl_->buffer->take(impl_->timeout);
  if (element)
    caf::anon_send(impl_->actor, actors::input_demand{1}); // room for one more
  return element;
}

std::size_t prefetch_channel::ready() const {
  return impl_->buffer->ready();
}

std::uint64_t prefetch_channel::produced() const {
  return impl_->buffer->produced();
}

std::shared_ptr<void> input_runtime() {
  return detail::shared_actor_system();
}

} // namespace lockstep::detail
