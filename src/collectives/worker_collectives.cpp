#include "collectives/worker_collectives.hpp"

#include "collectives/binomial_tree.hpp"
#include "collectives/halving_doubling.hpp"
#include "collectives/peer_agreement.hpp"
#include "collectives/recursive_doubling.hpp"
#include "collectives/ring_collectives.hpp"

#include "lockstep/error.hpp"

#include <string>

namespace lockstep::detail {

namespace {

/// The link that `a` runs on: the ring's for the ring, else the mesh.
/// Without a mesh an algorithm other than the ring cannot run: every
/// rank agrees first (the ranks that chose differently are told so by the
/// fingerprint), then throws the same value_error, and the ring stays
/// usable.
link& link_for(algorithm a, const worker_links& links, ring_records& records,
               const collective_fingerprint& mine, const std::exception_ptr& failure,
               link::time_point deadline) {
  if (a == algorithm::ring)
    return links.ring;
  if (links.mesh != nullptr)
    return *links.mesh;
  ring_agree(links.ring, records, mine, failure, deadline);
  throw value_error("algorithm " + std::string{to_string(a)} + " (" + mine.to_string()
                    + ") needs a connection to every worker, and these workers have only "
                      "their ring's");
}

/// The agreement, as `a` agrees: the ring's around the ring, the
/// others' by recursive doubling over the mesh.
void worker_agree(algorithm a, const worker_links& links, ring_records& records,
                  const collective_fingerprint& mine, const std::exception_ptr& failure,
                  link::time_point deadline) {
  if (a == algorithm::ring || links.mesh == nullptr)
    ring_agree(links.ring, records, mine, failure, deadline);
  else
    peer_agree(*links.mesh, records, mine, failure, deadline);
}

} // namespace

void worker_all_reduce(algorithm a, const worker_links& links, ring_records& records,
                       const collective_fingerprint& mine, const std::exception_ptr& failure,
                       reduce_op op, dtype type, std::span<std::uint8_t> data,
                       link::time_point deadline) {
  switch (a) {
    case algorithm::recursive_doubling:
      recursive_doubling_all_reduce(link_for(a, links, records, mine, failure, deadline), records,
                                    mine, failure, op, type, data, deadline);
      return;
    case algorithm::halving_doubling: {
      auto& mesh = link_for(a, links, records, mine, failure, deadline);
      peer_agree(mesh, records, mine, failure, deadline);
      halving_doubling_all_reduce(mesh, op, type, data, deadline);
      return;
    }
    case algorithm::ring:
      ring_all_reduce(links.ring, records, mine, failure, op, type, data, deadline);
      return;
    case algorithm::binomial_tree:
      break;
  }
  throw value_error("algorithm " + std::string{to_string(a)} + " cannot run all_reduce");
}

void worker_all_gather(algorithm a, const worker_links& links, ring_records& records,
                       const collective_fingerprint& mine, const std::exception_ptr& failure,
                       std::span<std::uint8_t> data, link::time_point deadline) {
  if (a != algorithm::ring && a != algorithm::recursive_doubling)
    throw value_error("algorithm " + std::string{to_string(a)} + " cannot run all_gather");
  auto& group = link_for(a, links, records, mine, failure, deadline);
  worker_agree(a, links, records, mine, failure, deadline);
  if (a == algorithm::ring)
    ring_all_gather(group, data, deadline);
  else
    recursive_doubling_all_gather(group, data, deadline);
}

void worker_broadcast(algorithm a, const worker_links& links, ring_records& records,
                      const collective_fingerprint& mine, const std::exception_ptr& failure,
                      std::size_t root, std::span<const std::span<std::uint8_t>> buffers,
                      link::time_point deadline) {
  if (a != algorithm::ring && a != algorithm::binomial_tree)
    throw value_error("algorithm " + std::string{to_string(a)} + " cannot run broadcast");
  auto& group = link_for(a, links, records, mine, failure, deadline);
  worker_agree(a, links, records, mine, failure, deadline);
  for (const auto buffer : buffers)
    if (a == algorithm::ring)
      ring_broadcast(group, root, buffer, deadline);
    else
      binomial_tree_broadcast(group, root, buffer, deadline);
}

} // namespace lockstep::detail
