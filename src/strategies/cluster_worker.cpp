// The start of a worker of a cluster: the node (rendezvous, ring,
// heartbeats), what it gives the strategy (node_services), the settings
// every worker must share, and the cross_device_ops that span the workers
// (cluster_all_reduce).

#include "strategies/cluster_worker.hpp"

#include "cluster_resolver/cluster_token.hpp"
#include "collectives/algorithm_choice.hpp"
#include "collectives/link_probe.hpp"
#include "cluster_resolver/task_names.hpp"
#include "cross_device_ops/cluster_all_reduce.hpp"
#include "devices/local_task.hpp"
#include "node/agreed_settings.hpp"
#include "node/node.hpp"
#include "runtime/fault_injection.hpp"
#include "runtime/log.hpp"
#include "runtime/timeline.hpp"
#include "strategies/mirrored_devices.hpp"
#include "strategies/public_state.hpp"

#include "lockstep/error.hpp"
#include "lockstep/mirrored_strategy.hpp"
#include "lockstep/runtime_options.hpp"
#include "lockstep/version.hpp"

#include <openssl/sha.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace lockstep::detail {

namespace {

/// What a worker of the cluster gives its strategy, over the ring between
/// the workers: the chief's initial values and the sum over the workers.
/// Holding it keeps the node, so the cluster connections, open.
class node_services final : public worker_services {
public:
  node_services(std::shared_ptr<node> node, std::size_t worker, std::chrono::milliseconds timeout)
    : node_(std::move(node)), ring_(node_->workers()), worker_(worker), timeout_(timeout) {}

  tensor initial_value_from_chief(const tensor& initial, const std::string& name) override {
    auto value = initial.to(initial.device()); // a buffer of its own to receive into
    collective_options options;
    options.timeout = timeout_;
    options.tag = "initial value of variable '" + name + "'";
    ring_->broadcast(worker_, 0, {&value, 1}, options);
    return value;
  }

  worker_sum sum_over_workers() const override {
    return [ring = ring_, worker = worker_, timeout = timeout_](
             std::span<std::int64_t> counts, std::exception_ptr failure, const std::string& tag) {
      auto sums = tensor::from(std::vector<std::int64_t>(counts.begin(), counts.end()));
      collective_options options;
      options.timeout = timeout;
      options.tag = tag;
      options.failure = std::move(failure);
      ring->all_reduce(worker, reduce_op::sum, {&sums, 1}, {&sums, 1}, options);
      std::copy_n(sums.data<std::int64_t>().data(), counts.size(), counts.begin());
    };
  }

private:
  std::shared_ptr<node> node_;
  std::shared_ptr<communicator> ring_; // the node's workers(): shared memory or the ring
  std::size_t worker_;
  std::chrono::milliseconds timeout_;
};

/// What must agree between workers: lockstep's version, the replicas per
/// worker, then the program's settings. (The wire protocol is checked
/// before: a worker of another one cannot be read.)
std::vector<agreed_setting> agreed_settings(std::size_t local_replicas, bool mpi,
                                            const multi_worker_options& options) {
  // LOCKSTEP_ALGORITHM and LOCKSTEP_LINK_COSTS are read by the ring's
  // communicator; checked here, before the rendezvous, and agreed, since
  // workers that choose differently could not meet in a collective.
  const char* algorithms = std::getenv("LOCKSTEP_ALGORITHM");
  const char* link_costs = std::getenv("LOCKSTEP_LINK_COSTS");
  const bool costs_given = link_costs != nullptr && *link_costs != '\0';
  if (costs_given)
    parse_link_costs(link_costs);
  std::vector<agreed_setting> settings{
    {"lockstep version", std::string(version)},
    {"replicas per worker", std::to_string(local_replicas)},
    {"collectives between workers", mpi ? "mpi" : "lockstep"},
    {"algorithm between workers",
     to_string(parse_algorithm_override(algorithms != nullptr ? algorithms : ""))},
    {"link costs between workers", costs_given ? std::string{link_costs} : "measured"}};
  const auto own = settings.size();
  for (const auto& [name, value] : options.agreed_settings) {
    for (std::size_t i = 0; i < own; ++i)
      if (name == settings[i].name)
        throw value_error("multi_worker_options::agreed_settings: \"" + name
                          + "\" is lockstep's own setting; give yours another name");
    settings.push_back({name, value});
  }
  check_agreed_settings(settings);
  return settings;
}

/// The token of the environment, or on one host without one, a key made
/// from the job id: the listeners then stay on loopback, so other hosts
/// cannot reach them (other users of this host can; give a token to keep
/// them out too). require_token refuses a cluster across hosts without one.
bytes cluster_key(cluster_spec& spec) {
  const auto token = load_cluster_token(cluster_resolver::process_environment());
  require_token(spec, token);
  if (token)
    return *token;
  LOCKSTEP_LOG_INFO("cluster: no token; one host, so listening on loopback only");
  spec.listen.host = "127.0.0.1";
  const auto text = "lockstep single-host key/" + spec.job_id;
  bytes key(SHA256_DIGEST_LENGTH);
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), key.data());
  return key;
}

