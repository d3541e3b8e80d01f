// The data work of allreduce_slices: one template per (op, element type),
// dispatched once per call. The inner loops run over __restrict pointers in
// blocks of a constant length, which is what lets GCC vectorise them (see
// elementwise_loops.hpp).

#include "collectives/allreduce_slices.hpp"

#include "collectives/chunk_reduction.hpp"
#include "collectives/thread_scratch.hpp"
#include "devices/elementwise_loops.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include "lockstep/error.hpp"

namespace lockstep::detail {

namespace {

/// What a rank publishes at the rendezvous: the data of its inputs and
/// outputs, so the other ranks reach them in two loads, and where each
/// input starts in the concatenation (`starts`, one more entry than
/// inputs: the last is the total), so a slice finds its tensors without
/// walking the tensor objects.
struct published_buffers {
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::vector<std::size_t> starts;

  /// Refills the lists from `buffers` (validated: as many outputs as inputs).
  void assign(const allreduce_buffers& buffers) {
    inputs.clear();
    outputs.clear();
    starts.assign(1, 0);
    for (std::size_t i = 0; i < buffers.inputs.size(); ++i) {
      inputs.push_back(buffers.inputs[i].raw_data());
      outputs.push_back(buffers.outputs[i].raw_data());
      starts.push_back(starts.back() + static_cast<std::size_t>(buffers.inputs[i].num_elements()));
    }
  }
};

/// Reduces elements [offset, offset + count) of tensor `index` of every
/// rank's pack into every rank's output, chunk by chunk, through `block`
/// (chunk * scratch_per_element<T> bytes). Half types combine the ranks'
/// chunks in float and round once into every output, so every rank gets
/// the same bits.
template <reduce_op Op, class T>
void reduce_segment(const collective_group& group, std::size_t index, std::size_t offset,
                    std::size_t count, std::size_t chunk, std::byte* block) {
  const auto n = group.size();
  const auto input = [&](std::size_t r) {
    const auto* buffers = static_cast<const published_buffers*>(group.payload(r));
    return static_cast<const T*>(buffers->inputs[index]) + offset;
  };
  const auto output = [&](std::size_t r) {
    const auto* buffers = static_cast<const published_buffers*>(group.payload(r));
    return static_cast<T*>(buffers->outputs[index]) + offset;
  };
  reduce_to_every_output<Op, T>(n, input, output, count, chunk, block);
}

/// About how many slices a rank's share of a range is cut into: enough that
/// ranks with a CPU can take over the slices of ranks without one, few
/// enough that claiming costs nothing next to a slice's work.
constexpr std::size_t slices_per_rank = 4;

/// Calls `segment(i, offset, count)` for the part of each tensor of
/// `buffers` within positions [begin, end) of their concatenation.
template <class Segment>
void for_each_segment(std::span<const tensor> tensors, std::size_t begin, std::size_t end,
                      Segment segment) {
  std::size_t tensor_start = 0;
  for (std::size_t i = 0; i < tensors.size() && tensor_start < end; ++i) {
    const auto size = static_cast<std::size_t>(tensors[i].num_elements());
    const auto from = std::max(begin, tensor_start);
    const auto to = std::min(end, tensor_start + size);
    if (from < to)
      segment(i, from - tensor_start, to - from);
    tensor_start += size;
  }
}

/// Reduces positions [first, last) of the concatenation of the inputs,
/// tensor by tensor; `mine` is what this rank published (every rank's
/// tensors have the same sizes).
template <reduce_op Op, class T>
void reduce_slice(const collective_group& group, const published_buffers& mine,
                  std::size_t first, std::size_t last, std::size_t chunk_bytes) {
  const auto chunk = std::max<std::size_t>(1, chunk_bytes / sizeof(T));
  auto* block = thread_scratch(chunk * scratch_per_element<T>);
  const auto& starts = mine.starts;
  // The tensor holding position `first`: the last one starting at or before it.
  auto i = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), first)
                                    - starts.begin() - 1);
  for (; i + 1 < starts.size() && starts[i] < last; ++i) {
    const auto from = std::max(first, starts[i]);
    const auto to = std::min(last, starts[i + 1]);
    if (from < to)
      reduce_segment<Op, T>(group, i, from - starts[i], to - from, chunk, block);
  }
}

