#include "transport/tcp/dial_host.hpp"

#include "runtime/log.hpp"
#include "runtime/thread_start.hpp"

#include "lockstep/error.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>

#include <algorithm>
#include <atomic>
#include <exception>
#include <future>
#include <memory>
#include <thread>

namespace lockstep::detail {

namespace {

/// getaddrinfo, through Asio, waiting as long as it takes.
host_addresses lookup(const std::string& host, std::uint16_t port) {
  boost::asio::io_context context;
  boost::asio::ip::tcp::resolver resolver(context);
  boost::system::error_code error;
  const auto results = resolver.resolve(host, std::to_string(port), error);
  host_addresses found;
  if (error) {
    found.error = "cannot resolve '" + host + "': " + error.message();
    return found;
  }
  for (const auto& entry : results)
    found.endpoints.push_back(entry.endpoint());
  if (found.endpoints.empty())
    found.error = "'" + host + "' resolves to no address";
  return found;
}

std::string text_of(const boost::asio::ip::tcp::endpoint& endpoint) {
  return network_address{endpoint.address().to_string(), endpoint.port()}.to_string();
}

/// Lookups of every resolver still running, process-wide: a lookup that
/// hangs (a DNS server that never answers) keeps its thread, so more
/// resolvers, each with one lookup pending, could pile threads up.
std::atomic<std::size_t> running_lookups{0};

} // namespace

std::size_t lookup_threads_running() noexcept {
  return running_lookups.load();
}

host_resolver threaded_resolver(
  std::function<host_addresses(const std::string&, std::uint16_t)> lookup) {
  auto pending = std::make_shared<std::shared_future<host_addresses>>();
  return [pending, lookup = std::move(lookup)](const std::string& host, std::uint16_t port,
                                               io_clock::time_point deadline) {
    boost::system::error_code not_an_address;
    const auto address = boost::asio::ip::make_address(host, not_an_address);
    if (!not_an_address)
      return host_addresses{{{address, port}}, {}};
    if (!pending->valid()) {
      if (running_lookups.fetch_add(1) >= max_lookup_threads) {
        running_lookups.fetch_sub(1);
        return host_addresses{{}, "looking up '" + host + "' waits: "
                                    + std::to_string(max_lookup_threads)
                                    + " lookups of this process are still running (a DNS "
                                      "server that does not answer?)"};
      }
      auto promise = std::make_shared<std::promise<host_addresses>>();
      auto future = promise->get_future().share();
      try {
        start_thread("looking up '" + host + "'", [promise, host, port, lookup] {
          host_addresses found;
          std::exception_ptr failure;
          try {
            found = lookup(host, port);
          } catch (...) {
            failure = std::current_exception();
          }
          running_lookups.fetch_sub(1); // first: whoever gets the answer may start another
          if (failure)
            promise->set_exception(failure);
          else
            promise->set_value(std::move(found));
        }).detach();
      } catch (...) { // resource_error: the next call tries again
        running_lookups.fetch_sub(1);
        throw;
      }
      *pending = std::move(future);
    }
    if (pending->wait_until(deadline) != std::future_status::ready)
      return host_addresses{{}, "looking up '" + host + "' did not finish"};
    auto found = pending->get();
    *pending = {};
    return found;
  };
}

host_resolver system_resolver() {
  return threaded_resolver(lookup);
}

void dial_host(tcp_socket& socket, const network_address& address, std::string_view peer,
               io_clock::time_point deadline, const host_resolver& resolve,
               const dial_waits& waits) {
  const auto who = std::string(peer) + " at " + address.to_string();
  const auto start = io_clock::now();
  const auto seconds = [](io_clock::duration d) {
    return std::chrono::duration_cast<std::chrono::seconds>(d).count();
  };
  auto pause = first_dial_pause;
  auto next_report = start + waits.first_report;
  std::string reason;
  for (;;) {
    if (waits.check)
      waits.check();
    const auto found =
      resolve(address.host, address.port, std::min(deadline, io_clock::now() + lookup_slice));
    if (found.endpoints.empty())
      reason = found.error;
    for (const auto& endpoint : found.endpoints) {
      const auto error = connect_before(
        socket, endpoint, std::min(deadline, io_clock::now() + address_attempt_timeout));
      if (!error)
        return;
      reason = text_of(endpoint) + ": " + error.message();
    }
    const auto now = io_clock::now();
    if (now + pause >= deadline)
      throw timeout_error(who + " did not accept a connection before the deadline (last: "
                          + reason + ")");
    // A failure that lasts, then a line per report interval: a worker that
    // cannot reach its peer says so, without a line per attempt.
    if (now >= next_report) {
      LOCKSTEP_LOG_WARN("dialing {}: failing for {} s (last: {}); retrying for up to {} s more",
                        who, seconds(now - start), reason, seconds(deadline - now));
      next_report = now + waits.report_interval;
    }
    if (waits.sleep)
      waits.sleep(pause);
    else
      std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, longest_dial_pause);
  }
}

} // namespace lockstep::detail
