#include "communicators/tcp_ring_communicator.hpp"

#include "collectives/allreduce_slices.hpp"
#include "collectives/link_probe.hpp"
#include "collectives/ring_collectives.hpp"
#include "collectives/tensor_bytes.hpp"
#include "collectives/worker_timeout.hpp"
#include "runtime/error_text.hpp"
#include "runtime/timeline.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace lockstep::detail {

namespace {

/// The fingerprint's name of `a`: empty for the ring (every worker's
/// default), so that ranks whose choices differ are told.
std::string named(algorithm a) {
  return a == algorithm::ring ? std::string{} : std::string{to_string(a)};
}

} // namespace

tcp_ring_communicator::tcp_ring_communicator(ring_links links,
                                             std::shared_ptr<boost::asio::io_context> context,
                                             std::unique_ptr<tcp_mesh_link> mesh)
  : context_(std::move(context)),
    worker_(links.worker_of(links.rank)),
    link_(std::move(links)),
    mesh_(std::move(mesh)),
    session_("tcp_ring", link_.rank(), link_.size(), worker_, "the ring of workers") {
  if (mesh_ && (mesh_->size() != link_.size() || mesh_->rank() != link_.rank()))
    throw value_error("tcp_ring: a mesh of rank " + std::to_string(mesh_->rank()) + " of "
                      + std::to_string(mesh_->size()) + " beside the ring's rank "
                      + std::to_string(link_.rank()) + " of " + std::to_string(link_.size()));
  records_.name_workers(link_.connections().workers);
  const char* forced = std::getenv("LOCKSTEP_ALGORITHM");
  forced_ = parse_algorithm_override(forced != nullptr ? forced : "");
  const char* costs = std::getenv("LOCKSTEP_LINK_COSTS");
  if (costs != nullptr && *costs != '\0')
    use_costs(parse_link_costs(costs));
}

void tcp_ring_communicator::use_costs(const link_costs& costs) {
  costs_ = costs;
  if (mesh_) // every rank holds the same costs: the same pacing
    mesh_->pace_from(paced_from_bytes(costs));
}

worker_links tcp_ring_communicator::links() noexcept {
  return {link_, mesh_.get()};
}

algorithm tcp_ring_communicator::algorithm_for(collective_kind kind, std::size_t bytes,
                                               const collective_options& options) const {
  if (options.algorithm && runs(kind, *options.algorithm))
    return *options.algorithm;
  if (!costs_)
    return forced_.for_kind(kind).value_or(algorithm::ring);
  return pick_algorithm(kind, size(), bytes, *costs_, forced_);
}

link_costs tcp_ring_communicator::probe_links(std::chrono::milliseconds timeout) {
  if (costs_)
    return *costs_;
  auto* mesh = links().mesh;
  if (mesh == nullptr)
    return {};
  use_costs(probe_link_costs(*mesh, mesh->now() + timeout));
  return *costs_;
}

void tcp_ring_communicator::shut_down_links() noexcept {
  link_.shut_down();
  if (mesh_)
    mesh_->shut_down();
}

void tcp_ring_communicator::break_ring(const error_value& why) noexcept {
  {
    std::lock_guard lock{mutex_};
    if (broken_.message.empty())
      broken_ = why;
  }
  explained_.notify_all();
  shut_down_links();
}

void tcp_ring_communicator::explain_timeouts(std::chrono::milliseconds delay,
                                             progress_question ask, failure_notice tell) {
  std::lock_guard lock{mutex_};
  report_delay_ = delay;
  ask_ = std::move(ask);
  tell_ = std::move(tell);
}

std::uint64_t tcp_ring_communicator::reached() const noexcept {
  return session_.last_begun();
}

std::chrono::milliseconds tcp_ring_communicator::report_delay() const noexcept {
  std::lock_guard lock{mutex_};
  return report_delay_;
}

void tcp_ring_communicator::await_explanations(std::chrono::milliseconds grace) noexcept {
  std::lock_guard lock{mutex_};
  grace_ = grace;
}

std::string tcp_ring_communicator::name() const {
  return "tcp_ring";
}

