#include "node/node.hpp"

#include "node/clock_sync.hpp"
#include "node/control_links.hpp"
#include "node/host_group.hpp"
#include "node/join_cancellation.hpp"
#include "node/node_actor.hpp"
#include "node/rendezvous.hpp"

#include "actor_system/actor_system.hpp"
#include "runtime/error_text.hpp"
#include "runtime/log.hpp"

#include "lockstep/error.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <caf/actor_cast.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/weak_intrusive_ptr.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
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
  if (error == asio::error::address_in_use)
    throw resource_error(std::string("cluster: cannot listen for ") + what + " at " + host + ":"
                         + std::to_string(port) + ": " + error.message() + " (another process "
                         + "listens at port " + std::to_string(port) + " on this host: stop it, "
                         + "or give this worker a free port)");
  if (error)
    throw resource_error(std::string("cluster: cannot listen for ") + what + " at " + host + ":"
                         + std::to_string(port) + ": " + error.message());
  acceptor.listen();
  return acceptor;
}

/// What connect_ring watches: a cancellation, and the control connections
/// (every worker's, at the coordinator; the coordinator's, elsewhere). One
/// that closes means its worker left, so the ring will never form: this
/// worker gives up at once instead of at the join's deadline, and closes
/// its own, which its peers see in turn. One that has bytes to read is a
/// worker that went ahead (its heartbeats), alive.
ring_watch ring_watch_of(std::vector<tcp_socket>& control, bool coordinator) {
  ring_watch watch;
  std::vector<std::uint32_t> ranks{0}; // the rank behind each entry
  watch.entries.push_back(join_cancel_entry());
  for (std::size_t i = 0; i < control.size(); ++i) {
    if (!control[i].is_open())
      continue;
    watch.entries.push_back({control[i].native_handle(), POLLIN, 0});
    ranks.push_back(coordinator ? static_cast<std::uint32_t>(i) : 0);
  }
  watch.ready = [entries = watch.entries, ranks](std::size_t index) {
    if (index == 0) {
      throw_if_joins_cancelled("connecting the workers' ring");
      return true;
    }
    // Bytes to read: alive, and no longer watched. Nothing after all: go on
    // watching. Otherwise (closed, or failed) the worker left.
    enum class peeked { data, nothing, ended };
    const auto peek = [&](std::size_t i) {
      std::uint8_t byte = 0;
      const auto got = ::recv(entries[i].fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (got > 0)
        return peeked::data;
      return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
               ? peeked::nothing
               : peeked::ended;
    };
    if (const auto state = peek(index); state != peeked::ended)
      return state == peeked::nothing;
    // Name every worker whose connection has ended by now: the one that
    // left first, and those that gave up because of it.
    std::vector<std::string> left;
    for (std::size_t i = 1; i < entries.size(); ++i)
      if (i == index || peek(i) == peeked::ended)
        left.push_back(std::to_string(ranks[i]) + (ranks[i] == 0 ? " (the coordinator)" : ""));
    throw peer_lost_error(workers_text(left)
                          + " left while the workers connected their ring (control connection "
                            "closed)");
  };
  return watch;
}

/// This worker's end of the mesh between `workers` (the cluster's numbers
/// by position; empty: every worker, a position its number), in which it
/// is at `position` of `world`: connect_mesh over new connections to the
/// workers' data listeners (this one's is `data`), authenticated as the
/// ring's are but for the mesh. Its connect time goes to the log.
std::unique_ptr<tcp_mesh_link> connect_workers_mesh(
  asio::io_context& context, asio::ip::tcp::acceptor& data, const membership& joined,
  std::size_t position, std::size_t world, std::vector<std::size_t> workers,
  std::span<const std::uint8_t> token, const handshake_identity& self,
  io_clock::time_point deadline, ring_watch watch, const std::string& what) {
  const auto start = io_clock::now();
  mesh_links mesh{position, world, context, std::move(workers)};
  // Addresses of the positions this one dials (the higher ones).
  std::vector<asio::ip::tcp::endpoint> addresses(world);
  for (auto p = position + 1; p < world; ++p) {
    const auto& member = joined.members[mesh.worker_of(p)];
    addresses[p] = resolve_endpoint(context, member.host, member.port,
                                    "worker " + std::to_string(member.rank) + "'s address");
  }
  connect_mesh(mesh, data, addresses, token, self, deadline, std::move(watch));
  LOCKSTEP_LOG_INFO("mesh: {} connected ({} connection{} each) in {} ms", what, world - 1,
                    world == 2 ? "" : "s",
                    std::chrono::duration_cast<std::chrono::milliseconds>(io_clock::now() - start)
                      .count());
  return std::make_unique<tcp_mesh_link>(std::move(mesh));
}

} // namespace

