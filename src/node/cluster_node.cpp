#include "node/cluster_node.hpp"

#include "node/control_links.hpp"
#include "node/clock_sync.hpp"
#include "node/rendezvous.hpp"
#include "runtime/log.hpp"

#include "actors/actor_system.hpp"
#include "actors/messages.hpp"
#include "actors/node_actor.hpp"

#include "lockstep/error.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <type_traits>
#include <variant>

namespace lockstep::detail {

namespace {

namespace asio = boost::asio;

asio::ip::tcp::acceptor listen_at(asio::io_context& context, const std::string& host,
                                  std::uint16_t port, const char* what) {
  // A host name (TF_CONFIG's "worker-1.svc:2222") names this machine: listen
  // on all its addresses, as TF's server does.
  boost::system::error_code error;
  auto address = asio::ip::make_address(host, error);
  if (error)
    address = asio::ip::address_v4::any();
  asio::ip::tcp::acceptor acceptor(context);
  const asio::ip::tcp::endpoint endpoint{address, port};
  acceptor.open(endpoint.protocol());
  acceptor.set_option(asio::socket_base::reuse_address(true));
  acceptor.bind(endpoint, error);
  if (error)
    throw resource_error(std::string("cluster: cannot listen for ") + what + " at " + host + ":"
                         + std::to_string(port) + ": " + error.message());
  acceptor.listen();
  return acceptor;
}

} // namespace

cluster_node::cluster_node(const cluster_spec& spec, bytes token, const node_settings& settings)
  : context_(std::make_shared<asio::io_context>()),
    heartbeat_interval_(settings.heartbeat_interval) {
  const auto rank = spec.rank;
  const bool coordinator = rank == 0;
  const auto coordinator_port = spec.coordinator ? spec.coordinator->port : 0;
  const auto data_port =
    coordinator && spec.listen.port == coordinator_port ? std::uint16_t{0} : spec.listen.port;
  auto data = listen_at(*context_, spec.listen.host, data_port, "ring connections");
  rendezvous_settings rendezvous{spec, token, settings.local_replicas,
                                 settings.config_fingerprint,
                                 {spec.listen.host, data.local_endpoint().port()},
                                 settings.join_timeout};
  rendezvous_result joined;
  if (coordinator) {
    auto control = listen_at(*context_, spec.listen.host, coordinator_port, "control connections");
    joined = coordinate_rendezvous(control, rendezvous);
  } else {
    joined = join_rendezvous(*context_, rendezvous);
  }
  membership_ = std::move(joined.membership);
  // One clock for every worker's timeline: the coordinator's.
  const auto clock_deadline = io_clock::now() + settings.join_timeout;
  if (coordinator)
    answer_clock_probes(joined.control, clock_deadline);
  else
    clock_ = probe_coordinator_clock(joined.control.front(), clock_deadline);
  const auto& next = membership_.members[(rank + 1) % spec.world_size];
  const auto next_address = resolve_endpoint(*context_, next.host, next.port,
                                             "worker " + std::to_string(next.rank) + "'s address");
  ring_links links{rank, spec.world_size, tcp_socket(*context_), tcp_socket(*context_)};
  connect_ring(links, data, next_address, token,
               {spec.job_id, spec.generation, static_cast<std::uint32_t>(rank)},
               io_clock::now() + settings.join_timeout);
  ring_ = std::make_shared<tcp_ring_communicator>(std::move(links), context_);
  // A killed worker's neighbours see its links close about when the
  // coordinator's word of the loss arrives: give that word a moment.
  ring_->await_explanations(std::max(std::chrono::milliseconds{500}, 2 * settings.heartbeat_interval));
  // The node actor watches the peers; control_links carries its messages.
  links_ = std::make_shared<control_links>(rank, std::move(joined.control),
                                           settings.heartbeat_interval);
  system_ = actors::shared_actor_system();
  node_ = actors::spawn_node_actor(
    *system_,
    {.rank = static_cast<std::uint32_t>(rank),
     .peers = links_->peers(),
     .heartbeat_interval = settings.heartbeat_interval,
     .peer_timeout = settings.peer_timeout,
     // Weak: should the actor outlive a stop that timed out, it posts nothing.
     .send = [control = std::weak_ptr<control_links>(links_)](
               std::uint32_t peer, const actors::control_post& message) {
       if (const auto links = control.lock())
         links->post(peer, message);
     },
     .on_lost = [ring = ring_](const std::string& why) { ring->break_ring(why); }});
  try {
    start_links();
  } catch (...) { // resource_error: the links' thread did not start
    // The actor ticks on its own, and its thread ends only once its last
    // handle is gone (the links' delivery holds one): both go before the
    // actor system, whose destructor would wait for them forever.
    caf::anon_send_exit(node_, caf::exit_reason::user_shutdown);
    links_.reset();
    node_ = caf::actor{};
    system_.reset();
    throw;
  }
  LOCKSTEP_LOG_INFO("worker {} of {} joined job '{}'", rank, spec.world_size, spec.job_id);
}

void cluster_node::start_links() {
  links_->start([node = node_](control_event event) {
    std::visit(
      [&](auto& what) {
        using type = std::decay_t<decltype(what)>;
        if constexpr (std::is_same_v<type, std::string>)
          caf::anon_send(node, actors::link_failure{event.peer, std::move(what)});
        else if constexpr (std::is_same_v<type, actors::heartbeat>) {
          what.rank = event.peer; // the authenticated connection's rank, not the claim
          caf::anon_send(node, what);
        } else
          caf::anon_send(node, what);
      },
      event.what);
  });
}

cluster_node::~cluster_node() {
  if (!links_)
    return;
  // The actor says goodbye unless the group is broken already; the links
  // write it before they stop. Their delivery holds a handle of the actor:
  // both go before the actor system may (its destructor waits for every
  // actor to be gone).
  actors::stop_node_actor(*system_, node_, 2 * heartbeat_interval_);
  links_.reset();
  node_ = caf::actor{};
  system_.reset();
}

} // namespace lockstep::detail
