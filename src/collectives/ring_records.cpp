#include "collectives/ring_records.hpp"

#include "runtime/error_value.hpp"
#include "runtime/little_endian.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace lockstep::detail {

namespace {

constexpr std::size_t header_bytes = 16; // frame length, meta length
constexpr std::size_t payload_alignment = 16;

// -- the meta on the wire ---------------------------------------------------------------

/// Fields written at `at`, which has room for them: numbers as 8 bytes,
/// each text as its length, then its bytes.
struct field_writer {
  std::uint8_t* at;

  void u64(std::uint64_t value) {
    store_le(at, value);
    at += 8;
  }
  void text(const std::string& value) {
    u64(value.size());
    if (!value.empty())
      std::memcpy(at, value.data(), value.size());
    at += value.size();
  }
  /// Writes `f`; returns the end of what it wrote.
  std::uint8_t* fingerprint(const collective_fingerprint& f) {
    u64(f.seq);
    text(f.op);
    text(f.reduction);
    u64(static_cast<std::uint64_t>(f.dtype));
    u64(f.shape.size());
    for (auto dim : f.shape)
      u64(static_cast<std::uint64_t>(dim));
    text(f.tag);
    for (const std::uint64_t value : {std::uint64_t{f.tensors}, f.layout,
                                      std::uint64_t{f.batch_tensors}, f.batch_dtypes,
                                      f.batch_shapes, f.epoch, std::uint64_t{f.inline_data},
                                      std::uint64_t{f.slice}})
      u64(value);
    text(f.algorithm);
    return at;
  }
};

/// What field_writer::fingerprint writes for `f`: 15 numbers, the dimensions and
/// the four texts.
std::size_t fingerprint_bytes(const collective_fingerprint& f) {
  return 8 * (15 + f.shape.size()) + f.op.size() + f.reduction.size() + f.tag.size()
         + f.algorithm.size();
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

collective_fingerprint get_fingerprint(reader& r) {
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
  f.algorithm = r.text();
  return f;
}

// -- frames ---------------------------------------------------------------------------

/// A frame's meta and payload; value_error when its lengths do not fit it
/// (exchange_frame made the first field right).
struct frame_parts {
  std::span<const std::uint8_t> meta;
  std::span<const std::uint8_t> payload;
};

frame_parts parts_of(std::span<const std::uint8_t> frame) {
  if (frame.size() < header_bytes)
    throw value_error("a record from another worker is truncated");
  const auto meta = load_le<std::uint64_t>(frame, 8);
  if (meta > frame.size() - header_bytes)
    throw value_error("a record from another worker is truncated");
  return {frame.subspan(header_bytes, meta), frame.subspan(header_bytes + meta)};
}

} // namespace

void ring_records::start(std::size_t rank, std::size_t world, const collective_fingerprint& mine,
                         const std::exception_ptr& failure, std::span<const std::uint8_t> payload) {
  rank_ = rank;
  failed_ = failure != nullptr;
  frames_.resize(world);
  auto& out = frames_[rank];
  // Sized once and written in place: a frame as long as the last one
  // (the usual case) is neither reallocated nor zeroed again.
  const auto fields = fingerprint_bytes(mine);
  out.resize(header_bytes + fields + 8);
  if (field_writer{out.data() + header_bytes}.fingerprint(mine)
      != out.data() + header_bytes + fields)
    throw std::logic_error("ring_records: fingerprint_bytes disagrees with field_writer");
  store_le(out.data() + header_bytes + fields, std::uint64_t{failed_ ? 1u : 0u});
  if (failed_) {
    const auto value = to_error_value(failure);
    const auto at = out.size();
    out.resize(at + 16 + value.message.size());
    field_writer failed{out.data() + at};
    failed.u64(static_cast<std::uint64_t>(value.kind));
    failed.text(value.message);
  }
  // The meta padded with zeros to a multiple of 16, so that the payload
  // starts as aligned as the frame's buffer (new[]'s 16 bytes): ranks
  // combine it in place, element by element.
  const auto meta = (out.size() - header_bytes + payload_alignment - 1) / payload_alignment
                    * payload_alignment;
  out.resize(header_bytes + meta + payload.size());
  if (!payload.empty())
    std::memcpy(out.data() + header_bytes + meta, payload.data(), payload.size());
  store_le(out.data(), std::uint64_t{out.size() - 8});
  store_le(out.data() + 8, std::uint64_t{meta});
}

void ring_records::check() const {
  const auto mine = parts_of(frames_.at(rank_));
  bool same = !failed_;
  for (std::size_t r = 0; r < frames_.size() && same; ++r) {
    if (r == rank_)
      continue;
    const auto theirs = parts_of(frames_[r]);
    same = std::ranges::equal(theirs.meta, mine.meta)
           && theirs.payload.size() == mine.payload.size();
  }
  if (!same)
    throw_disagreement();
}

void ring_records::throw_disagreement() const {
  std::vector<collective_fingerprint> issued;
  issued.reserve(frames_.size());
  for (std::size_t r = 0; r < frames_.size(); ++r) {
    const auto parts = parts_of(frames_[r]);
    reader in{parts.meta};
    issued.push_back(get_fingerprint(in));
    if (in.u64() != 0) { // rank r failed: every rank throws its error
      const auto kind = static_cast<error_kind>(in.u64());
      rethrow({is_valid(kind) ? kind : error_kind::unknown, in.text(), {}});
    }
  }
  std::vector<const collective_fingerprint*> by_rank;
  for (const auto& f : issued)
    by_rank.push_back(&f);
  if (std::ranges::all_of(issued, [&](const auto& f) { return f == issued[0]; }))
    throw value_error("worker " + std::to_string(rank_ < workers_.size() ? workers_[rank_] : rank_)
                      + " received data of another size than "
                      "its own for " + issued[0].to_string()); // no worker sends it
  std::rethrow_exception(mismatch_error(by_rank, "worker", "workers", workers_));
}

std::span<const std::uint8_t> ring_records::payload(std::size_t r) const {
  return parts_of(frames_.at(r)).payload;
}

} // namespace lockstep::detail
