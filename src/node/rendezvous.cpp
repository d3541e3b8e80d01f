#include "node/rendezvous.hpp"

#include "node/agreed_settings.hpp"
#include "node/control_messages.hpp"
#include "node/join_cancellation.hpp"
#include "node/pending_join.hpp"
#include "runtime/error_text.hpp"
#include "runtime/log.hpp"
#include "transport/tcp/authenticate.hpp"

#include "lockstep/error.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <type_traits>

namespace lockstep::detail {

namespace {

namespace asio = boost::asio;

std::string worker(std::uint32_t rank) {
  return "worker " + std::to_string(rank);
}

/// A per-connection deadline: the handshake's, within the rendezvous's.
io_clock::time_point step_deadline(io_clock::time_point overall) {
  return std::min(overall, io_clock::now() + handshake_timeout);
}

/// The longest a wait of the rendezvous sleeps before it looks at the
/// cancel flag again (poll wakes at once for the cancel eventfd).
constexpr std::chrono::seconds wait_slice{1};

handshake_identity identity_of(const rendezvous_settings& settings) {
  return {settings.spec.job_id, settings.spec.generation,
          static_cast<std::uint32_t>(settings.spec.rank)};
}

/// Why the coordinator refuses `request` from the worker that proved
/// `handshake_rank`, or nothing when it fits. (Settings are compared once
/// every worker has joined, so that the error can name every value.)
std::optional<std::string> refusal(const join_request& request, std::uint32_t handshake_rank,
                                   const rendezvous_settings& settings,
                                   const std::map<std::uint32_t, join_request>& joined) {
  const auto who = worker(handshake_rank);
  const auto world = settings.spec.world_size;
  if (request.protocol_version != wire_protocol_version)
    return who + ": wire protocol version " + std::to_string(request.protocol_version)
           + ", the coordinator's is " + std::to_string(wire_protocol_version)
           + " (run the same lockstep on every worker)";
  if (request.rank != handshake_rank)
    return who + ": its join names rank " + std::to_string(request.rank)
           + " but its handshake rank " + std::to_string(handshake_rank);
  if (request.job_id != settings.spec.job_id)
    return who + ": job id '" + request.job_id + "', the coordinator's is '"
           + settings.spec.job_id + "'";
  if (request.world_size != world)
    return who + ": world size " + std::to_string(request.world_size)
           + ", the coordinator's is " + std::to_string(world);
  if (request.rank == 0 || request.rank >= world)
    return who + ": rank " + std::to_string(request.rank) + " is not a worker rank of a world of "
           + std::to_string(world) + " (1 to " + std::to_string(world - 1) + " join rank 0)";
  if (joined.contains(request.rank))
    return who + ": rank " + std::to_string(request.rank) + " has already joined";
  return std::nullopt;
}

/// The ranks below `world` that have not joined, as an error lists them
/// (the first few, then "... and N more").
std::string missing_ranks(const std::map<std::uint32_t, join_request>& joined, std::size_t world) {
  std::vector<std::string> shown;
  for (std::uint32_t r = 1; r < world && shown.size() <= items_in_errors; ++r)
    if (!joined.contains(r))
      shown.push_back(std::to_string(r));
  return joined_list(shown, items_in_errors, world - 1 - joined.size());
}

/// The rendezvous at the coordinator: the connections in their handshake,
/// the workers that joined, and what it refused on the way.
class rendezvous_host {
public:
  rendezvous_host(asio::ip::tcp::acceptor& acceptor, const rendezvous_settings& settings)
    : acceptor_(acceptor), settings_(settings), self_(identity_of(settings)),
      deadline_(io_clock::now() + settings.join_timeout) {
    acceptor_.non_blocking(true);
  }

  /// Serves connections until every worker has joined. Throws
  /// timeout_error at the deadline, cancelled_error on cancel_joins().
  void gather() {
    const auto world = settings_.spec.world_size;
    while (joined_.size() + 1 < world) {
      throw_if_joins_cancelled("the rendezvous of job '" + settings_.spec.job_id + "'");
      const auto now = io_clock::now();
      if (now >= deadline_)
        throw timeout_error(timeout_text());
      drop_expired(now);
      std::vector<pollfd> entries{{acceptor_.native_handle(), POLLIN, 0}, join_cancel_entry()};
      auto wake = std::min(deadline_, now + wait_slice);
      for (const auto& join : pending_) {
        entries.push_back(join.poll_entry());
        wake = std::min(wake, join.deadline());
      }
      poll_until(entries, wake);
      for (std::size_t i = pending_.size(); i-- > 0;)
        if (entries[i + 2].revents != 0)
          advance(i);
      if (entries[0].revents != 0)
        accept_waiting();
    }
  }

