#include "cluster_resolver/cluster_token.hpp"

#include "cluster_resolver/cluster_sources.hpp"
#include "io/file_descriptor.hpp"
#include "io/regular_file.hpp"
#include "runtime/error_text.hpp"
#include "runtime/random_bytes.hpp"

#include "lockstep/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

namespace lockstep::detail {

namespace {

cluster_token checked(cluster_token token, const std::string& where) {
  while (!token.empty() && std::isspace(token.back()))
    token.pop_back();
  if (token.size() < min_token_bytes)
    throw value_error(where + " holds a token of " + std::to_string(token.size())
                      + " bytes; a cluster token needs at least "
                      + std::to_string(min_token_bytes)
                      + " (make one with `openssl rand -hex 32`)");
  return token;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

} // namespace

cluster_token read_token_file(const std::filesystem::path& path) {
  const auto name = "cluster token file " + in_quotes(path);
  const auto not_regular = [&](const struct stat& status) {
    return value_error(name + " is " + describe_file_type(status.st_mode) + ", not a regular file");
  };
  // Symbolic links are followed: a Kubernetes Secret volume gives token ->
  // ..data/token -> ..2026_.../token. What keeps the token secret is the
  // file actually read, so the type, mode and owner checks apply to the
  // opened file (fstat), not to the path: neither a link nor a swap between
  // a check and the open can show them one file and hand the read another.
  // A device is refused by its type before it is opened (opening one can
  // have effects); O_NONBLOCK makes a FIFO open at once, to be refused,
  // instead of waiting for a writer (it does not change a regular file's
  // reads).
  struct stat status{};
  if (::stat(path.c_str(), &status) == 0 && !S_ISREG(status.st_mode))
    throw not_regular(status);
  const file_descriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)};
  if (file.get() < 0)
    throw value_error(name + " cannot be opened: " + std::strerror(errno));
  if (::fstat(file.get(), &status) != 0)
    throw value_error(name + " cannot be examined: " + std::strerror(errno));
  if (!S_ISREG(status.st_mode))
    throw not_regular(status);
  if ((status.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(status.st_mode & 07777));
    throw value_error(name + " may be read or written by others (mode " + mode
                      + "): chmod 600 " + path.string());
  }
  if (status.st_uid != ::geteuid())
    throw value_error(name + " belongs to another user (uid " + std::to_string(status.st_uid)
                      + ")");
  cluster_token token(4096);
  const auto got = ::read(file.get(), token.data(), token.size());
  if (got < 0)
    throw value_error(name + " cannot be read: " + std::strerror(errno));
  token.resize(static_cast<std::size_t>(got));
  return checked(std::move(token), name);
}

std::optional<cluster_token> load_cluster_token(const cluster_resolver::environment& variables) {
  if (const auto path = variable(variables, "LOCKSTEP_CLUSTER_TOKEN_FILE"))
    return read_token_file(std::filesystem::path(*path));
  if (const auto text = variable(variables, "LOCKSTEP_CLUSTER_TOKEN"))
    return checked(cluster_token(text->begin(), text->end()), "LOCKSTEP_CLUSTER_TOKEN");
  return std::nullopt;
}

cluster_token generate_cluster_token() {
  static constexpr char digits[] = "0123456789abcdef";
  cluster_token token;
  for (const auto byte : random_bytes(32)) {
    token.push_back(static_cast<std::uint8_t>(digits[byte >> 4]));
    token.push_back(static_cast<std::uint8_t>(digits[byte & 15]));
  }
  return token;
}

bool spans_hosts(const cluster_spec& spec) {
  if (spec.peers.empty())
    return spec.local_world_size < spec.world_size;
  std::set<std::string> hosts;
  for (const auto& peer : spec.peers)
    hosts.insert(is_loopback(peer.host) ? std::string("localhost") : peer.host);
  return hosts.size() > 1;
}

void require_token(const cluster_spec& spec, const std::optional<cluster_token>& token) {
  if (!token && spans_hosts(spec))
    throw value_error("cluster from " + spec.source + " spans several hosts but has no cluster "
                      "token: set LOCKSTEP_CLUSTER_TOKEN_FILE to a file only you may read "
                      "(or LOCKSTEP_CLUSTER_TOKEN), the same on every worker");
}

} // namespace lockstep::detail
