// The data work of allreduce_slices: one template per (op, element type),
// dispatched once per call. The inner loops run over __restrict pointers in
// blocks of a constant length, which is what lets GCC vectorise them (see
// elementwise_loops.hpp).

#include "collectives/allreduce_slices.hpp"

#include "elementwise_loops.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lockstep/error.hpp"

namespace lockstep::detail {

namespace {

template <collective_op Op, class T>
void combine(T* __restrict accumulator, const T* __restrict x, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    if constexpr (Op == collective_op::sum || Op == collective_op::mean)
      accumulator[i] += x[i];
    else if constexpr (Op == collective_op::min)
      accumulator[i] = x[i] < accumulator[i] ? x[i] : accumulator[i];
    else if constexpr (Op == collective_op::max)
      accumulator[i] = accumulator[i] < x[i] ? x[i] : accumulator[i];
    else
      accumulator[i] *= x[i];
  }
}

template <collective_op Op, class T>
void combine_in_blocks(T* accumulator, const T* x, std::size_t count) {
  in_blocks(static_cast<std::int64_t>(count), [=](std::int64_t offset, std::int64_t length) {
    combine<Op>(accumulator + offset, x + offset, static_cast<std::size_t>(length));
  });
}

// Reduces elements [begin, end) of every input into every output, chunk by
// chunk, through `scratch` (chunk elements).
template <collective_op Op, class T>
void reduce_slice(const std::vector<const T*>& inputs, const std::vector<T*>& outputs,
                  std::size_t begin, std::size_t end, std::size_t chunk) {
  if (begin == end)
    return;
  std::vector<T> scratch(std::min(chunk, end - begin));
  T* accumulator = scratch.data();
  for (auto offset = begin; offset < end; offset += chunk) {
    const auto count = std::min(chunk, end - offset);
    std::memcpy(accumulator, inputs[0] + offset, count * sizeof(T));
    for (std::size_t k = 1; k < inputs.size(); ++k)
      combine_in_blocks<Op>(accumulator, inputs[k] + offset, count);
    if constexpr (Op == collective_op::mean)
      in_blocks(static_cast<std::int64_t>(count), [=](std::int64_t offset, std::int64_t length) {
        divide_loop(accumulator + offset, static_cast<std::int64_t>(inputs.size()), length);
      });
    for (T* output : outputs)
      std::memcpy(output + offset, accumulator, count * sizeof(T));
  }
}

template <class Work>
void dispatch_op(collective_op op, Work work) {
  switch (op) {
    case collective_op::sum:
      return work(std::integral_constant<collective_op, collective_op::sum>{});
    case collective_op::mean:
      return work(std::integral_constant<collective_op, collective_op::mean>{});
    case collective_op::min:
      return work(std::integral_constant<collective_op, collective_op::min>{});
    case collective_op::max:
      return work(std::integral_constant<collective_op, collective_op::max>{});
    case collective_op::prod:
      return work(std::integral_constant<collective_op, collective_op::prod>{});
  }
  throw value_error("allreduce_slices: invalid collective_op");
}

void validate(const collective_group& group, std::size_t rank, std::span<const tensor> inputs,
              std::span<tensor> outputs) {
  const auto prefix = "allreduce_slices in group '" + group.tag() + "' (rank "
                      + std::to_string(rank) + "): ";
  const auto n = group.size();
  if (rank >= n)
    throw value_error(prefix + "rank out of range for a group of " + std::to_string(n));
  if (inputs.size() != n || outputs.size() != n)
    throw value_error(prefix + "expected " + std::to_string(n) + " inputs and outputs, got "
                      + std::to_string(inputs.size()) + " inputs and "
                      + std::to_string(outputs.size()) + " outputs");
  const auto type = inputs[0].dtype();
  const auto count = inputs[0].num_elements();
  const auto check = [&](const tensor& t, const char* kind, std::size_t r) {
    if (t.dtype() != type)
      throw dtype_error(prefix + kind + " of rank " + std::to_string(r) + " is "
                        + std::string(to_string(t.dtype())) + ", input of rank 0 is "
                        + std::string(to_string(type)));
    if (t.num_elements() != count)
      throw value_error(prefix + kind + " of rank " + std::to_string(r) + " has "
                        + std::to_string(t.num_elements()) + " elements, input of rank 0 has "
                        + std::to_string(count));
  };
  for (std::size_t r = 0; r < n; ++r) {
    check(inputs[r], "input", r);
    check(outputs[r], "output", r);
  }
}

} // namespace

void allreduce_slices(collective_group& group, std::size_t rank, collective_op op,
                      std::span<const tensor> inputs, std::span<tensor> outputs,
                      const collective_options& options) {
  validate(group, rank, inputs, outputs);
  const auto deadline = collective_group::clock::now() + options.timeout;
  const collective_fingerprint mine{group.next_seq(rank), "all_reduce",
                                    std::string(to_string(op)), inputs[rank].dtype(),
                                    inputs[rank].shape(), options.tag};
  group.arrive(rank, mine, deadline);

  const auto n = group.size();
  const auto elements = static_cast<std::size_t>(inputs[0].num_elements());
  const auto per_rank = elements / n;
  const auto remainder = elements % n;
  const auto begin = rank * per_rank + std::min(rank, remainder);
  const auto end = begin + per_rank + (rank < remainder ? 1 : 0);
  const auto chunk_bytes = options.chunk_bytes == 0 ? default_chunk_bytes : options.chunk_bytes;

  // Only allocating the scratch block can throw here; a rank that cannot do
  // its share would leave the others waiting, so it breaks the group.
  try {
    visit_dtype(inputs[0].dtype(), [&]<class T>(T) {
      std::vector<const T*> sources(n);
      std::vector<T*> destinations(n);
      for (std::size_t r = 0; r < n; ++r) {
        sources[r] = static_cast<const T*>(inputs[r].raw_data());
        destinations[r] = static_cast<T*>(outputs[r].raw_data());
      }
      const auto chunk = std::max<std::size_t>(1, chunk_bytes / sizeof(T));
      dispatch_op(op, [&](auto op_constant) {
        reduce_slice<decltype(op_constant)::value, T>(sources, destinations, begin, end, chunk);
      });
    });
  } catch (...) {
    group.abort(std::current_exception());
    throw;
  }

  group.wait_all_done(rank, mine.seq, deadline);
}

} // namespace lockstep::detail