node::node(const cluster_spec& spec, bytes token, const node_settings& settings)
  : context_(std::make_shared<asio::io_context>()),
    heartbeat_interval_(settings.heartbeat_interval) {
  const auto rank = spec.rank;
  const bool coordinator = rank == 0;
  const auto coordinator_port = spec.coordinator ? spec.coordinator->port : 0;
  const auto data_port =
    coordinator && spec.listen.port == coordinator_port ? std::uint16_t{0} : spec.listen.port;
  auto data = listen_at(*context_, spec.listen.host, data_port, "ring connections");
  rendezvous_settings rendezvous{spec, token, settings.local_replicas,
                                 settings.settings,
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
  const handshake_identity self{spec.job_id, spec.generation, static_cast<std::uint32_t>(rank)};
  connect_ring(links, data, next_address, token, self, io_clock::now() + settings.join_timeout,
               ring_watch_of(joined.control, coordinator));
  // The mesh of the same workers, for the algorithms that talk to any rank:
  // world - 1 more connections per worker (docs/multi_worker.md, "The mesh
  // between workers").
  auto mesh = connect_workers_mesh(*context_, data, membership_, rank, spec.world_size, {}, token,
                                   self, io_clock::now() + settings.join_timeout,
                                   ring_watch_of(joined.control, coordinator),
                                   "the " + std::to_string(spec.world_size) + " workers");
  ring_ = std::make_shared<tcp_ring_communicator>(std::move(links), context_, std::move(mesh));
  // A killed worker's neighbours see its links close about when the
  // coordinator's word of the loss arrives: give that word a moment.
  ring_->await_explanations(std::max(std::chrono::milliseconds{500}, 2 * settings.heartbeat_interval));
  // A collective that times out names the workers that did not reach it:
  // the coordinator asks every worker and answers once all did, or after
  // progress_wait (a frozen worker never does); the asker waits for that
  // and the hops there and back.
  const auto progress_wait =
    std::clamp(settings.heartbeat_interval / 2, std::chrono::milliseconds{100},
               std::chrono::milliseconds{1000});
  const auto ask_wait = progress_wait + std::max(progress_wait, std::chrono::milliseconds{200});
  // MPI's collectives where asked for; else workers that share a host's
  // memory reduce through it, not the ring.
  if (settings.mpi) {
    mpi_ = join_mpi_workers(rank, spec.world_size);
    LOCKSTEP_LOG_INFO("MPI carries the collectives between the {} workers", spec.world_size);
  }
  auto plan = settings.mpi ? host_plan{}
                           : join_host_group(*ring_, rank, spec.world_size, spec.job_id,
                                             settings.force_tcp, settings.join_timeout);
  host_ = plan.shared;
  if (plan.local && plan.hosts.groups.size() > 1) {
    // Several hosts: the ring between their leaders, on new connections
    // authenticated as the first ring's (each leader's hello names its
    // rank; ring positions are hosts).
    const auto& groups = plan.hosts.groups;
    if (groups[plan.host].front() == rank) {
      const auto next_leader = groups[(plan.host + 1) % groups.size()].front();
      const auto& next_member = membership_.members[next_leader];
      ring_links leader_links{plan.host, groups.size(), tcp_socket(*context_),
                              tcp_socket(*context_)};
      for (const auto& group : groups)
        leader_links.workers.push_back(group.front());
      connect_ring(leader_links, data,
                   resolve_endpoint(*context_, next_member.host, next_member.port,
                                    "worker " + std::to_string(next_leader) + "'s address"),
                   token, self, io_clock::now() + settings.join_timeout,
                   ring_watch_of(joined.control, coordinator));
      // And the leaders' mesh, positions again hosts.
      auto leader_mesh = connect_workers_mesh(
        *context_, data, membership_, plan.host, groups.size(), leader_links.workers, token, self,
        io_clock::now() + settings.join_timeout, ring_watch_of(joined.control, coordinator),
        "the leaders of " + std::to_string(groups.size()) + " hosts");
      leaders_ = std::make_shared<tcp_ring_communicator>(std::move(leader_links), context_,
                                                         std::move(leader_mesh));
      leaders_->await_explanations(
        std::max(std::chrono::milliseconds{500}, 2 * settings.heartbeat_interval));
    }
    hosts_ = std::make_shared<hierarchical_communicator>(plan.local, leaders_, plan.hosts,
                                                         plan.host, ask_wait, true);
  }
  // The link costs that choose each call's algorithm (algorithm_choice.hpp),
  // measured once by the first worker of the ring that will carry the
  // program's collectives, which every worker of it calls here.
  const auto between = hosts_ ? leaders_ : (mpi_.collectives || host_) ? nullptr : ring_;
  if (between) {
    const auto costs = between->probe_links(settings.join_timeout);
    LOCKSTEP_LOG_INFO("links between workers: alpha {:.1f} us, beta {:.2f} GB/s, gamma {:.2f} GB/s",
                      costs.alpha_s * 1e6, costs.beta_bytes_per_s / 1e9,
                      costs.gamma_bytes_per_s / 1e9);
  }
  ring_->restart_numbering(); // the program's first collective is #1
  // The node actor watches the peers; control_links carries its messages.
  links_ = std::make_shared<control_links>(rank, std::move(joined.control),
                                           settings.heartbeat_interval);
  system_ = shared_actor_system();
  actor_ = spawn_node_actor(
    *system_,
    {.rank = static_cast<std::uint32_t>(rank),
     .peers = links_->peers(),
     .heartbeat_interval = settings.heartbeat_interval,
     .peer_timeout = settings.peer_timeout,
     .progress_wait = progress_wait,
     // Weak: should the actor outlive a stop that timed out, it posts nothing.
     .send = [control = std::weak_ptr<control_links>(links_)](
               std::uint32_t peer, const control_post& message) {
       if (const auto links = control.lock())
         links->post(peer, message);
     },
     .reached = [ring = ring_, host = host_, hosts = hosts_, mpi = mpi_.reached, rank] {
       return mpi ? mpi() : hosts ? hosts->reached(rank) : host ? host->reached() : ring->reached();
     },
     .on_lost = [ring = ring_, host = host_, leaders = leaders_,
                 mpi = mpi_.break_group](const error_value& why) {
       ring->break_ring(why);
       if (leaders)
         leaders->break_ring(why);
       if (host)
         host->break_group(why);
       if (mpi)
         mpi(why);
     }});
  static_assert(collective_progress::no_answer == tcp_ring_communicator::no_answer);
  // Weak: the rings may outlive this node (the strategy's state holds them).
  const tcp_ring_communicator::progress_question ask =
    [system = std::weak_ptr<caf::actor_system>(system_),
     actor = caf::actor_cast<caf::weak_actor_ptr>(actor_), ask_wait](std::uint64_t seq) {
      std::vector<std::uint64_t> reached;
      const auto live_system = system.lock();
      const auto live_actor = caf::actor_cast<caf::actor>(actor.lock());
      if (!live_system || !live_actor)
        return reached;
      caf::scoped_actor self{*live_system};
      self->request(live_actor, ask_wait, progress_atom::value, seq)
        .receive([&](const collective_progress& answers) { reached = answers.reached; },
                 [](const caf::error&) {});
      return reached;
    };
  const tcp_ring_communicator::failure_notice tell =
    [actor = caf::actor_cast<caf::weak_actor_ptr>(actor_)](const error_value& why) {
      if (const auto live_actor = caf::actor_cast<caf::actor>(actor.lock()))
        caf::anon_send(live_actor, abort_atom::value, why);
    };
  for (const auto& each : {ring_, leaders_})
    if (each)
      each->explain_timeouts(ask_wait, ask, tell);
  if (hosts_ && host_) // one host among several: its timeouts ask every worker too
    host_->explain_timeouts(ask_wait, ask, tell);
  try {
    start_links();
  } catch (...) { // resource_error: the links' thread did not start
    // The actor ticks on its own, and its thread ends only once its last
    // handle is gone (the links' delivery holds one): both go before the
    // actor system, whose destructor would wait for them forever.
    forget_actor();
    caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
    links_.reset();
    actor_ = caf::actor{};
    system_.reset();
    throw;
  }
  LOCKSTEP_LOG_INFO("worker {} of {} joined job '{}'", rank, spec.world_size, spec.job_id);
}

std::shared_ptr<communicator> node::workers() const {
  if (mpi_.collectives)
    return mpi_.collectives;
  if (hosts_)
    return hosts_;
  if (host_)
    return host_;
  return ring_;
}

void node::forget_actor() noexcept {
  for (const auto& each : {ring_, leaders_})
    if (each)
      each->explain_timeouts({}, {}, {});
  if (host_)
    host_->explain_timeouts({}, {}, {});
}

void node::start_links() {
  links_->start([actor = actor_](control_event event) {
    std::visit(
      [&](auto& what) {
        using type = std::decay_t<decltype(what)>;
        if constexpr (std::is_same_v<type, std::string>)
          caf::anon_send(actor, link_failure{event.peer, std::move(what)});
        else if constexpr (std::is_same_v<type, collective_progress>)
          caf::anon_send(actor, event.peer, std::move(what));
        else {
          what.rank = event.peer; // the authenticated connection's rank, not the claim
          caf::anon_send(actor, what);
        }
      },
      event.what);
  });
}

node::~node() {
  if (!links_)
    return;
  forget_actor(); // the rings may outlive the node
  // The actor says goodbye unless the group is broken already; the links
  // write it before they stop. Their delivery holds a handle of the actor:
  // both go before the actor system may (its destructor waits for every
  // actor to be gone).
  stop_node_actor(*system_, actor_, 2 * heartbeat_interval_);
  links_.reset();
  actor_ = caf::actor{};
  system_.reset();
}

} // namespace lockstep::detail