std::size_t tcp_ring_communicator::size() const noexcept {
  return link_.size();
}

collective_session& tcp_ring_communicator::session() noexcept {
  return session_;
}

template <class Work>
void tcp_ring_communicator::run(std::size_t rank, collective_fingerprint f,
                                const collective_options& options, Work work) {
  session_.check_rank(rank);
  {
    std::lock_guard lock{mutex_};
    if (!broken_.message.empty())
      rethrow(broken_);
  }
  session_.begin(f.seq);
  timeline_scope span{timeline_on() ? timeline_track(track_kind::process, 1, "between workers")
                                    : 0,
                      "collective", "workers"};
  if (span.active()) {
    timeline_args::copy(span.args.label, f.op);
    timeline_args::copy(span.args.algorithm, f.algorithm.empty() ? "ring" : f.algorithm);
    span.args.seq = static_cast<std::int64_t>(f.seq);
    span.args.bytes = static_cast<std::int64_t>(f.bytes());
  }
  const auto record = [&](const char* outcome) { session_.end(f, outcome); };
  const auto broke = [&](const std::string& why) {
    shut_down_links(); // the neighbours fail at once instead of at their deadlines
    error_value reason;
    {
      // A loss the node reports (break_ring) names the lost worker; a
      // timeout another worker passes on names the collective.
      std::unique_lock lock{mutex_};
      explained_.wait_for(lock, grace_, [&] { return !broken_.message.empty(); });
      if (broken_.message.empty())
        broken_ = {error_kind::peer_lost_error,
                   "the ring of workers is broken at worker " + std::to_string(link_.rank()) + " ("
                     + f.to_string() + "): " + why,
                   "lockstep::peer_lost_error"};
      reason = broken_;
    }
    record("ring broken");
    rethrow(reason);
  };
  const auto timed_out = [&](const std::string& stalled) {
    // Asked while the links are still open: the workers that reached the
    // collective wait in it, and hear of the timeout before their links
    // close.
    auto reason = explain_timeout(f, options.timeout, stalled);
    failure_notice tell;
    {
      std::lock_guard lock{mutex_};
      if (broken_.message.empty())
        broken_ = reason;
      tell = tell_;
    }
    explained_.notify_all();
    if (tell)
      tell(reason);
    shut_down_links();
    record("timed out");
    rethrow(reason);
  };
  const auto deadline = link_.now() + options.timeout;
  try {
    work(f, deadline);
  } catch (const link_closed& e) {
    broke(e.what());
  } catch (const link_deadline_passed& e) {
    timed_out(e.what());
  } catch (...) { // agreed on by every rank: the ring stays usable
    record("failed");
    throw;
  }
  record("completed");
}

error_value tcp_ring_communicator::explain_timeout(const collective_fingerprint& f,
                                                  std::chrono::milliseconds timeout,
                                                  const std::string& stalled) const {
  progress_question ask;
  {
    std::lock_guard lock{mutex_};
    ask = ask_;
  }
  const auto reached = ask ? ask(f.seq) : std::vector<std::uint64_t>{};
  auto reason = worker_timeout(f, worker_, timeout, reached);
  reason.message += "; " + stalled;
  return reason;
}

