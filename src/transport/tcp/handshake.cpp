#include "transport/tcp/handshake.hpp"

#include "runtime/little_endian.hpp"

#include "cluster_resolver/cluster_token.hpp"
#include "runtime/random_bytes.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace lockstep::detail {

namespace {

constexpr std::array<std::uint8_t, 4> magic{'L', 'K', 'S', 'T'};

std::span<const std::uint8_t> text(std::string_view label) {
  return {reinterpret_cast<const std::uint8_t*>(label.data()), label.size()};
}

bool same(const digest& expected, std::span<const std::uint8_t> received) {
  return received.size() == expected.size()
         && CRYPTO_memcmp(expected.data(), received.data(), expected.size()) == 0;
}

bytes checked_token(std::span<const std::uint8_t> token) {
  if (token.size() < min_token_bytes)
    throw std::invalid_argument("a cluster token needs at least "
                                + std::to_string(min_token_bytes) + " bytes");
  return {token.begin(), token.end()};
}

digest session_key(std::span<const std::uint8_t> token, const handshake_nonce& client,
                   const handshake_nonce& server) {
  return hmac_sha256(token, {text("session"), client, server});
}

} // namespace

const char* to_string(connection_purpose purpose) noexcept {
  switch (purpose) {
    case connection_purpose::control:
      return "control";
    case connection_purpose::ring:
      return "ring";
    case connection_purpose::mesh:
      return "mesh";
  }
  return "unknown";
}

digest hmac_sha256(std::span<const std::uint8_t> key,
                   std::initializer_list<std::span<const std::uint8_t>> parts) {
  bytes message;
  for (const auto part : parts)
    message.insert(message.end(), part.begin(), part.end());
  digest out{};
  unsigned length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), message.data(),
           message.size(), out.data(), &length)
          == nullptr
      || length != out.size())
    throw std::runtime_error("HMAC-SHA256 failed in OpenSSL");
  return out;
}

// -- client -------------------------------------------------------------------

client_handshake::client_handshake(std::span<const std::uint8_t> token,
                                   handshake_identity self)
  : token_(checked_token(token)), self_(std::move(self)) {
  if (self_.job_id.empty() || self_.job_id.size() > max_job_id)
    throw std::invalid_argument("a job id has 1 to " + std::to_string(max_job_id) + " bytes");
}

bytes client_handshake::hello() {
  const auto fresh = random_bytes(nonce_.size());
  std::copy(fresh.begin(), fresh.end(), nonce_.begin());
  bytes out(magic.begin(), magic.end());
  append_le(out, handshake_protocol);
  append_le(out, self_.generation);
  append_le(out, self_.rank);
  out.insert(out.end(), nonce_.begin(), nonce_.end());
  out.push_back(static_cast<std::uint8_t>(self_.purpose));
  out.push_back(static_cast<std::uint8_t>(self_.job_id.size()));
  out.insert(out.end(), self_.job_id.begin(), self_.job_id.end());
  transcript_ = out;
  return out;
}

bytes client_handshake::respond(std::span<const std::uint8_t> challenge) {
  if (challenge.size() != challenge_size)
    throw handshake_refused("a challenge of " + std::to_string(challenge.size()) + " bytes");
  transcript_.insert(transcript_.end(), challenge.begin(), challenge.begin() + 4 + 32);
  if (!same(hmac_sha256(token_, {text("S"), transcript_}), challenge.subspan(4 + 32)))
    throw handshake_refused("the server's proof of the token does not verify");
  handshake_nonce server_nonce{};
  std::copy_n(challenge.begin() + 4, server_nonce.size(), server_nonce.begin());
  peer_ = {load_le<std::uint32_t>(challenge, 0), session_key(token_, nonce_, server_nonce)};
  const auto mac = hmac_sha256(token_, {text("C"), transcript_});
  return {mac.begin(), mac.end()};
}

authenticated_peer client_handshake::finish(std::span<const std::uint8_t> acceptance) {
  if (!same(hmac_sha256(token_, {text("A"), transcript_}), acceptance))
    throw handshake_refused("the server's acceptance does not verify");
  return peer_;
}

// -- server -------------------------------------------------------------------

server_handshake::server_handshake(std::span<const std::uint8_t> token,
                                   handshake_identity self)
  : token_(checked_token(token)), self_(std::move(self)) {}

std::size_t server_handshake::job_id_length(std::span<const std::uint8_t> head) const {
  if (head.size() != hello_head_size
      || !std::equal(magic.begin(), magic.end(), head.begin()))
    throw handshake_refused("the first bytes are no lockstep hello");
  if (const auto protocol = load_le<std::uint16_t>(head, 4); protocol != handshake_protocol)
    throw handshake_refused("protocol " + std::to_string(protocol) + ", this node speaks "
                            + std::to_string(handshake_protocol));
  const std::size_t length = head[hello_head_size - 1];
  if (length == 0)
    throw handshake_refused("an empty job id");
  return length;
}

bytes server_handshake::challenge(std::span<const std::uint8_t> head,
                                  std::span<const std::uint8_t> job_id) {
  if (job_id.size() != job_id_length(head))
    throw handshake_refused("a job id of the wrong length");
  const std::string_view job(reinterpret_cast<const char*>(job_id.data()), job_id.size());
  if (job != self_.job_id)
    throw handshake_refused("job id '" + std::string(job) + "', this cluster's is '" + self_.job_id
                            + "' (a process of another job)");
  if (const auto generation = load_le<std::uint64_t>(head, 6); generation != self_.generation)
    throw handshake_refused("generation " + std::to_string(generation) + ", this cluster is at "
                            + std::to_string(self_.generation)
                            + " (a worker of an earlier or later start of the job)");
  if (const auto purpose = head[hello_head_size - 2];
      purpose != static_cast<std::uint8_t>(self_.purpose)) {
    const auto named = purpose <= static_cast<std::uint8_t>(connection_purpose::mesh)
                         ? std::string("a hello for a ")
                             + to_string(static_cast<connection_purpose>(purpose)) + " connection"
                         : "a hello of unknown purpose " + std::to_string(purpose);
    throw handshake_refused(named + " where this side awaits a " + to_string(self_.purpose)
                            + " connection");
  }
  peer_.rank = load_le<std::uint32_t>(head, 14);
  std::copy_n(head.begin() + 18, client_nonce_.size(), client_nonce_.begin());
  const auto fresh = random_bytes(nonce_.size());
  std::copy(fresh.begin(), fresh.end(), nonce_.begin());
  transcript_.assign(head.begin(), head.end());
  transcript_.insert(transcript_.end(), job_id.begin(), job_id.end());
  bytes out;
  append_le(out, self_.rank);
  out.insert(out.end(), nonce_.begin(), nonce_.end());
  transcript_.insert(transcript_.end(), out.begin(), out.end());
  const auto mac = hmac_sha256(token_, {text("S"), transcript_});
  out.insert(out.end(), mac.begin(), mac.end());
  return out;
}

bytes server_handshake::accept(std::span<const std::uint8_t> response) {
  if (transcript_.empty())
    throw handshake_refused("a response before the challenge");
  if (!same(hmac_sha256(token_, {text("C"), transcript_}), response))
    throw handshake_refused("the client's proof of the token does not verify (another cluster "
                            "token)");
  peer_.session_key = session_key(token_, client_nonce_, nonce_);
  const auto mac = hmac_sha256(token_, {text("A"), transcript_});
  return {mac.begin(), mac.end()};
}

} // namespace lockstep::detail
