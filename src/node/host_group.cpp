#include "node/host_group.hpp"

#include "communicators/shm_communicator.hpp"

#include "runtime/fault_injection.hpp"
#include "runtime/log.hpp"
#include "runtime/random_bytes.hpp"
#include "transport/shm/shared_segment.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>

namespace lockstep::detail {

namespace {

constexpr std::size_t probe_bytes = 4096;
constexpr std::size_t nonce_bytes = 16;
constexpr std::size_t name_bytes = 64; // a segment's name, zero-padded
/// A worker's entry in the first exchange: wants TCP, its probe's name and nonce.
constexpr std::size_t entry_bytes = 8 + name_bytes + nonce_bytes;

collective_options options_of(std::chrono::milliseconds timeout, const char* tag) {
  collective_options options;
  options.timeout = timeout;
  options.tag = tag;
  return options;
}

/// `bytes` bytes as a tensor the ring can carry (int64 elements).
tensor carrier(std::size_t bytes) {
  return tensor::zeros(dtype::i64, {static_cast<std::int64_t>((bytes + 7) / 8)});
}

std::byte* bytes_of(tensor& t) {
  return static_cast<std::byte*>(t.raw_data());
}

/// The names of the group's objects that this worker learned: it removes
/// them all when the probe ends, however it ends, so that an object whose
/// creator died after it published the name is not left behind (a name
/// removed twice is no error).
struct learned_names {
  std::vector<std::string> names;
  ~learned_names() {
    for (const auto& name : names)
      remove_segment_name(name);
  }
};

/// The name held in `at` (name_bytes, zero-padded).
std::string name_at(const std::byte* at) {
  const auto* text = reinterpret_cast<const char*>(at);
  return {text, std::find(text, text + name_bytes, '\0')};
}

} // namespace

std::string segment_prefix(const std::string& job_id) {
  std::string out;
  for (const char c : job_id)
    if (out.size() < 16 && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'))
      out += c;
  return out + "-";
}

namespace {

/// The hosts that `table` (world × world: whether worker r opened worker
/// s's probe, r == s: whether r made one) shows, each in rank order; empty
/// when sharing is not a partition (r shares with s and s with t, but r
/// not with t), which no host layout explains.
std::vector<std::vector<std::size_t>> hosts_of(const tensor& table, std::size_t world) {
  const auto reach = table.data<std::int64_t>();
  const auto shares = [&](std::size_t r, std::size_t s) {
    return reach[r * world + s] != 0 && reach[s * world + r] != 0;
  };
  std::vector<std::vector<std::size_t>> members(world);
  for (std::size_t r = 0; r < world; ++r)
    for (std::size_t s = 0; s < world; ++s)
      if (r == s || shares(r, s))
        members[r].push_back(s);
  std::vector<std::vector<std::size_t>> hosts;
  for (std::size_t r = 0; r < world; ++r) {
    for (const auto s : members[r])
      if (members[s] != members[r])
        return {};
    if (members[r].front() == r)
      hosts.push_back(members[r]);
  }
  return hosts;
}

std::string hosts_text(const std::vector<std::vector<std::size_t>>& hosts) {
  std::string text;
  for (const auto& host : hosts) {
    text += text.empty() ? "" : " | ";
    for (std::size_t i = 0; i < host.size(); ++i)
      text += (i == 0 ? "" : ", ") + std::to_string(host[i]);
  }
  return text;
}

} // namespace

host_plan join_host_group(tcp_ring_communicator& ring, std::size_t rank, std::size_t world,
                          const std::string& job_id, bool wants_tcp,
                          std::chrono::milliseconds timeout) {
  if (world > host_shm_communicator::max_ranks) // every worker knows: none probes
    return {};
  const faults_paused not_the_programs; // LOCKSTEP_FAULT counts the program's collectives
  // 1. This worker's probe: a nonce in an object of its own. No /dev/shm
  // (or a full one) is a probe nobody can open.
  const auto nonce = random_bytes(nonce_bytes);
  std::optional<shared_segment> probe;
  try {
    probe = shared_segment::create(new_segment_name(segment_prefix(job_id) + "probe"), probe_bytes);
    std::memcpy(probe->data(), nonce.data(), nonce_bytes);
  } catch (const lockstep::error& e) {
    LOCKSTEP_LOG_INFO("shared memory: no probe ({}); the ring carries the collectives", e.what());
  }
  auto mine = carrier(entry_bytes);
  auto* entry = bytes_of(mine);
  entry[0] = std::byte{wants_tcp};
  if (probe)
    std::memcpy(entry + 8, probe->name().data(), std::min(probe->name().size(), name_bytes - 1));
  std::memcpy(entry + 8 + name_bytes, nonce.data(), nonce_bytes);
  auto entries = carrier(entry_bytes * world);
  learned_names learned;
  ring.all_gather(rank, mine, entries, options_of(timeout, "shared memory probe"));

  // 2. Which probes this worker can open, and read its nonce from.
  const auto entry_size = static_cast<std::size_t>(mine.byte_size());
  bool tcp = false;
  auto reach = tensor::zeros(dtype::i64, {static_cast<std::int64_t>(world)});
  for (std::size_t r = 0; r < world; ++r) {
    const auto* theirs = bytes_of(entries) + r * entry_size;
    tcp = tcp || theirs[0] != std::byte{0};
    const auto name = name_at(theirs + 8);
    if (!name.empty())
      learned.names.push_back(name);
    const auto opened = r == rank || name.empty() ? std::nullopt
                                                  : shared_segment::open(name, probe_bytes);
    reach.data<std::int64_t>()[r]
      = r == rank ? probe.has_value()
                  : opened && std::memcmp(opened->data(), theirs + 8 + name_bytes, nonce_bytes) == 0;
  }
  auto table = tensor::zeros(dtype::i64, {static_cast<std::int64_t>(world * world)});
  ring.all_gather(rank, reach, table, options_of(timeout, "shared memory reach"));
  probe.reset(); // every worker has opened it, or could not
  auto hosts = hosts_of(table, world);
  const auto alone = [](const auto& host) { return host.size() == 1; };
  if (tcp || hosts.empty() || std::all_of(hosts.begin(), hosts.end(), alone)) {
    LOCKSTEP_LOG_INFO("shared memory: {}; the ring carries the collectives",
                      tcp            ? "a worker asks for TCP (LOCKSTEP_TRANSPORT=tcp)"
                      : hosts.empty() ? "which workers share memory is no partition into hosts"
                                      : "no two workers share memory");
    return {};
  }
  host_plan plan;
  plan.hosts.groups = hosts;
  for (std::size_t h = 0; h < hosts.size(); ++h)
    if (std::find(hosts[h].begin(), hosts[h].end(), rank) != hosts[h].end())
      plan.host = h;
  const auto& members = hosts[plan.host];
  const auto local_rank = static_cast<std::size_t>(
    std::find(members.begin(), members.end(), rank) - members.begin());

  // 3. Each host's segment, made by its leader and mapped by its workers,
  // then its name removed. A worker alone on its host needs none.
  const auto slot = host_shm_communicator::default_slot_bytes;
  const auto bytes = host_shm_communicator::segment_bytes(members.size(), slot);
  std::optional<shared_segment> segment;
  auto name = carrier(name_bytes);
  if (local_rank == 0 && members.size() > 1) {
    try {
      segment = shared_segment::create(new_segment_name(segment_prefix(job_id) + "group"), bytes);
      host_shm_communicator::initialize(*segment, members.size(), slot);
      std::memcpy(bytes_of(name), segment->name().data(),
                  std::min(segment->name().size(), name_bytes - 1));
    } catch (const lockstep::error& e) {
      LOCKSTEP_LOG_INFO("shared memory: no segment ({})", e.what());
    }
  }
  auto names = carrier(name_bytes * world);
  ring.all_gather(rank, name, names, options_of(timeout, "shared memory segments"));
  const auto name_size = static_cast<std::size_t>(name.byte_size());
  for (std::size_t r = 0; r < world; ++r)
    if (const auto text = name_at(bytes_of(names) + r * name_size); !text.empty()) {
      learned.names.push_back(text);
      if (r == members.front() && local_rank != 0)
        segment = shared_segment::open(text, bytes);
    }
  auto missing = tensor::from(std::vector<std::int64_t>{members.size() > 1 && !segment});
  ring.all_reduce(rank, reduce_op::sum, {&missing, 1}, {&missing, 1},
                  options_of(timeout, "shared memory segment mapped"));
  if (missing.data<std::int64_t>()[0] != 0) {
    LOCKSTEP_LOG_INFO("shared memory: {} worker(s) could not map their host's segment; the ring "
                      "carries the collectives",
                      missing.data<std::int64_t>()[0]);
    return {};
  }
  if (members.size() > 1) {
    segment->unlink();
    plan.shared = std::make_shared<host_shm_communicator>(std::move(*segment), local_rank,
                                                          members.size(), slot, members,
                                                          members.size());
    plan.local = plan.shared;
  } else {
    plan.local = std::make_shared<shm_communicator>(1, "worker " + std::to_string(rank) + " alone");
  }
  if (hosts.size() == 1)
    LOCKSTEP_LOG_INFO("shared memory: the {} workers share this host's memory", world);
  else
    LOCKSTEP_LOG_INFO("shared memory: {} hosts (workers {}): each host's workers reduce through "
                      "its memory, and a ring of one leader per host carries the rest",
                      hosts.size(), hosts_text(hosts));
  return plan;
}

} // namespace lockstep::detail
