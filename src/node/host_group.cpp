#include "node/host_group.hpp"

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

std::shared_ptr<host_shm_communicator> join_host_group(tcp_ring_communicator& ring,
                                                       std::size_t rank, std::size_t world,
                                                       const std::string& job_id, bool wants_tcp,
                                                       std::chrono::milliseconds timeout) {
  if (world > host_shm_communicator::max_ranks) // every worker knows: none probes
    return nullptr;
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
  const auto everyone = std::all_of(table.data<std::int64_t>().begin(),
                                    table.data<std::int64_t>().end(),
                                    [](std::int64_t v) { return v != 0; });
  if (tcp || !everyone) {
    LOCKSTEP_LOG_INFO("shared memory: {}; the ring carries the collectives",
                      tcp ? "a worker asks for TCP (LOCKSTEP_TRANSPORT=tcp)"
                          : "not every worker shares memory with every other");
    return nullptr;
  }

  // 3. Rank 0's segment, mapped by every worker, then its name removed.
  const auto slot = host_shm_communicator::default_slot_bytes;
  const auto bytes = host_shm_communicator::segment_bytes(world, slot);
  std::optional<shared_segment> segment;
  auto name = carrier(name_bytes);
  if (rank == 0) {
    try {
      segment = shared_segment::create(new_segment_name(segment_prefix(job_id) + "group"), bytes);
      host_shm_communicator::initialize(*segment, world, slot);
      std::memcpy(bytes_of(name), segment->name().data(),
                  std::min(segment->name().size(), name_bytes - 1));
    } catch (const lockstep::error& e) {
      LOCKSTEP_LOG_INFO("shared memory: no segment ({})", e.what());
    }
  }
  ring.broadcast(rank, 0, {&name, 1}, options_of(timeout, "shared memory segment"));
  if (const auto text = name_at(bytes_of(name)); !text.empty()) {
    learned.names.push_back(text);
    if (rank != 0)
      segment = shared_segment::open(text, bytes);
  }
  auto missing = tensor::from(std::vector<std::int64_t>{segment ? 0 : 1});
  ring.all_reduce(rank, reduce_op::sum, {&missing, 1}, {&missing, 1},
                  options_of(timeout, "shared memory segment mapped"));
  if (missing.data<std::int64_t>()[0] != 0) {
    LOCKSTEP_LOG_INFO("shared memory: {} worker(s) could not map the segment; the ring carries "
                      "the collectives",
                      missing.data<std::int64_t>()[0]);
    return nullptr;
  }
  segment->unlink();
  std::vector<std::size_t> workers(world);
  for (std::size_t r = 0; r < world; ++r)
    workers[r] = r;
  LOCKSTEP_LOG_INFO("shared memory: the {} workers share this host's memory", world);
  return std::make_shared<host_shm_communicator>(std::move(*segment), rank, world, slot,
                                                 std::move(workers), world);
}

} // namespace lockstep::detail
