#include "transport/tcp/ring_collectives.hpp"

#include "devices/elementwise_loops.hpp"
#include "runtime/error_value.hpp"
#include "runtime/fault_injection.hpp"
#include "transport/tcp/little_endian.hpp"

#include "lockstep/error.hpp"
#include "lockstep/float16.hpp"

#include <cstring>
#include <string>
#include <vector>

namespace lockstep::detail {

namespace {

// -- fingerprints on the wire -------------------------------------------------------

void put_u64(bytes& out, std::uint64_t value) {
  append_le(out, value);
}

void put_text(bytes& out, const std::string& text) {
  put_u64(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
}

/// Reads what put_* wrote; a record that ends early is a protocol error.
struct reader {
  std::span<const std::uint8_t> in;
  std::size_t at = 0;

  std::uint64_t u64() {
    need(8);
    const auto value = load_le<std::uint64_t>(in, at);
    at += 8;
    return value;
  }
  std::string text() {
    const auto size = u64();
    need(size);
    std::string value(reinterpret_cast<const char*>(in.data() + at), size);
    at += size;
    return value;
  }
  void need(std::uint64_t size) const {
    if (size > in.size() - at)
      throw value_error("a fingerprint from another worker is truncated");
  }
};

bytes encode(const collective_fingerprint& f) {
  bytes out;
  put_u64(out, f.seq);
  put_text(out, f.op);
  put_text(out, f.reduction);
  put_u64(out, static_cast<std::uint64_t>(f.dtype));
  put_u64(out, f.shape.size());
  for (auto dim : f.shape)
    put_u64(out, static_cast<std::uint64_t>(dim));
  put_text(out, f.tag);
  for (const std::uint64_t value : {std::uint64_t{f.tensors}, f.layout,
                                    std::uint64_t{f.batch_tensors}, f.batch_dtypes,
                                    f.batch_shapes, f.epoch, std::uint64_t{f.inline_data},
                                    std::uint64_t{f.slice}})
    put_u64(out, value);
  return out;
}

collective_fingerprint decode(reader& r) {
  collective_fingerprint f;
  f.seq = r.u64();
  f.op = r.text();
  f.reduction = r.text();
  const auto type = r.u64();
  if (type > static_cast<std::uint64_t>(dtype::bf16))
    throw value_error("a fingerprint from another worker names no dtype");
  f.dtype = static_cast<dtype>(type);
  const auto rank = r.u64();
  r.need(rank * 8);
  for (std::uint64_t i = 0; i < rank; ++i)
    f.shape.push_back(static_cast<std::int64_t>(r.u64()));
  f.tag = r.text();
  f.tensors = r.u64();
  f.layout = r.u64();
  f.batch_tensors = r.u64();
  f.batch_dtypes = r.u64();
  f.batch_shapes = r.u64();
  f.epoch = r.u64();
  f.inline_data = r.u64() != 0;
  f.slice = r.u64();
  return f;
}

/// Sends a length-prefixed record to the next rank while receiving one
/// from the previous rank.
bytes exchange_record(ring_links& links, const bytes& out, io_clock::time_point deadline) {
  std::uint8_t length_out[8];
  std::uint8_t length_in[8];
  store_le(length_out, std::uint64_t{out.size()});
  links.exchange(length_out, length_in, deadline);
  const auto size = load_le<std::uint64_t>(length_in);
  constexpr std::uint64_t max_record = 1 << 20;
  if (size > max_record)
    throw value_error("worker " + std::to_string(links.prev_rank()) + " sent a fingerprint of "
                      + std::to_string(size) + " bytes");
  bytes in(size);
  links.exchange(out, in, deadline);
  return in;
}

// -- reductions -----------------------------------------------------------------------

/// `accumulator[i] = accumulator[i] op x[i]` on raw bytes of `type` (not a
/// half type: those are reduced in float).
void combine(reduce_op op, dtype type, std::uint8_t* accumulator, const std::uint8_t* x,
             std::size_t bytes_count) {
  visit_dtype(type, [&]<class T>(T) {
    if constexpr (!is_half_v<T>)
      dispatch_op(op, [&](auto op_constant) {
        in_blocks(static_cast<std::int64_t>(bytes_count / sizeof(T)),
                  [&](std::int64_t at, std::int64_t length) {
                    combine_loop<decltype(op_constant)::value>(
                        reinterpret_cast<T*>(accumulator) + at,
                        reinterpret_cast<const T*>(x) + at, length);
                  });
      });
  });
}

void divide(dtype type, std::span<std::uint8_t> data, std::size_t divisor) {
  visit_dtype(type, [&]<class T>(T) {
    if constexpr (!is_half_v<T>)
      divide_loop(reinterpret_cast<T*>(data.data()), static_cast<std::int64_t>(divisor),
                  static_cast<std::int64_t>(data.size() / sizeof(T)));
  });
}

/// The all-gather path: every rank gets every rank's buffer and combines
/// them in rank order.
void all_reduce_by_gather(ring_links& links, reduce_op op, dtype type,
                          std::span<std::uint8_t> data, io_clock::time_point deadline) {
  const auto world = links.world;
  const auto size = data.size();
  if (size == 0) // nothing to move (and memcpy must not see a null buffer)
    return;
  bytes blocks(world * size);
  std::memcpy(blocks.data() + links.rank * size, data.data(), size);
  ring_all_gather(links, blocks, deadline);
  std::memcpy(data.data(), blocks.data(), size);
  for (std::size_t r = 1; r < world; ++r)
    combine(op, type, data.data(), blocks.data() + r * size, size);
}

/// Reduce-scatter, then all-gather, over `world` segments.
void all_reduce_by_ring(ring_links& links, reduce_op op, dtype type, std::span<std::uint8_t> data,
                        io_clock::time_point deadline) {
  const auto world = links.world;
  const auto element = size_of(type);
  const auto elements = data.size() / element;
  const auto segment = [&](std::size_t s) {
    s %= world;
    const auto begin = s * elements / world * element;
    const auto end = (s + 1) * elements / world * element;
    return data.subspan(begin, end - begin);
  };
  // Received data is combined chunk by chunk through a scratch block that
  // stays in L2 (network.md §1.7); a segment-sized block would also be a
  // fresh mmap on every call beyond malloc's 32 MiB threshold, page faults
  // included (64 MiB all-reduces ran 16x slower than 32 MiB ones).
  const auto chunk = std::min(ring_chunk_bytes, (elements / world + 1) * element);
  bytes scratch(chunk);
  const auto rank = links.rank + world; // so that rank - t - 2 stays positive
  for (std::size_t t = 0; t + 1 < world; ++t) {
    const auto out = segment(rank - t - 1);
    const auto mine = segment(rank - t - 2);
    for (std::size_t at = 0; at < std::max(out.size(), mine.size()); at += chunk) {
      const auto sending = at < out.size() ? std::min(chunk, out.size() - at) : 0;
      const auto receiving = at < mine.size() ? std::min(chunk, mine.size() - at) : 0;
      links.exchange(out.subspan(at, sending), std::span(scratch).first(receiving), deadline);
      combine(op, type, mine.data() + at, scratch.data(), receiving);
      if (t == 0 && at == 0)
        fault_point("reduce-scatter");
    }
  }
  for (std::size_t t = 0; t + 1 < world; ++t) {
    links.exchange(segment(rank - t), segment(rank - t - 1), deadline);
    if (t == 0)
      fault_point("all-gather");
  }
}

} // namespace

void ring_agree(ring_links& links, const collective_fingerprint& mine,
                io_clock::time_point deadline, const std::exception_ptr& failure) {
  fault_point("agree");
  const auto world = links.world;
  std::vector<bytes> records(world);
  records[links.rank] = encode(mine);
  auto& record = records[links.rank];
  put_u64(record, failure ? 1 : 0);
  if (failure) {
    const auto value = to_error_value(failure);
    put_u64(record, static_cast<std::uint64_t>(value.kind));
    put_text(record, value.message);
  }
  for (std::size_t t = 0; t + 1 < world; ++t)
    records[(links.rank + 2 * world - t - 1) % world] =
      exchange_record(links, records[(links.rank + world - t) % world], deadline);
  std::vector<collective_fingerprint> issued;
  for (const auto& record : records) {
    reader r{record};
    issued.push_back(decode(r));
    if (r.u64() != 0) { // this rank failed: every rank throws its error
      const auto kind = static_cast<error_kind>(r.u64());
      rethrow({is_valid(kind) ? kind : error_kind::unknown, r.text(), {}});
    }
  }
  std::vector<const collective_fingerprint*> by_rank;
  bool same = true;
  for (const auto& f : issued) {
    by_rank.push_back(&f);
    same = same && f == issued[0];
  }
  if (!same)
    std::rethrow_exception(mismatch_error(by_rank, "worker", "workers"));
}

void ring_all_reduce(ring_links& links, reduce_op op, dtype type, std::span<std::uint8_t> data,
                     io_clock::time_point deadline) {
  if (data.size() % size_of(type) != 0)
    throw value_error("ring_all_reduce: " + std::to_string(data.size()) + " bytes are not whole "
                      + std::string(to_string(type)) + " elements");
  if (is_half(type)) { // in float32, rounded once at the end
    const auto count = data.size() / size_of(type);
    std::vector<float> wide(count);
    visit_dtype(type, [&]<class T>(T) {
      if constexpr (is_half_v<T>)
        widen(reinterpret_cast<const T*>(data.data()), wide.data(),
              static_cast<std::int64_t>(count));
    });
    ring_all_reduce(links, op, dtype::f32,
                    {reinterpret_cast<std::uint8_t*>(wide.data()), count * sizeof(float)},
                    deadline);
    visit_dtype(type, [&]<class T>(T) {
      if constexpr (is_half_v<T>)
        narrow(wide.data(), reinterpret_cast<T*>(data.data()), static_cast<std::int64_t>(count));
    });
    return;
  }
  const auto combining = op == reduce_op::mean ? reduce_op::sum : op;
  if (links.world > 1) {
    if ((links.world - 1) * data.size() <= small_all_reduce_bytes
        || data.size() / size_of(type) < links.world)
      all_reduce_by_gather(links, combining, type, data, deadline);
    else
      all_reduce_by_ring(links, combining, type, data, deadline);
  }
  if (op == reduce_op::mean)
    divide(type, data, links.world);
}

void ring_all_gather(ring_links& links, std::span<std::uint8_t> data,
                     io_clock::time_point deadline) {
  const auto world = links.world;
  if (data.size() % world != 0)
    throw value_error("ring_all_gather: " + std::to_string(data.size())
                      + " bytes are not " + std::to_string(world) + " equal blocks");
  const auto block = data.size() / world;
  const auto rank = links.rank + world;
  for (std::size_t t = 0; t + 1 < world; ++t) {
    links.exchange(data.subspan((rank - t) % world * block, block),
                   data.subspan((rank - t - 1) % world * block, block), deadline);
    if (t == 0)
      fault_point("all-gather");
  }
}

void ring_broadcast(ring_links& links, std::size_t root, std::span<std::uint8_t> data,
                    io_clock::time_point deadline) {
  if (root >= links.world)
    throw value_error("ring_broadcast: root " + std::to_string(root) + " is not a rank of "
                      + std::to_string(links.world));
  if (links.world == 1)
    return;
  if (links.rank != root)
    links.exchange({}, data, deadline);
  if (links.next_rank() != root)
    links.exchange(data, {}, deadline);
}

} // namespace lockstep::detail
