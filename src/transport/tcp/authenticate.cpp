#include "transport/tcp/authenticate.hpp"

#include "lockstep/error.hpp"

namespace lockstep::detail {

void rethrow_as_client_error(const std::string& server_address) {
  try {
    throw;
  } catch (const connection_closed&) {
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
  try {
    const auto hello = handshake.hello();
    write_all(socket, {hello}, deadline);
    bytes challenge(challenge_size);
    read_exact(socket, challenge, deadline);
    const auto response = handshake.respond(challenge);
    write_all(socket, {response}, deadline);
    bytes acceptance(acceptance_size);
    read_exact(socket, acceptance, deadline);
    return handshake.finish(acceptance);
  } catch (...) {
    rethrow_as_client_error(server_address);
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
