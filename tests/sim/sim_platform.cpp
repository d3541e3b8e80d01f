#include "sim_platform.hpp"

#include "lockstep/error.hpp"

#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>

namespace lockstep::detail::sim {

namespace sg4 = simgrid::s4u;

namespace {

/// The hosts' speed: the algorithms' computation is not simulated (it
/// takes no simulated time), so any speed does.
constexpr double host_flops = 1e9;

std::vector<sg4::Host*> build_star(const platform_spec& spec) {
  auto* zone = sg4::create_star_zone("star");
  std::vector<sg4::Host*> hosts;
  hosts.reserve(spec.hosts);
  for (std::size_t r = 0; r < spec.hosts; ++r) {
    auto* host = zone->create_host("host" + std::to_string(r), host_flops);
    auto* wire = zone->create_split_duplex_link("wire" + std::to_string(r), spec.link_bytes_per_s)
                   ->set_latency(spec.link_latency_s);
    // The star's route from a host is its own link, up towards the router
    // (down towards it for a route into the host).
    zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr,
                    {{wire, sg4::LinkInRoute::Direction::UP}}, true);
    hosts.push_back(host);
  }
  zone->seal();
  return hosts;
}

std::vector<sg4::Host*> build_fat_tree(const platform_spec& spec) {
  const auto k = static_cast<unsigned>(leaf_hosts(spec.hosts));
  const auto leaves = static_cast<unsigned>(spec.hosts / k);
  std::vector<sg4::Host*> hosts(spec.hosts);
  const auto place = [&](sg4::NetZone* zone, const std::vector<unsigned long>& /*coord*/,
                         unsigned long id) {
    auto* host = zone->create_host("host" + std::to_string(id), host_flops);
    hosts.at(id) = host;
    return std::pair<simgrid::kernel::routing::NetPoint*, simgrid::kernel::routing::NetPoint*>{
      host->get_netpoint(), nullptr};
  };
  // Level 1: k hosts under each leaf switch, one link up each; level 2:
  // `leaves` leaf switches under each top switch, each leaf with k links
  // up, one to each of the k top switches.
  const sg4::FatTreeParams shape(2, {k, leaves}, {1, k}, {1, 1});
  auto* zone = sg4::create_fatTree_zone("fat_tree", nullptr, shape, sg4::ClusterCallbacks(place),
                                        spec.link_bytes_per_s, spec.link_latency_s,
                                        sg4::Link::SharingPolicy::SPLITDUPLEX);
  zone->seal();
  return hosts;
}

} // namespace

std::string to_string(topology shape) { return shape == topology::star ? "star" : "fat_tree"; }

link_costs costs_of(const platform_spec& spec) {
  const double links = spec.shape == topology::star || leaf_hosts(spec.hosts) == spec.hosts ? 2 : 4;
  return {links * spec.link_latency_s, spec.link_bytes_per_s};
}

std::size_t leaf_hosts(std::size_t hosts) {
  std::size_t best = 1;
  for (std::size_t d = 1; d * d <= hosts; ++d)
    if (hosts % d == 0)
      best = d;
  return best == 1 ? hosts : best;
}

std::vector<std::string> engine_settings() {
  return {"network/model:CM02",  "network/latency-factor:1", "network/bandwidth-factor:1",
          "network/weight-S:0",  "network/TCP-gamma:0",      "network/crosstraffic:0",
          "contexts/factory:thread"};
}

std::vector<sg4::Host*> build_platform(const platform_spec& spec) {
  if (spec.hosts < 2)
    throw value_error("a simulated cluster needs at least 2 hosts, not "
                      + std::to_string(spec.hosts));
  if (!(spec.link_bytes_per_s > 0) || !(spec.link_latency_s > 0))
    throw value_error("a simulated link needs a positive bandwidth and latency");
  return spec.shape == topology::star ? build_star(spec) : build_fat_tree(spec);
}

} // namespace lockstep::detail::sim