  /// Compares the workers' settings with rank 0's; throws value_error
  /// naming each difference.
  void check_settings() const {
    std::vector<std::vector<agreed_setting>> by_rank{settings_.settings};
    for (const auto& [rank, request] : joined_)
      by_rank.push_back(request.settings);
    if (auto why = settings_disagreement(by_rank))
      throw value_error("rendezvous of job '" + settings_.spec.job_id + "': " + *why);
  }

  /// Tells every worker that joined that the rendezvous failed with
  /// `failure`, which each then raises; a worker that cannot be told learns
  /// it from the closed connection.
  void refuse_all(const error_value& failure) {
    join_reply no;
    no.refusal = failure;
    for (auto& [rank, socket] : sockets_) {
      try {
        send_control(socket, no, io_clock::now() + handshake_timeout);
      } catch (const std::exception& e) {
        LOCKSTEP_LOG_WARN("rendezvous: cannot tell {} that the join failed: {}", worker(rank),
                          e.what());
      }
    }
  }

  /// Sends every worker the membership; the result with the control
  /// connections.
  rendezvous_result finish() {
    rendezvous_result result;
    auto& m = result.membership;
    m.job_id = settings_.spec.job_id;
    m.generation = settings_.spec.generation;
    m.members.push_back(
      {0,
       advertised_host(settings_.data_address.host,
                       settings_.spec.coordinator ? settings_.spec.coordinator->host : "127.0.0.1"),
       settings_.data_address.port, settings_.local_replicas, 0});
    for (const auto& [rank, request] : joined_)
      m.members.push_back({rank, request.host, request.port, request.local_replicas,
                           request.host_hash});
    result.control.emplace_back(acceptor_.get_executor()); // rank 0: itself
    for (auto& [rank, socket] : sockets_) {
      send_control(socket, m, step_deadline(deadline_));
      result.control.push_back(std::move(socket));
    }
    return result;
  }

private:
  std::string timeout_text() const {
    auto text = "rendezvous of job '" + settings_.spec.job_id + "': worker(s) "
                + missing_ranks(joined_, settings_.spec.world_size) + " of "
                + std::to_string(settings_.spec.world_size) + " did not join within "
                + std::to_string(settings_.join_timeout.count()) + " ms";
    if (!refused_.empty())
      text += "; refused meanwhile: " + joined_list(refused_, items_in_errors, refused_total_);
    return text;
  }

  /// Remembers a connection refused for `why`, for the timeout's error.
  void note_refused(const std::string& from, const std::string& why) {
    if (refused_.size() <= items_in_errors)
      refused_.push_back(from + " (" + why + ")");
    ++refused_total_;
  }

  void drop_expired(io_clock::time_point now) {
    std::erase_if(pending_, [&](const pending_join& join) {
      if (join.deadline() > now)
        return false;
      LOCKSTEP_LOG_INFO("rendezvous: dropped a connection from {}: no handshake and join within "
                        "{} s",
                        join.from(), handshake_timeout.count());
      return true;
    });
  }

  void accept_waiting() {
    for (;;) {
      tcp_socket socket(acceptor_.get_executor());
      boost::system::error_code error;
      acceptor_.accept(socket, error);
      if (error == asio::error::would_block || error == asio::error::try_again)
        return;
      if (error) {
        // Reset before it was taken, or no descriptor left: the next wake
        // tries again.
        LOCKSTEP_LOG_WARN("rendezvous: accepting a control connection failed: {}",
                          error.message());
        return;
      }
      const auto remote = socket.remote_endpoint(error);
      auto from = error ? std::string("an unknown address")
                        : remote.address().to_string() + ":" + std::to_string(remote.port());
      socket.set_option(asio::ip::tcp::no_delay(true), error);
      if (pending_.size() == max_pending_joins) {
        LOCKSTEP_LOG_WARN("rendezvous: {} connections in their handshake; dropped the oldest, "
                          "from {}",
                          max_pending_joins, pending_.front().from());
        pending_.erase(pending_.begin());
      }
      pending_.emplace_back(std::move(socket), std::move(from), settings_.token, self_,
                            step_deadline(deadline_));
    }
  }

