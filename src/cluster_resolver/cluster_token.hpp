#pragma once

// The cluster token: the secret every worker of a job shares, which the
// handshake (transport/tcp/handshake.hpp) proves. It comes from a file
// readable by its owner only (LOCKSTEP_CLUSTER_TOKEN_FILE) or from
// LOCKSTEP_CLUSTER_TOKEN; lockstep-run makes a fresh one per job. Prefer the
// file: a variable shows in /proc/<pid>/environ to the same user and in
// a pod spec to anyone who may read it.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "lockstep/cluster_resolver.hpp"

namespace lockstep::detail {

/// The least token length accepted, in bytes.
inline constexpr std::size_t min_token_bytes = 16;

using cluster_token = std::vector<std::uint8_t>;

/// The token of `variables`: the file LOCKSTEP_CLUSTER_TOKEN_FILE names, else
/// LOCKSTEP_CLUSTER_TOKEN, else nothing. The file's path may be a symbolic
/// link (a Kubernetes Secret volume's is); the checks apply to the file
/// read. value_error (naming the variable or file) for a file others may
/// read or write, one not owned by this user, one that is not a regular
/// file (refused without blocking on a FIFO), one that cannot be read, or
/// a token shorter than 16 bytes (trailing whitespace, such as a file's
/// newline, is not part of it).
std::optional<cluster_token> load_cluster_token(const cluster_resolver::environment& variables);

/// The token in `path`, checked as load_cluster_token says.
cluster_token read_token_file(const std::filesystem::path& path);

/// A fresh token: 32 random bytes as 64 hex digits (so it fits a variable).
cluster_token generate_cluster_token();

/// True when `spec` spans more than one host: its listed peers name two
/// hosts (the loopback names count as one), or, with no list, fewer
/// workers run on this host than in the world.
bool spans_hosts(const cluster_spec& spec);

/// value_error unless `token` is set or `spec` stays on one host: a
/// cluster across hosts without a token would let anyone who reaches its
/// ports join.
void require_token(const cluster_spec& spec, const std::optional<cluster_token>& token);

} // namespace lockstep::detail