/// The small-collective path: every rank reduces the whole range from the
/// copies the ranks published inline, in the same order as reduce_segment
/// (rank 0's copy, combined with ranks 1, ..., N-1, then MEAN's division),
/// so results are bit-identical to the sliced path.
template <reduce_op Op, class T>
void reduce_inline(const collective_group& group, std::uint64_t seq, std::size_t count,
                   T* accumulator) {
  // In float for float16 and bfloat16, rounded once, as reduce_segment.
  alignas(64) float wide[collective_group::inline_capacity / sizeof(T)];
  reduce_operands<Op, T>(
    group.size(), [&](std::size_t r) { return static_cast<const T*>(group.inline_data(r, seq)); },
    count, accumulator, wide);
}

/// Elements in the concatenation of `inputs`.
std::size_t total_elements(std::span<const tensor> inputs) {
  std::size_t total = 0;
  for (const auto& t : inputs)
    total += static_cast<std::size_t>(t.num_elements());
  return total;
}

/// A hash of the shapes and element range of a pack. A pack of a batch is
/// named by the batch's shapes and where the pack lies in it, which costs
/// nothing per tensor.
std::uint64_t hash_layout(const allreduce_buffers& buffers, std::size_t end) {
  fingerprint_hash mix;
  if (buffers.batch) {
    mix(buffers.batch->shapes);
    mix(buffers.first_in_batch);
    mix(buffers.inputs.size());
  } else {
    for (const auto& t : buffers.inputs) {
      mix(t.rank());
      for (auto dim : t.shape())
        mix(static_cast<std::uint64_t>(dim));
    }
  }
  mix(buffers.begin);
  mix(end);
  return mix.hash | 1; // never 0, which marks a plain tensor
}

} // namespace

batch_signature sign_batch(std::span<const tensor> tensors) {
  fingerprint_hash dtypes;
  fingerprint_hash shapes;
  for (const auto& t : tensors) {
    dtypes(static_cast<std::uint64_t>(t.dtype()));
    shapes(t.rank());
    for (auto dim : t.shape())
      shapes(static_cast<std::uint64_t>(dim));
  }
  return {tensors.size(), dtypes.hash, shapes.hash};
}

collective_fingerprint all_reduce_fingerprint(std::uint64_t seq, reduce_op op,
                                              std::span<const tensor> inputs, std::size_t first,
                                              std::size_t last, const batch_signature& batch,
                                              const collective_options& options) {
  last = std::min(last, inputs.size());
  collective_fingerprint f;
  f.seq = seq;
  f.op = "all_reduce";
  f.reduction = std::string(to_string(op));
  f.tag = options.tag;
  f.epoch = options.epoch;
  f.batch_tensors = batch.tensors;
  f.batch_dtypes = batch.dtypes;
  f.batch_shapes = batch.shapes;
  f.tensors = last - first;
  if (f.tensors > 0) {
    f.dtype = inputs[first].dtype();
    std::size_t bytes = 0;
    for (auto i = first; i < last; ++i)
      bytes += inputs[i].byte_size();
    f.shape = f.tensors == 1 ? inputs[first].shape()
                             : shape_t{static_cast<std::int64_t>(bytes / size_of(f.dtype))};
    f.layout = f.tensors == 1 ? 0 : (batch.shapes ^ first) | 1;
  }
  return f;
}

collective_fingerprint all_gather_fingerprint(std::string_view what, std::size_t world,
                                              std::uint64_t seq, const tensor& input,
                                              const tensor& output,
                                              const collective_options& options) {
  if (input.dtype() != output.dtype()
      || static_cast<std::size_t>(output.num_elements()) != world * input.num_elements())
    throw value_error(std::string(what) + " all_gather: the output needs "
                      + std::to_string(world) + " blocks of the input's size and dtype");
  collective_fingerprint f;
  f.seq = seq;
  f.op = "all_gather";
  f.tag = options.tag;
  f.epoch = options.epoch;
  f.dtype = input.dtype();
  f.shape = input.shape();
  return f;
}

collective_fingerprint reduce_scatter_fingerprint(std::uint64_t seq, reduce_op op,
                                                  const tensor& input,
                                                  const collective_options& options) {
  collective_fingerprint f;
  f.seq = seq;
  f.op = "reduce_scatter";
  f.reduction = std::string(to_string(op));
  f.tag = options.tag;
  f.epoch = options.epoch;
  f.dtype = input.dtype();
  f.shape = input.shape();
  return f;
}