void tcp_ring_communicator::all_reduce(std::size_t rank, reduce_op op,
                                       std::span<const tensor> inputs, std::span<tensor> outputs,
                                       const collective_options& options,
                                       std::uint64_t first_seq) {
  if (inputs.size() != outputs.size())
    throw value_error("tcp_ring all_reduce: " + std::to_string(inputs.size()) + " inputs but "
                      + std::to_string(outputs.size()) + " outputs");
  auto seq = session_.number(rank, options, first_seq);
  const auto batch = sign_batch(inputs);
  // One ring collective per run of tensors of one dtype, through one
  // contiguous buffer.
  std::size_t first = 0;
  do {
    auto last = first + 1;
    while (last < inputs.size() && inputs[last].dtype() == inputs[first].dtype())
      ++last;
    std::size_t total = 0;
    for (auto i = first; i < last && i < inputs.size(); ++i) {
      if (outputs[i].dtype() != inputs[i].dtype()
          || outputs[i].num_elements() != inputs[i].num_elements())
        throw value_error("tcp_ring all_reduce: output " + std::to_string(i)
                          + " does not match its input");
      total += inputs[i].byte_size();
    }
    const auto run_seq = options.seq != 0 ? seq : seq++; // caller-numbered: one number
    auto f = all_reduce_fingerprint(run_seq, op, inputs, first, last, batch, options);
    const auto a = algorithm_for(collective_kind::all_reduce, total, options);
    f.algorithm = named(a);
    run(rank, std::move(f), options, [&](const collective_fingerprint& mine,
                                         link::time_point deadline) {
      const auto type = inputs[first].dtype();
      if (total == 0) { // nothing to move (and memcpy must not see a null buffer)
        worker_all_reduce(a, links(), records_, mine, options.failure, op, type, {}, deadline);
        return;
      }
      if (last - first == 1) { // one tensor: reduced in its output, no packing
        const auto out = bytes_of(outputs[first]);
        const auto in = bytes_of(inputs[first]);
        if (in.data() != out.data())
          std::memcpy(out.data(), in.data(), in.size());
        worker_all_reduce(a, links(), records_, mine, options.failure, op, type, out, deadline);
        return;
      }
      bytes buffer(total);
      auto* pack = reinterpret_cast<std::byte*>(buffer.data());
      read_pack(inputs.subspan(first, last - first), 0, pack, total);
      worker_all_reduce(a, links(), records_, mine, options.failure, op, type, buffer, deadline);
      write_pack(outputs.subspan(first, last - first), 0, pack, total);
    });
    first = last;
  } while (first < inputs.size());
}

void tcp_ring_communicator::reduce_scatter(std::size_t rank, reduce_op op, const tensor& input,
                                           tensor& output, const collective_options& options) {
  const auto world = link_.size();
  if (input.dtype() != output.dtype()
      || static_cast<std::size_t>(input.num_elements()) != world * output.num_elements())
    throw value_error("tcp_ring reduce_scatter: the input needs " + std::to_string(world)
                      + " blocks of the output's size and dtype");
  // All-reduce, then keep this rank's block: the ring's reduce-scatter
  // stage alone would move half the bytes (later).
  auto whole = input.copy();
  all_reduce(rank, op, {&input, 1}, {&whole, 1}, options);
  const auto block = output.byte_size();
  if (block > 0)
    std::memcpy(bytes_of(output).data(), bytes_of(whole).data() + rank * block, block);
}

void tcp_ring_communicator::all_gather(std::size_t rank, const tensor& input, tensor& output,
                                       const collective_options& options) {
  auto f = all_gather_fingerprint("tcp_ring", link_.size(), session_.number(rank, options),
                                  input, output, options);
  const auto a = algorithm_for(collective_kind::all_gather, output.byte_size(), options);
  f.algorithm = named(a);
  run(rank, std::move(f), options, [&](const collective_fingerprint& mine,
                                       link::time_point deadline) {
    auto out = bytes_of(output);
    if (input.byte_size() > 0)
      std::memcpy(out.data() + rank * input.byte_size(), bytes_of(input).data(),
                  input.byte_size());
    worker_all_gather(a, links(), records_, mine, options.failure, out, deadline);
  });
}

void tcp_ring_communicator::broadcast(std::size_t rank, std::size_t root, std::span<tensor> buffers,
                                      const collective_options& options) {
  auto f = broadcast_fingerprint(session_.number(rank, options), root, buffers, options);
  std::size_t total = 0;
  std::vector<std::span<std::uint8_t>> data;
  for (auto& buffer : buffers) {
    total += buffer.byte_size();
    data.push_back(bytes_of(buffer));
  }
  const auto a = algorithm_for(collective_kind::broadcast, total, options);
  f.algorithm = named(a);
  run(rank, std::move(f), options, [&](const collective_fingerprint& mine,
                                       link::time_point deadline) {
    worker_broadcast(a, links(), records_, mine, options.failure, root, data, deadline);
  });
}

void tcp_ring_communicator::restart_numbering() noexcept {
  session_.restart_numbering();
}

} // namespace lockstep::detail