  /// Moves pending connection `index` on; it leaves the list once it has
  /// joined, been refused or failed.
  void advance(std::size_t index) {
    auto& join = pending_[index];
    try {
      auto request = join.advance();
      if (!request)
        return;
      admit(join, std::move(*request));
    } catch (const handshake_refused& e) {
      LOCKSTEP_LOG_WARN("rendezvous: {} failed authentication: {}", join.from(), e.what());
      note_refused(join.from(), std::string("failed authentication: ") + e.what());
    } catch (const std::exception& e) {
      // A stranger, garbage, or a client that went away: dropped, and the
      // cluster keeps waiting for its workers.
      LOCKSTEP_LOG_INFO("rendezvous: dropped a connection from {}: {}", join.from(), e.what());
    }
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(index));
  }

  void admit(pending_join& join, join_request request) {
    if (auto why = refusal(request, join.rank(), settings_, joined_)) {
      LOCKSTEP_LOG_WARN("rendezvous: refused {} from {}: {}", worker(join.rank()), join.from(),
                        *why);
      note_refused(join.from(), *why);
      join_reply no;
      no.refusal = {error_kind::value_error, *why, "lockstep::value_error"};
      send_control(join.socket(), no, step_deadline(deadline_));
      return; // the socket closes; wait for the right worker
    }
    join_reply yes;
    yes.accepted = true;
    send_control(join.socket(), yes, step_deadline(deadline_));
    if (request.host.empty()) {
      boost::system::error_code ignored;
      request.host = join.socket().remote_endpoint(ignored).address().to_string();
    }
    LOCKSTEP_LOG_INFO("rendezvous: {} joined from {}", worker(request.rank), join.from());
    sockets_.emplace(request.rank, std::move(join.socket()));
    joined_.emplace(request.rank, std::move(request));
  }

  asio::ip::tcp::acceptor& acceptor_;
  const rendezvous_settings& settings_;
  handshake_identity self_;
  io_clock::time_point deadline_;
  std::vector<pending_join> pending_; // oldest first
  std::map<std::uint32_t, join_request> joined_;
  std::map<std::uint32_t, tcp_socket> sockets_;
  std::vector<std::string> refused_; // the first few, for the timeout's error
  std::size_t refused_total_ = 0;
};

/// Waits until `socket` has bytes to read; false at the deadline. Throws
/// cancelled_error naming `what` on cancel_joins().
bool wait_readable(tcp_socket& socket, io_clock::time_point deadline, const std::string& what) {
  for (;;) {
    throw_if_joins_cancelled(what);
    const auto now = io_clock::now();
    if (now >= deadline)
      return false;
    std::array<pollfd, 2> entries{pollfd{socket.native_handle(), POLLIN, 0}, join_cancel_entry()};
    if (poll_until(entries, std::min(deadline, now + wait_slice)) && entries[0].revents != 0)
      return true;
  }
}

/// How a joining worker dials: cancel_joins() ends the dial at once.
dial_waits join_waits(const std::string& what) {
  return {.check = [what] { throw_if_joins_cancelled(what); },
          .sleep = [](std::chrono::milliseconds pause) {
            auto entry = join_cancel_entry();
            ::poll(&entry, 1, static_cast<int>(pause.count()));
          }};
}

/// The coordinator's next control frame for `what`, decoded as `Message`,
/// or the join_reply that refuses the join instead (rethrown). Throws
/// timeout_error at the deadline and cancelled_error.
template <class Message>
Message receive_unless_refused(tcp_socket& socket, io_clock::time_point deadline,
                               const std::string& what) {
  if (!wait_readable(socket, deadline, what))
    throw timeout_error(what + ": the coordinator did not answer before the join deadline");
  const auto f = read_frame(socket, max_control_payload, deadline);
  if (f.kind == static_cast<std::uint32_t>(control_kind::join_reply)) {
    const auto reply = decode_control<join_reply>(f);
    if (!reply.accepted)
      rethrow(reply.refusal);
    if constexpr (std::is_same_v<Message, join_reply>)
      return reply;
  }
  return decode_control<Message>(f);
}

} // namespace

boost::asio::ip::tcp::endpoint resolve_endpoint(asio::io_context& context,
                                                const std::string& host, std::uint16_t port,
                                                const std::string& what) {
  asio::ip::tcp::resolver resolver(context);
  boost::system::error_code error;
  const auto endpoints = resolver.resolve(host, std::to_string(port), error);
  if (error || endpoints.empty())
    throw value_error("cluster: cannot resolve " + what + " '" + host + "': "
                      + (error ? error.message() : "no address"));
  return endpoints.begin()->endpoint();
}

