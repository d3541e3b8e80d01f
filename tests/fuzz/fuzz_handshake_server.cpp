// Fuzz target: the accepting side of the handshake, as the coordinator's
// rendezvous runs it (node/pending_join.hpp: the server's handshake of
// transport/tcp/handshake.hpp, then the join_request's frame, moved by
// non-blocking reads and writes).
//
// Input: a mode byte. Even: the rest is everything the peer sends, then it
// closes (a stranger, or garbage). Odd: the harness plays a genuine client
// (client_handshake, with the cluster's token) whose job, generation and
// messages the input edits: each of the hello, the response and the
// join_request's frame is sent as it is, with one byte changed, cut short
// (then the connection closes) or replaced by bytes of the input.
//
// Guarantees checked:
//   - advance() ends every connection with a join_request or one of the
//     errors pending_join.hpp names (handshake_refused, connection_closed,
//     frame_too_large, bad_control_message); nothing else escapes, nothing
//     crashes, and it never waits for bytes once the peer has closed;
//   - a server never answers a hello of another job or generation with a
//     challenge, never accepts a response other than the genuine one, and
//     a request it returns is the one the client sent, from the rank the
//     client proved.

#include "fuzz_messages.hpp"

#include "node/pending_join.hpp"

#include <exception>
#include <optional>

using namespace lockstep;
using namespace lockstep::detail;