collective_fingerprint broadcast_fingerprint(std::uint64_t seq, std::size_t root,
                                             std::span<const tensor> buffers,
                                             const collective_options& options) {
  collective_fingerprint f;
  f.seq = seq;
  f.op = "broadcast";
  f.reduction = "from " + std::to_string(root);
  f.tag = options.tag;
  f.epoch = options.epoch;
  f.tensors = buffers.size();
  f.batch_tensors = buffers.size();
  f.batch_shapes = sign_batch(buffers).shapes;
  return f;
}

namespace {

/// Checks `mine`, whose inputs hold `total` elements, and returns the end
/// of its element range.
std::size_t validate(const collective_group& group, std::size_t rank,
                     const allreduce_buffers& mine, std::size_t total) {
  // Built only for a message: this runs on every collective.
  const auto prefix = [&] {
    return "allreduce_slices in group '" + group.tag() + "' (rank " + std::to_string(rank)
           + "): ";
  };
  if (rank >= group.size())
    throw value_error(prefix() + "rank out of range for a group of " + std::to_string(group.size()));
  if (mine.inputs.size() != mine.outputs.size())
    throw value_error(prefix() + "expected as many outputs as inputs, got "
                      + std::to_string(mine.inputs.size()) + " inputs and "
                      + std::to_string(mine.outputs.size()) + " outputs");
  for (std::size_t i = 0; i < mine.inputs.size(); ++i) {
    const auto& input = mine.inputs[i];
    const auto& output = mine.outputs[i];
    if (input.dtype() != mine.inputs[0].dtype())
      throw dtype_error(prefix() + "input " + std::to_string(i) + " is "
                        + std::string(to_string(input.dtype())) + ", input 0 is "
                        + std::string(to_string(mine.inputs[0].dtype())));
    if (output.dtype() != input.dtype())
      throw dtype_error(prefix() + "output " + std::to_string(i) + " is "
                        + std::string(to_string(output.dtype())) + ", its input is "
                        + std::string(to_string(input.dtype())));
    if (output.num_elements() != input.num_elements())
      throw value_error(prefix() + "output " + std::to_string(i) + " has "
                        + std::to_string(output.num_elements()) + " elements, its input has "
                        + std::to_string(input.num_elements()));
  }
  const auto end = mine.end == allreduce_buffers::whole ? total : mine.end;
  if (mine.begin > end || end > total)
    throw value_error(prefix() + "element range [" + std::to_string(mine.begin) + ", "
                      + std::to_string(end) + ") is not within the "
                      + std::to_string(total) + " elements of the inputs");
  return end;
}

/// Sets `f` to the fingerprint of `buffers` (validated; elements [begin,
/// end) of `total`), reusing its storage.
void fill_fingerprint(collective_fingerprint& f, std::uint64_t seq, reduce_op op,
                      const allreduce_buffers& buffers, std::size_t end, std::size_t total,
                      const collective_options& options) {
  const auto batch = buffers.batch ? *buffers.batch : sign_batch(buffers.inputs);
  f.batch_tensors = batch.tensors;
  f.batch_dtypes = batch.dtypes;
  f.batch_shapes = batch.shapes;
  f.epoch = options.epoch;
  f.seq = seq;
  f.op = "all_reduce";
  f.reduction = to_string(op);
  f.tag = options.tag;
  f.tensors = buffers.inputs.size();
  f.dtype = buffers.inputs.empty() ? dtype::f32 : buffers.inputs[0].dtype();
  if (buffers.inputs.size() == 1 && buffers.begin == 0 && end == total) {
    f.shape = buffers.inputs[0].shape();
    f.layout = 0;
  } else {
    f.shape.assign(1, static_cast<std::int64_t>(end - buffers.begin));
    f.layout = hash_layout(buffers, end);
  }
}

/// allreduce_slices of a range of at most collective_group::inline_capacity
/// bytes: the ranks publish copies of their elements and meet once, and each
/// reduces the whole range into its own outputs.
void allreduce_inline(collective_group& group, std::size_t rank, reduce_op op,
                      const allreduce_buffers& mine, std::size_t end,
                      const collective_fingerprint& fingerprint,
                      collective_group::clock::time_point deadline,
                      const std::exception_ptr& failure) {
  alignas(64) std::byte mine_copy[collective_group::inline_capacity];
  alignas(64) std::byte result[collective_group::inline_capacity];
  const auto element_size = size_of(fingerprint.dtype);
  std::size_t at = 0;
  for_each_segment(mine.inputs, mine.begin, end, [&](std::size_t i, std::size_t offset,
                                                     std::size_t count) {
    std::memcpy(mine_copy + at, static_cast<const std::byte*>(mine.inputs[i].raw_data())
                                    + offset * element_size, count * element_size);
    at += count * element_size;
  });
  group.arrive_inline(rank, fingerprint, deadline, mine_copy, at, failure);
  if (at == 0)
    return;
  visit_dtype(fingerprint.dtype, [&]<class T>(T) {
    dispatch_op(op, [&](auto op_constant) {
      reduce_inline<decltype(op_constant)::value, T>(group, fingerprint.seq, at / sizeof(T),
                                                     reinterpret_cast<T*>(result));
    });
  });
  at = 0;
  for_each_segment(mine.outputs, mine.begin, end, [&](std::size_t i, std::size_t offset,
                                                      std::size_t count) {
    std::memcpy(static_cast<std::byte*>(mine.outputs[i].raw_data()) + offset * element_size,
                result + at, count * element_size);
    at += count * element_size;
  });
}

} // namespace