std::string advertised_host(const std::string& host, const std::string& fallback) {
  if (host.empty() || host == "0.0.0.0" || host == "::")
    return fallback;
  return host;
}

rendezvous_result coordinate_rendezvous(asio::ip::tcp::acceptor& acceptor,
                                        const rendezvous_settings& settings) {
  rendezvous_host host(acceptor, settings);
  try {
    host.gather();
    host.check_settings();
  } catch (...) {
    host.refuse_all(to_error_value(std::current_exception()));
    throw;
  }
  return host.finish();
}

rendezvous_result join_rendezvous(asio::io_context& context, const rendezvous_settings& settings) {
  const auto& spec = settings.spec;
  if (!spec.coordinator)
    throw value_error("rendezvous: worker " + std::to_string(spec.rank)
                      + " has no coordinator address");
  const auto deadline = io_clock::now() + settings.join_timeout;
  const auto coordinator = spec.coordinator->to_string();
  const auto what = "joining job '" + spec.job_id + "' at the coordinator " + coordinator;
  rendezvous_result result;
  auto& socket = result.control.emplace_back(context);
  const auto waits = join_waits(what);
  const auto resolve = settings.resolve ? settings.resolve : system_resolver();
  auto pause = std::chrono::milliseconds{10}; // after a closed handshake, growing to 1 s
  for (int attempt = 1;; ++attempt) {
    dial_host(socket, *spec.coordinator, "the coordinator", deadline, resolve, waits);
    socket.set_option(asio::ip::tcp::no_delay(true));
    try {
      authenticate_client(socket, settings.token, identity_of(settings), coordinator,
                          step_deadline(deadline));
      break;
    } catch (const handshake_closed& e) {
      // Closed before the challenge: a coordinator that refuses this
      // worker, or a proxy, load balancer or service in front of one that
      // does not listen yet (it accepts, then closes). Both look alike
      // from here: try again until the join deadline, as for a coordinator
      // that refuses the connection itself.
      socket.close();
      if (io_clock::now() + pause >= deadline)
        throw authentication_error(what + ": " + e.what() + " on each of "
                                   + std::to_string(attempt)
                                   + " attempts until the join deadline");
      if (attempt == 1)
        LOCKSTEP_LOG_WARN("{}: {}, or it is behind a proxy and not listening yet; trying again "
                          "until the join deadline",
                          what, e.what());
      waits.sleep(pause);
      waits.check();
      pause = std::min(2 * pause, std::chrono::milliseconds{1000});
    } catch (const timeout_error& e) {
      // A coordinator busy with other connections, or slowed down: a new
      // connection, until the join deadline.
      socket.close();
      if (io_clock::now() >= deadline)
        throw timeout_error(what + ": " + e.what() + " (" + std::to_string(attempt)
                            + " attempts until the join deadline)");
      LOCKSTEP_LOG_WARN("{}: {} (attempt {}); trying again until the join deadline", what,
                        e.what(), attempt);
    }
  }
  join_request request;
  request.job_id = spec.job_id;
  request.rank = static_cast<std::uint32_t>(spec.rank);
  request.world_size = static_cast<std::uint32_t>(spec.world_size);
  request.generation = spec.generation;
  request.local_replicas = settings.local_replicas;
  request.host = advertised_host(settings.data_address.host,
                                 socket.local_endpoint().address().to_string());
  request.port = settings.data_address.port;
  request.settings = settings.settings;
  send_control(socket, request, step_deadline(deadline));
  receive_unless_refused<join_reply>(socket, deadline, what);
  // Past its own deadline a worker that joined still waits a moment for the
  // coordinator's word: started about when it was, the coordinator times out
  // then too, and says who never came.
  result.membership =
    receive_unless_refused<membership>(socket, deadline + handshake_timeout, what);
  const auto& members = result.membership.members;
  bool in_order = members.size() == spec.world_size;
  for (std::size_t r = 0; in_order && r < members.size(); ++r)
    in_order = members[r].rank == r;
  if (!in_order || result.membership.job_id != spec.job_id
      || result.membership.generation != spec.generation)
    throw bad_control_message("the coordinator at " + coordinator
                              + " sent a membership that does not list ranks 0 to "
                              + std::to_string(spec.world_size - 1) + " of job '" + spec.job_id
                              + "', generation " + std::to_string(spec.generation));
  return result;
}

} // namespace lockstep::detail