namespace {

/// Where a connection stands after advance().
struct outcome {
  bool failed = false;
  std::optional<join_request> request;
};

outcome drive(pending_join& join) {
  try {
    return {false, join.advance()};
  } catch (const handshake_refused&) {
  } catch (const connection_closed&) {
  } catch (const frame_too_large&) {
  } catch (const bad_control_message&) {
  } catch (const std::exception& e) {
    fuzz::broken(std::string("pending_join threw an error it does not name: ") + e.what());
  }
  return {true, std::nullopt};
}

/// Everything the server has written so far (it writes before it reads on).
bytes written_by_server(tcp_socket& client_end) {
  bytes out;
  std::uint8_t chunk[512];
  for (;;) {
    const auto n = ::recv(client_end.native_handle(), chunk, sizeof chunk, MSG_DONTWAIT);
    if (n <= 0)
      return out;
    out.insert(out.end(), chunk, chunk + n);
  }
}

void send_bytes(tcp_socket& socket, const bytes& data, bool then_close) {
  if (then_close) {
    fuzz::send_then_close(socket, data);
    return;
  }
  write_all(socket, {data}, fuzz::hang_deadline());
}

void stranger(pending_join& join, tcp_socket& client_end, std::span<const std::uint8_t> data) {
  fuzz::send_then_close(client_end, data);
  const auto end = drive(join);
  if (!end.failed)
    fuzz::broken(end.request ? "a stranger's bytes joined without the token"
                             : "the server waits for bytes after the peer closed");
}

void genuine_client(pending_join& join, tcp_socket& client_end, fuzz::input_reader& in) {
  const auto identity_choice = in.byte();
  handshake_identity identity{fuzz::job_id, fuzz::generation, 1};
  if (identity_choice & 1)
    identity.job_id = "another-job";
  if (identity_choice & 2)
    identity.generation = fuzz::generation + 1;
  const bool same_cluster = (identity_choice & 3) == 0;
  client_handshake client{fuzz::cluster_token(), identity};

  // The hello.
  const auto hello = client.hello();
  bool closes = false;
  const auto sent_hello = fuzz::edit::read(in).apply(hello, closes);
  send_bytes(client_end, sent_hello, closes);
  if (drive(join).failed) {
    if (sent_hello == hello && same_cluster && !closes)
      fuzz::broken("the server refused a genuine hello");
    return;
  }
  const auto challenge = written_by_server(client_end);
  if (challenge.empty()) {
    if (sent_hello == hello && same_cluster)
      fuzz::broken("the server neither answered a genuine hello nor refused it");
    fuzz::send_then_close(client_end, {});
    if (!drive(join).failed)
      fuzz::broken("the server waits for bytes after the peer closed");
    return;
  }
  if (!same_cluster && sent_hello == hello)
    fuzz::broken("the server challenged a hello of another job or generation");

  // The response: the client checks the server's proof first, and hangs up
  // when it does not verify (the hello it sent was not the one it made).
  bytes response;
  try {
    response = client.respond(challenge);
  } catch (const handshake_refused&) {
    if (sent_hello == hello)
      fuzz::broken("the client refused the challenge to its own hello");
    fuzz::send_then_close(client_end, {});
    if (!drive(join).failed)
      fuzz::broken("the server went on after the client hung up");
    return;
  }
  const auto sent_response = fuzz::edit::read(in).apply(response, closes);
  send_bytes(client_end, sent_response, closes);
  const auto after_response = drive(join);
  if (after_response.failed) {
    if (sent_response == response && !closes)
      fuzz::broken("the server refused the client's genuine proof");
    return;
  }
  const auto acceptance = written_by_server(client_end);
  if (!acceptance.empty() && sent_response.size() >= response_size
      && !std::equal(response.begin(), response.end(), sent_response.begin()))
    fuzz::broken("the server accepted a response that was not the client's proof");
  if (acceptance.empty()) {
    fuzz::send_then_close(client_end, {});
    if (!drive(join).failed)
      fuzz::broken("the server waits for bytes after the peer closed");
    return;
  }
  try {
    client.finish(acceptance);
  } catch (const handshake_refused&) {
    fuzz::broken("the server's acceptance of a genuine response does not verify");
  }

  // The join_request's frame, then the client closes.
  auto request = fuzz::sample_join_request();
  request.rank = identity.rank;
  const auto genuine_frame = fuzz::frame_bytes(request);
  const auto frame_edit = fuzz::edit::read(in);
  const auto rest = in.rest();
  const auto sent_frame = frame_edit.what == fuzz::edit::op::replace
                            ? bytes(rest.begin(), rest.end())
                            : frame_edit.apply(genuine_frame, closes);
  fuzz::send_then_close(client_end, sent_frame);
  const auto end = drive(join);
  if (!end.failed && !end.request)
    fuzz::broken("the server waits for bytes after the peer closed");
  if (end.request) {
    if (join.rank() != identity.rank)
      fuzz::broken("the server reports another rank than the client proved");
    if (sent_frame == genuine_frame && !(*end.request == request))
      fuzz::broken("the server returned another join_request than the client sent");
  } else if (sent_frame == genuine_frame) {
    fuzz::broken("the server refused a genuine join_request");
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input_reader in({data, size});
  boost::asio::io_context context;
  auto [server_end, client_end] = fuzz::connected_pair(context);
  pending_join join(std::move(server_end), "the fuzzer", fuzz::cluster_token(),
                    {fuzz::job_id, fuzz::generation, 0}, fuzz::hang_deadline());
  if (in.byte() % 2 == 0)
    stranger(join, client_end, in.rest());
  else
    genuine_client(join, client_end, in);
  return 0;
}

std::vector<std::vector<std::uint8_t>> lockstep_fuzz_seeds() {
  // A genuine client that joins: mode 1, same cluster, every edit `keep`.
  const fuzz::bytes keep{0, 0, 0, 0};
  fuzz::bytes joins{1, 0};
  for (int i = 0; i < 3; ++i)
    joins.insert(joins.end(), keep.begin(), keep.end());
  // The same client with another join_request frame, from the input.
  fuzz::bytes own_frame{1, 0};
  own_frame.insert(own_frame.end(), keep.begin(), keep.end());
  own_frame.insert(own_frame.end(), keep.begin(), keep.end());
  own_frame.insert(own_frame.end(), {3, 0, 0, 0, 0});
  auto request = fuzz::sample_join_request();
  request.rank = 1;
  const auto frame = fuzz::frame_bytes(request);
  own_frame.insert(own_frame.end(), frame.begin(), frame.end());
  // A stranger: a hello of this cluster's job and generation, from a client
  // whose token is not known, then its frame.
  client_handshake stranger_client{fuzz::bytes(32, 0x11), {fuzz::job_id, fuzz::generation, 2}};
  fuzz::bytes stranger{0};
  const auto hello = stranger_client.hello();
  stranger.insert(stranger.end(), hello.begin(), hello.end());
  stranger.insert(stranger.end(), 32, 0x22);
  stranger.insert(stranger.end(), frame.begin(), frame.end());
  return {joins, own_frame, stranger, {1, 3, 0, 0, 0, 0}, {1, 0, 2, 20, 0, 0, 0}};
}
