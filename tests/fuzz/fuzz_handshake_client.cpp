// Fuzz target: the dialing side of the handshake and of the join, as a
// worker runs it (node/rendezvous.hpp's join_rendezvous: dial, the client's
// handshake of transport/tcp/authenticate.hpp, the join_request, then the
// coordinator's join_reply and membership frames), against a coordinator
// that the harness plays on loopback TCP.
//
// Input: how the coordinator edits its challenge and its acceptance (as
// they are, one byte changed, cut short or replaced: fuzz_support.hpp's
// edit), then what it answers the join_request with: mode byte 0 a genuine
// join_reply and membership, 1 the rest of the input as its bytes, 2 a
// genuine join_reply and then the rest of the input, 3 a genuine refusal.
// Then the coordinator closes the connection.
//
// Guarantees checked:
//   - join_rendezvous returns or throws promptly (by its join deadline,
//     when it tries again a coordinator that closed before its first byte),
//     and never throws a std::logic_error (std::length_error, ...)
//     or std::bad_alloc; no crash, no allocation beyond the frame limit;
//   - it joins only when the coordinator proved the token (an edited
//     challenge or acceptance fails), and then with exactly the
//     membership the coordinator sent; a genuine coordinator is joined.

#include "fuzz_messages.hpp"

#include "node/rendezvous.hpp"
#include "transport/tcp/frame.hpp"

#include "lockstep/error.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <poll.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <new>
#include <stdexcept>
#include <thread>

using namespace lockstep;
using namespace lockstep::detail;
namespace asio = boost::asio;

