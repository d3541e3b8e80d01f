#pragma once

// Mutual authentication of a connection between two workers of one cluster
// (reference/network.md §4): a challenge-response with HMAC-SHA256 over the
// cluster's shared token, which binds the job id and the membership
// generation. Transport-neutral: these classes turn received bytes into
// the bytes to send, and a driver (authenticate.hpp) moves them over a
// socket with a deadline.
//
//   C -> S  hello      "LKST", protocol, generation, client rank, nonce_c,
//                      purpose, job id
//   S -> C  challenge  server rank, nonce_s, mac_s = HMAC(K, "S" || T)
//   C -> S  response   mac_c = HMAC(K, "C" || T)
//   S -> C  acceptance mac_a = HMAC(K, "A" || T)
//
// T is the hello followed by the server's rank and nonce. The purpose says
// what the connection will carry (control messages, the ring, the mesh):
// a server refuses a hello for another purpose than its own, so that a
// worker that dials a peer's listener for the mesh while the peer still
// awaits its ring connection there is not taken for its ring neighbour. Fresh nonces on
// both sides defeat replay (a recorded response proves nothing about a new
// nonce_s), the role labels defeat reflection (a server's MAC is no
// client's), and the job id and generation in T keep out other jobs and
// stale members. Both sides then share a session key HMAC(K, "session" ||
// nonce_c || nonce_s). A server that refuses closes the connection without
// saying why (the reason goes to its log); a client learns "refused" from
// the close and "failed" from a server MAC that does not verify.
//
// This keeps foreign processes out; it does not protect the stream from
// an attacker on the path (that needs TLS).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace lockstep::detail {

using digest = std::array<std::uint8_t, 32>;
using handshake_nonce = std::array<std::uint8_t, 32>;
using bytes = std::vector<std::uint8_t>;

/// What a connection between workers carries, which its hello names.
enum class connection_purpose : std::uint8_t {
  control = 0, // the rendezvous and the control links (node/)
  ring = 1,    // a ring of data connections (ring_links.hpp)
  mesh = 2,    // a mesh of data connections (mesh_links.hpp)
};

/// "control", "ring" or "mesh" (for messages).
const char* to_string(connection_purpose purpose) noexcept;

/// Who one side of a connection is, and what the connection is for.
struct handshake_identity {
  std::string job_id; // 1 to max_job_id bytes
  std::uint64_t generation = 0;
  std::uint32_t rank = 0;
  connection_purpose purpose = connection_purpose::control;
};

/// What each side knows once the other has proven the token.
struct authenticated_peer {
  std::uint32_t rank = 0; // the other side's
  digest session_key{};
};

/// Why a handshake stopped: the peer's bytes were not a hello, named
/// another job or generation, or proved no knowledge of the token. For the
/// log of the side that refuses; a client turns it into an
/// authentication_error naming the server's address.
class handshake_refused : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

inline constexpr std::uint16_t handshake_protocol = 2; // 2: the hello names its purpose
inline constexpr std::size_t max_job_id = 255;

/// The hello's fixed part: magic 4, protocol 2, generation 8, rank 4,
/// nonce 32, purpose 1, job id length 1; the job id follows.
inline constexpr std::size_t hello_head_size = 4 + 2 + 8 + 4 + 32 + 1 + 1;
inline constexpr std::size_t challenge_size = 4 + 32 + 32;
inline constexpr std::size_t response_size = 32;
inline constexpr std::size_t acceptance_size = 32;

/// HMAC-SHA256 of the concatenation of `parts` under `key`.
digest hmac_sha256(std::span<const std::uint8_t> key,
                   std::initializer_list<std::span<const std::uint8_t>> parts);


/// The client's side: hello(), then respond(challenge), then
/// finish(acceptance). Each throws handshake_refused when the server's
/// bytes do not verify.
class client_handshake {
public:
  client_handshake(std::span<const std::uint8_t> token, handshake_identity self);

  /// The hello, with a fresh nonce.
  bytes hello();

  /// Checks the server's MAC and returns the response.
  bytes respond(std::span<const std::uint8_t> challenge);

  /// Checks the acceptance: the server verified our response.
  authenticated_peer finish(std::span<const std::uint8_t> acceptance);

private:
  bytes token_;
  handshake_identity self_;
  handshake_nonce nonce_{};
  bytes transcript_; // T
  authenticated_peer peer_;
};

/// The server's side: job_id_length(head) says how many more bytes the
/// hello has; challenge(head, job_id) checks the hello and returns the
/// challenge (refusing a hello of another job, generation or purpose);
/// accept(response) checks the client's MAC and returns the acceptance.
/// Each throws handshake_refused with the reason.
class server_handshake {
public:
  server_handshake(std::span<const std::uint8_t> token, handshake_identity self);

  /// The length of the job id that follows the hello's fixed part.
  std::size_t job_id_length(std::span<const std::uint8_t> head) const;

  bytes challenge(std::span<const std::uint8_t> head, std::span<const std::uint8_t> job_id);

  bytes accept(std::span<const std::uint8_t> response);

  /// The client: the rank it claims once challenge() returned, proven
  /// (with the session key) once accept() returned.
  const authenticated_peer& peer() const noexcept { return peer_; }

private:
  bytes token_;
  handshake_identity self_;
  handshake_nonce client_nonce_{};
  handshake_nonce nonce_{};
  bytes transcript_;
  authenticated_peer peer_;
};

} // namespace lockstep::detail