/// Whether the workers must keep to the TCP ring: options.transport, else
/// LOCKSTEP_TRANSPORT, "tcp" (else "auto": shared memory where they share
/// it). value_error for another value.
bool force_tcp(const multi_worker_options& options) {
  const char* variable = std::getenv("LOCKSTEP_TRANSPORT");
  const auto [text, source]
    = options.transport ? std::pair{*options.transport, "multi_worker_options::transport"}
                        : std::pair{std::string(variable ? variable : ""), "LOCKSTEP_TRANSPORT"};
  if (text.empty() || text == "auto")
    return false;
  if (text == "tcp")
    return true;
  throw value_error(std::string(source) + " must be \"auto\" or \"tcp\", got '" + text + "'");
}

/// Whether MPI runs the collectives between the workers:
/// options.communicator, else LOCKSTEP_COMMUNICATOR, "mpi" (else
/// "lockstep"). value_error for another value.
bool use_mpi(const multi_worker_options& options) {
  const char* variable = std::getenv("LOCKSTEP_COMMUNICATOR");
  const auto [text, source]
    = options.communicator
        ? std::pair{*options.communicator, "multi_worker_options::communicator"}
        : std::pair{std::string(variable ? variable : ""), "LOCKSTEP_COMMUNICATOR"};
  if (text.empty() || text == "lockstep")
    return false;
  if (text == "mpi")
    return true;
  throw value_error(std::string(source) + " must be \"lockstep\" or \"mpi\", got '" + text
                    + "'");
}

/// TF's name of this worker's task: TF_CONFIG's task type and index (the
/// chief /job:chief/replica:0/task:0, worker i /job:worker/replica:0/task:i);
/// from other launchers, /job:worker/replica:0/task:<rank>. Nothing (the
/// devices stay /job:localhost) for an evaluator and for one process
/// without a cluster, which run alone as TF's do.
std::optional<task_name> task_of(const cluster_spec& spec) {
  const bool from_tf_config = spec.task_type == "chief" || spec.task_type == "worker";
  if (!from_tf_config && (spec.is_evaluator() || spec.world_size <= 1))
    return std::nullopt;
  return task_name_of(spec, spec.rank);
}

} // namespace

std::vector<device_spec> local_worker_devices(const multi_worker_options& options) {
  for (const auto& d : options.local_devices)
    if (!d.is_local())
      throw value_error("multi_worker_options: local_devices must be this worker's devices ("
                        + cpu_device(0).to_string() + " and its like), not "
                        + d.to_string());
  if (!options.local_devices.empty())
    return mirrored_devices(options.local_devices);
  const char* text = std::getenv("LOCKSTEP_REPLICAS_PER_WORKER");
  if (text == nullptr || *text == '\0')
    return mirrored_devices({});
  char* end = nullptr;
  errno = 0;
  const auto count = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || count < 1
      || static_cast<std::size_t>(count) > max_mirrored_replicas)
    throw value_error("LOCKSTEP_REPLICAS_PER_WORKER must be a whole number from 1 to "
                      + std::to_string(max_mirrored_replicas) + ", got '" + text + "'");
  return mirrored_devices(cpu_devices(static_cast<int>(count)));
}

std::shared_ptr<strategy_state> named_after_task(
  const cluster_spec& cluster, const std::function<std::shared_ptr<strategy_state>()>& start) {
  const auto task = task_of(cluster);
  if (!task)
    return start();
  const auto former = local_task();
  set_local_task(*task);
  try {
    return start();
  } catch (...) {
    set_local_task(former);
    throw;
  }
}

std::shared_ptr<strategy_state> start_worker(const cluster_spec& cluster,
                                             std::vector<device_spec> devices,
                                             const multi_worker_options& options,
                                             std::string name,
                                             const std::function<void(strategy_state&)>& prepare) {
  const auto timeout
    = checked_timeout(options.timeout.value_or(get_runtime_options().timeout),
                      "multi_worker_options");
  auto spec = cluster;
  const bool alone = spec.world_size <= 1 || spec.is_evaluator();
  topology topology{.workers = alone ? 1 : spec.world_size,
                    .worker_index = alone ? 0 : spec.rank,
                    .is_chief = spec.is_chief(),
                    .local_devices = devices};
  if (alone) {
    auto state = public_strategy_state::create(std::move(name), std::move(topology), true,
                                               choose_the_best(devices), timeout);
    if (prepare)
      prepare(*state);
    start_replicas(*state);
    return state;
  }
  const bool tcp = force_tcp(options);
  const bool mpi = use_mpi(options);
  auto settings_to_agree = agreed_settings(devices.size(), mpi, options);
  const auto key = cluster_key(spec);
  set_fault_worker(spec.rank, spec.generation);
  node_settings settings{.local_replicas = static_cast<std::uint32_t>(devices.size()),
                         .settings = std::move(settings_to_agree),
                         .join_timeout = options.join_timeout,
                         .heartbeat_interval = options.heartbeat_interval,
                         .peer_timeout = options.peer_timeout,
                         .force_tcp = tcp,
                         .mpi = mpi};
  auto node = std::make_shared<detail::node>(spec, key, settings);
  const auto worker = spec.rank;
  auto ops = std::make_shared<cluster_all_reduce>(node->workers(), worker, timeout,
                                                  spec.local_world_size);
  auto state = public_strategy_state::create(std::move(name), std::move(topology), true,
                                             std::move(ops), timeout);
  timeline_set_clock(node->clock().offset_ns, node->clock().error_ns);
  state->services = std::make_shared<node_services>(std::move(node), worker, timeout);
  if (prepare)
    prepare(*state);
  start_replicas(*state);
  return state;
}

} // namespace lockstep::detail
