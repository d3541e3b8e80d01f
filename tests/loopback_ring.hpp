#pragma once

// `world` workers' ring links over loopback, connected and authenticated
// (connect_ring), each behind a tcp_link, with one thread per worker to run
// work on them.

#include "transport/tcp/tcp_link.hpp"

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace lockstep::detail::test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

inline const bytes token = [] {
  const std::string text = "ring-test-token-0123456789";
  return bytes(text.begin(), text.end());
}();

/// `world` workers' ring links, connected and authenticated over loopback.
class loopback_ring {
public:
  explicit loopback_ring(std::size_t world) {
    for (std::size_t r = 0; r < world; ++r) {
      acceptors_.push_back(std::make_unique<asio::ip::tcp::acceptor>(
        context_, asio::ip::tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}));
      links_.push_back(std::make_unique<tcp_link>(
        ring_links{r, world, tcp_socket(context_), tcp_socket(context_)}));
    }
    run([&](tcp_link& links) {
      const auto r = links.rank();
      connect_ring(links.connections(), *acceptors_[r], acceptors_[(r + 1) % world]->local_endpoint(), token,
                   {"ring-test", 0, static_cast<std::uint32_t>(r)}, io_clock::now() + 10s);
    });
  }

  /// Runs `work` on every worker's thread; returns what each threw (null
  /// for none). A worker that throws closes its links, as a node does.
  std::vector<std::exception_ptr> try_run(const std::function<void(tcp_link&)>& work) {
    std::vector<std::exception_ptr> errors(links_.size());
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < links_.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          work(*links_[r]);
        } catch (...) {
          errors[r] = std::current_exception();
          links_[r]->close();
        }
      });
    for (auto& t : threads)
      t.join();
    return errors;
  }

  /// try_run, failing the test if a worker threw.
  void run(const std::function<void(tcp_link&)>& work) {
    for (const auto& error : try_run(work))
      if (error)
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          FAIL("a worker threw: " << e.what());
        }
  }

  /// The links, for a communicator to own (the ring must outlive it).
  ring_links take(std::size_t rank) { return std::move(links_[rank]->connections()); }

private:
  asio::io_context context_;
  std::vector<std::unique_ptr<asio::ip::tcp::acceptor>> acceptors_;
  std::vector<std::unique_ptr<tcp_link>> links_;
};

} // namespace lockstep::detail::test
