#include "transport/tcp/authenticate.hpp"

#include "lockstep/error.hpp"

namespace lockstep::detail {

void rethrow_as_client_error(const std::string& server_address, bool heard) {
  try {
    throw;
  } catch (const connection_closed&) {
    if (heard)
      throw authentication_error("authentication with " + server_address
                                 + " was refused: it closed the connection in the middle of the "
                                   "handshake");
    throw handshake_closed("authentication with " + server_address
                           + " was refused (a different cluster token, job or generation)");
  } catch (const handshake_refused&) {
    throw authentication_error("authentication with " + server_address
                               + " failed: it did not prove the cluster token");
  } catch (const timeout_error&) {
    throw timeout_error("authentication with " + server_address + " did not finish within "
                        "the handshake deadline");
  }
}

authenticated_peer authenticate_client(tcp_socket& socket, std::span<const std::uint8_t> token,
                                       const handshake_identity& self,
                                       const std::string& server_address,
                                       io_clock::time_point deadline) {
  client_handshake handshake{token, self};
  bool heard = false;
  try {
    const auto hello = handshake.hello();
    write_all(socket, {hello}, deadline);
    // The first byte apart: a server that closes before it says anything
    // refused this client, or is a proxy whose server does not listen yet
    // (handshake_closed: worth another try); one that closes after it
    // spoke refused.
    bytes challenge(challenge_size);
    read_exact(socket, std::span(challenge).first(1), deadline);
    heard = true;
    read_exact(socket, std::span(challenge).subspan(1), deadline);
    const auto response = handshake.respond(challenge);
    write_all(socket, {response}, deadline);
    bytes acceptance(acceptance_size);
    read_exact(socket, acceptance, deadline);
    return handshake.finish(acceptance);
  } catch (...) {
    rethrow_as_client_error(server_address, heard);
  }
}

authenticated_peer authenticate_server(tcp_socket& socket, std::span<const std::uint8_t> token,
                                       const handshake_identity& self,
                                       io_clock::time_point deadline) {
  server_handshake handshake{token, self};
  bytes head(hello_head_size);
  read_exact(socket, head, deadline);
  bytes job_id(handshake.job_id_length(head));
  read_exact(socket, job_id, deadline);
  const auto challenge = handshake.challenge(head, job_id);
  write_all(socket, {challenge}, deadline);
  bytes response(response_size);
  read_exact(socket, response, deadline);
  const auto acceptance = handshake.accept(response);
  write_all(socket, {acceptance}, deadline);
  return handshake.peer();
}

} // namespace lockstep::detail
