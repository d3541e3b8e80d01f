#include "actors/input_actor.hpp"

#include "actor_system/actor_system.hpp"
#include "actor_system/detached_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

#include <utility>

namespace lockstep::actors {

namespace {

const detail::message_types_registrar actor_message_types{&add_actor_message_types};

class input_actor final : public detail::detached_actor {
public:
  input_actor(caf::actor_config& cfg, std::shared_ptr<detail::prefetch_buffer> buffer)
    : detail::detached_actor(cfg), buffer_(std::move(buffer)) {}

  caf::behavior make_behavior() override {
    return {
      [this](input_demand demand) {
        for (std::uint64_t i = 0; i < demand.count; ++i) {
          if (!buffer_->produce_one()) {
            quit();
            return;
          }
        }
      },
    };
  }

  const char* name() const override { return "input_actor"; }

private:
  std::shared_ptr<detail::prefetch_buffer> buffer_;
};

} // namespace

void add_actor_message_types(caf::actor_system_config& config) {
  config.add_message_type<input_demand>("lockstep.input_demand");
}

caf::actor spawn_input_actor(caf::actor_system& system, std::shared_ptr<detail::prefetch_buffer> buffer,
                             std::uint64_t initial_demand) {
  auto actor = detail::spawn_detached<input_actor>(system, "the input actor (dataset prefetch)",
                                           std::move(buffer));
  caf::anon_send(actor, input_demand{initial_demand});
  return actor;
}

} // namespace lockstep::actors
