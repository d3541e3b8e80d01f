#pragma once

// The handshake of handshake.hpp, run over a connected TCP socket with a
// deadline (network.md §4: 5 s). Every connection between workers, control
// or data, passes it before any of its bytes reach anything else.

#include <span>
#include <string>

#include "transport/tcp/handshake.hpp"
#include "transport/tcp/socket_io.hpp"

#include "lockstep/error.hpp"

namespace lockstep::detail {

/// How long a handshake may take, by default.
inline constexpr std::chrono::seconds handshake_timeout{5};

/// The server closed the connection before the first byte of its
/// challenge: it refused this
/// client (another job or generation), or what the client reached was not
/// the server but something in front of it (a proxy, a load balancer, a
/// Kubernetes service) that accepts and then closes while the server does
/// not listen yet. An authentication_error ("was refused"), which a joining
/// worker tries again until its join deadline.
class handshake_closed : public authentication_error {
public:
  using authentication_error::authentication_error;
};

/// Proves the token to the server at `server_address` (for messages) and
/// checks its proof. Throws lockstep::authentication_error naming the
/// address when the server's proof is wrong ("failed"), handshake_closed
/// when it closes the connection ("refused"), and lockstep::timeout_error
/// at the deadline.
authenticated_peer authenticate_client(tcp_socket& socket, std::span<const std::uint8_t> token,
                                       const handshake_identity& self,
                                       const std::string& server_address,
                                       io_clock::time_point deadline);

/// Inside a catch block of a client's handshake with `server_address`:
/// rethrows what authenticate_client throws for that failure (a closed
/// connection is a refusal: handshake_closed unless the server had sent a
/// byte (`heard`); a wrong proof a failure; a timeout names the server),
/// and anything else unchanged. For a client's handshake run in steps
/// (connect_ring).
[[noreturn]] void rethrow_as_client_error(const std::string& server_address, bool heard = false);

/// Checks a client's proof and proves the token to it. Throws
/// handshake_refused (the reason, for the log), connection_closed or
/// lockstep::timeout_error; the caller then closes the socket, which is
/// all the client learns.
authenticated_peer authenticate_server(tcp_socket& socket, std::span<const std::uint8_t> token,
                                       const handshake_identity& self,
                                       io_clock::time_point deadline);

} // namespace lockstep::detail
