#include "actors/input_actor.hpp"

#include "actors/detached_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <utility>

namespace lockstep::actors {

namespace {

class input_actor final : public detached_actor {
public:
  input_actor(caf::actor_config& cfg, std::shared_ptr<detail::prefetch_buffer> buffer)
    : detached_actor(cfg), buffer_(std::move(buffer)) {}

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

caf::actor spawn_input_actor(caf::actor_system& system, std::shared_ptr<detail::prefetch_buffer> buffer,
                             std::uint64_t initial_demand) {
  auto actor = spawn_detached<input_actor>(system, "the input actor (dataset prefetch)",
                                           std::move(buffer));
  caf::anon_send(actor, input_demand{initial_demand});
  return actor;
}

} // namespace lockstep::actors