void allreduce_slices(collective_group& group, std::size_t rank, reduce_op op,
                      const allreduce_buffers& mine, const collective_options& options,
                      std::uint64_t seq) {
  const auto total = total_elements(mine.inputs);
  const auto end = validate(group, rank, mine, total);
  const auto deadline = collective_group::clock::now() + options.timeout;
  // Reused by this thread's collectives, so its strings and shape keep
  // their storage.
  thread_local collective_fingerprint fingerprint;
  fill_fingerprint(fingerprint, seq == 0 ? group.next_seq(rank) : seq, op, mine, end, total,
                   options);
  const auto chunk_bytes = options.chunk_bytes == 0 ? default_chunk_bytes(group.size())
                                                     : options.chunk_bytes;
  // A range that fits in one chunk and in a rank's inline area meets once.
  const auto bytes = (end - mine.begin) * size_of(fingerprint.dtype);
  fingerprint.inline_data = bytes <= std::min(chunk_bytes, collective_group::inline_capacity);
  // Otherwise the range is cut into slices of at least a chunk, about 4 per
  // rank, and each rank reduces the slices it claims until none is left:
  // the ranks that have a CPU do the work of those that wait for one. The
  // slice size goes into the fingerprint, so ranks cut alike.
  const auto elements = end - mine.begin;
  const auto chunk_elements = std::max<std::size_t>(1, chunk_bytes / size_of(fingerprint.dtype));
  fingerprint.slice = fingerprint.inline_data
                          ? 0
                          : std::max(chunk_elements, elements / (slices_per_rank * group.size()));
  if (fingerprint.inline_data) {
    allreduce_inline(group, rank, op, mine, end, fingerprint, deadline, options.failure);
    return;
  }
  thread_local published_buffers published;
  published.assign(mine);
  group.arrive(rank, fingerprint, deadline, &published);

  const auto begin = mine.begin;
  const auto slice = fingerprint.slice;
  const auto slices = (elements + slice - 1) / slice;

  // Only growing the scratch block can throw here. A rank that cannot do
  // its share still meets the others at the barrier and reports why, and
  // the collective fails on every rank (the others claim its slices).
  std::exception_ptr failure = options.failure;
  if (!failure) try {
    if (!mine.inputs.empty())
      visit_dtype(fingerprint.dtype, [&]<class T>(T) {
        dispatch_op(op, [&](auto op_constant) {
          for (auto s = group.claim(fingerprint.seq); s < slices;
               s = group.claim(fingerprint.seq))
            reduce_slice<decltype(op_constant)::value, T>(
                group, published, begin + s * slice, std::min(end, begin + (s + 1) * slice),
                chunk_bytes);
        });
      });
  } catch (...) {
    failure = std::current_exception();
  }
  group.wait_all_done(rank, fingerprint.seq, deadline, std::move(failure));
}

void allreduce_slices(collective_group& group, std::size_t rank, reduce_op op,
                      const tensor& input, tensor& output, const collective_options& options) {
  allreduce_slices(group, rank, op, {{&input, 1}, {&output, 1}}, options);
}

} // namespace lockstep::detail