namespace {

/// What the harness's coordinator did to its side of the handshake.
struct coordinator_script {
  fuzz::edit challenge;
  fuzz::edit acceptance;
  std::uint8_t answer = 0;
  std::span<const std::uint8_t> rest;
};

/// The listening socket, one for the whole run.
asio::ip::tcp::acceptor& listener(asio::io_context& context) {
  static asio::ip::tcp::acceptor acceptor(context, {asio::ip::make_address("127.0.0.1"), 0});
  return acceptor;
}

/// One connection's coordinator: the server's handshake with the script's
/// edits, then its answer; it stops at the first thing the worker refuses.
/// Sets `proved` when its challenge and acceptance went out unchanged.
void coordinate(asio::ip::tcp::acceptor& acceptor, const coordinator_script& script,
                bool& proved, bool& answered_genuinely) {
  proved = false;
  answered_genuinely = false;
  pollfd entry{acceptor.native_handle(), POLLIN, 0};
  if (::poll(&entry, 1, 10'000) != 1)
    fuzz::broken("the worker did not dial the coordinator within 10 s");
  tcp_socket socket(acceptor.get_executor());
  acceptor.accept(socket);
  const auto deadline = fuzz::hang_deadline();
  try {
    server_handshake server{fuzz::cluster_token(), {fuzz::job_id, fuzz::generation, 0}};
    bytes head(hello_head_size);
    read_exact(socket, head, deadline);
    bytes job(server.job_id_length(head));
    read_exact(socket, job, deadline);
    const auto challenge = server.challenge(head, job);
    bool closes = false;
    const auto sent_challenge = script.challenge.apply(challenge, closes);
    // Replaced bytes may be too few for the worker to read on: close, as a
    // coordinator that sends garbage and goes away.
    if (closes || script.challenge.what == fuzz::edit::op::replace) {
      fuzz::send_then_close(socket, sent_challenge);
      return;
    }
    write_all(socket, {sent_challenge}, deadline);
    bytes response(response_size);
    read_exact(socket, response, deadline);
    const auto acceptance = server.accept(response);
    const auto sent_acceptance = script.acceptance.apply(acceptance, closes);
    if (closes || script.acceptance.what == fuzz::edit::op::replace) {
      fuzz::send_then_close(socket, sent_acceptance);
      return;
    }
    write_all(socket, {sent_acceptance}, deadline);
    proved = sent_challenge == challenge && sent_acceptance == acceptance;
    // The worker's join_request, then the answer.
    receive_control<join_request>(socket, deadline);
    bytes answer;
    const auto append = [&](const bytes& b) { answer.insert(answer.end(), b.begin(), b.end()); };
    switch (script.answer % 4) {
      case 0:
        append(fuzz::frame_bytes(fuzz::sample_join_reply(true)));
        append(fuzz::frame_bytes(fuzz::sample_membership()));
        answered_genuinely = true;
        break;
      case 1:
        answer.assign(script.rest.begin(), script.rest.end());
        break;
      case 2:
        append(fuzz::frame_bytes(fuzz::sample_join_reply(true)));
        answer.insert(answer.end(), script.rest.begin(), script.rest.end());
        break;
      case 3:
        append(fuzz::frame_bytes(fuzz::sample_join_reply(false)));
        break;
    }
    fuzz::send_then_close(socket, answer);
    // Wait for the worker to close its end (it has what it needs).
    std::uint8_t sink[256];
    while (::recv(socket.native_handle(), sink, sizeof sink, 0) > 0) {
    }
  } catch (const std::exception&) {
    // The worker refused or hung up: what the worker did is checked by
    // the caller.
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input_reader in({data, size});
  coordinator_script script;
  script.challenge = fuzz::edit::read(in);
  script.acceptance = fuzz::edit::read(in);
  script.answer = in.byte();
  script.rest = in.rest();

  static asio::io_context context;
  auto& acceptor = listener(context);
  const auto port = acceptor.local_endpoint().port();
  rendezvous_settings settings;
  settings.spec.job_id = fuzz::job_id;
  settings.spec.generation = fuzz::generation;
  settings.spec.world_size = 3;
  settings.spec.rank = 1;
  settings.spec.coordinator = network_address{"127.0.0.1", port};
  settings.token = fuzz::cluster_token();
  settings.local_replicas = 2;
  settings.data_address = {"10.0.0.2", 40001};
  // A coordinator that closes before its first byte, or stalls, is tried
  // again until the join deadline (a proxy in front of one that does not
  // listen yet, a coordinator busy with others): a short one keeps such
  // inputs short, and is still long for a genuine join on loopback.
  settings.join_timeout = std::chrono::milliseconds{250};
  settings.resolve = [](const std::string&, std::uint16_t p, io_clock::time_point) {
    host_addresses found;
    found.endpoints.emplace_back(asio::ip::make_address("127.0.0.1"), p);
    return found;
  };

  bool proved = false;
  bool answered_genuinely = false;
  std::atomic<bool> worker_done{false};
  std::thread coordinator([&] {
    coordinate(acceptor, script, proved, answered_genuinely);
    // A worker tries again a coordinator that closed before its first
    // byte: its later connections are refused the same way (accepted and
    // closed) until it gives up, and none is left for the next input.
    for (bool last_look = false; !last_look;) {
      last_look = worker_done.load();
      pollfd entry{acceptor.native_handle(), POLLIN, 0};
      while (::poll(&entry, 1, last_look ? 0 : 10) == 1) {
        tcp_socket extra(acceptor.get_executor());
        boost::system::error_code ignored;
        acceptor.accept(extra, ignored);
      }
    }
  });
  const auto start = io_clock::now();
  bool joined = false;
  membership got;
  try {
    auto result = join_rendezvous(context, settings);
    joined = true;
    got = result.membership;
  } catch (const std::logic_error& e) {
    fuzz::broken(std::string("join_rendezvous threw a logic error: ") + e.what());
  } catch (const std::bad_alloc&) {
    fuzz::broken("join_rendezvous ran out of memory");
  } catch (const std::exception&) {
    // The connection's own error: the worker reports it and exits.
  }
  const auto took = io_clock::now() - start;
  worker_done = true;
  coordinator.join();
  if (took > settings.join_timeout + std::chrono::seconds{5})
    fuzz::broken("join_rendezvous took more than its join deadline and 5 s against a coordinator "
                 "that closed (a hang)");
  if (joined && !proved)
    fuzz::broken("the worker joined a coordinator that did not prove the token");
  if (joined && got != fuzz::sample_membership() && answered_genuinely)
    fuzz::broken("the worker joined with another membership than the coordinator sent");
  if (joined && script.answer % 4 == 3)
    fuzz::broken("the worker joined although the coordinator refused it");
  const bool genuine = script.challenge.what == fuzz::edit::op::keep
                       && script.acceptance.what == fuzz::edit::op::keep && script.answer % 4 == 0;
  if (genuine && !(joined && got == fuzz::sample_membership()))
    fuzz::broken("the worker did not join a genuine coordinator with its membership");
  if (!joined && proved && answered_genuinely)
    fuzz::broken("the worker failed to join a genuine coordinator");
  return 0;
}

std::vector<std::vector<std::uint8_t>> lockstep_fuzz_seeds() {
  const fuzz::bytes keep{0, 0, 0, 0};
  const auto with = [&](std::uint8_t answer, const fuzz::bytes& rest) {
    fuzz::bytes out = keep;
    out.insert(out.end(), keep.begin(), keep.end());
    out.push_back(answer);
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
  };
  auto answer = fuzz::frame_bytes(fuzz::sample_join_reply(true));
  const auto members = fuzz::frame_bytes(fuzz::sample_membership());
  auto both = answer;
  both.insert(both.end(), members.begin(), members.end());
  return {
    with(0, {}),
    with(1, both),
    with(2, members),
    with(3, {}),
    // A challenge with one byte changed: the worker must not join.
    fuzz::bytes{1, 40, 0, 0x01, 0, 0, 0, 0, 0},
  };
}
