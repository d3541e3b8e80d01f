#include "collectives/block_collectives.hpp"

#include "collectives/allreduce_slices.hpp"
#include "collectives/run_collective.hpp"
#include "devices/elementwise_loops.hpp"

#include "lockstep/error.hpp"

#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace lockstep::detail {

namespace {

/// Checks that `output` holds `factor` times (or 1/`factor` of) `input`'s
/// elements, in one dtype.
void check_blocks(const collective_group& group, std::size_t rank, const char* op,
                  const tensor& input, const tensor& output, bool output_larger) {
  const auto prefix = [&] {
    return std::string{op} + " in group '" + group.tag() + "' (rank " + std::to_string(rank)
           + "): ";
  };
  if (rank >= group.size())
    throw value_error(prefix() + "rank out of range for a group of "
                      + std::to_string(group.size()));
  if (input.dtype() != output.dtype())
    throw dtype_error(prefix() + "the output is " + std::string(to_string(output.dtype()))
                      + ", the input " + std::string(to_string(input.dtype())));
  const auto n = static_cast<std::int64_t>(group.size());
  const auto [small, large] = output_larger ? std::pair{input.num_elements(), output.num_elements()}
                                            : std::pair{output.num_elements(), input.num_elements()};
  if (large != n * small)
    throw value_error(prefix() + "expected the " + (output_larger ? "output" : "input")
                      + " to hold " + std::to_string(n) + " blocks of the "
                      + (output_larger ? "input" : "output") + "'s " + std::to_string(small)
                      + " elements, got " + std::to_string(large));
}

} // namespace

void reduce_scatter_blocks(collective_group& group, std::size_t rank, reduce_op op,
                           const tensor& input, tensor& output,
                           const collective_options& options) {
  check_blocks(group, rank, "reduce_scatter", input, output, false);
  auto fingerprint = fingerprint_of(group, rank, "reduce_scatter", input, options);
  fingerprint.reduction = to_string(op);
  run_collective(group, rank, fingerprint, input.raw_data(), options, [&] {
    const auto count = static_cast<std::size_t>(output.num_elements());
    const auto n = group.size();
    visit_dtype(input.dtype(), [&]<class T>(T) {
      dispatch_op(op, [&](auto op_constant) {
        constexpr auto reduce = decltype(op_constant)::value;
        const auto block = [&](std::size_t r) {
          return static_cast<const T*>(group.payload(r)) + rank * count;
        };
        auto* out = static_cast<T*>(output.raw_data());
        if constexpr (is_half_v<T>) {
          // In float, rounded once, as allreduce_slices does.
          in_blocks(static_cast<std::int64_t>(count), [&](std::int64_t at, std::int64_t size) {
            alignas(64) float wide[lockstep::detail::block];
            reduce_in_float<reduce>(n, [&](std::size_t r) { return block(r) + at; }, size, wide,
                                    out + at);
          });
          return;
        }
        std::memcpy(out, block(0), count * sizeof(T));
        for (std::size_t r = 1; r < n; ++r)
          in_blocks(static_cast<std::int64_t>(count), [&](std::int64_t at, std::int64_t size) {
            combine_loop<reduce>(out + at, block(r) + at, size);
          });
        if constexpr (reduce == reduce_op::mean)
          in_blocks(static_cast<std::int64_t>(count), [&](std::int64_t at, std::int64_t size) {
            divide_loop(out + at, static_cast<std::int64_t>(n), size);
          });
      });
    });
  });
}

void all_gather_blocks(collective_group& group, std::size_t rank, const tensor& input,
                       tensor& output, const collective_options& options) {
  check_blocks(group, rank, "all_gather", input, output, true);
  const auto fingerprint = fingerprint_of(group, rank, "all_gather", input, options);
  run_collective(group, rank, fingerprint, input.raw_data(), options, [&] {
    const auto bytes = input.byte_size();
    auto* out = static_cast<std::byte*>(output.raw_data());
    for (std::size_t r = 0; r < group.size(); ++r)
      std::memcpy(out + r * bytes, group.payload(r), bytes);
  });
}

void broadcast_buffers(collective_group& group, std::size_t rank, std::size_t root,
                       std::span<tensor> buffers, const collective_options& options) {
  if (root >= group.size() || rank >= group.size())
    throw value_error("broadcast in group '" + group.tag() + "': rank " + std::to_string(rank)
                      + " or root " + std::to_string(root) + " out of range for a group of "
                      + std::to_string(group.size()));
  collective_fingerprint fingerprint;
  fingerprint.seq = group.next_seq(rank);
  fingerprint.op = "broadcast";
  fingerprint.reduction = "from rank " + std::to_string(root);
  fingerprint.tag = options.tag;
  fingerprint.epoch = options.epoch;
  fingerprint.tensors = buffers.size();
  const auto batch = sign_batch(buffers);
  fingerprint.batch_tensors = batch.tensors;
  fingerprint.batch_dtypes = batch.dtypes;
  fingerprint.batch_shapes = batch.shapes;
  std::size_t elements = 0;
  for (const auto& b : buffers)
    elements += static_cast<std::size_t>(b.num_elements());
  fingerprint.shape = {static_cast<std::int64_t>(elements)};
  if (!buffers.empty())
    fingerprint.dtype = buffers[0].dtype();
  // The root publishes its buffers; the others copy from them.
  std::vector<const void*> mine;
  mine.reserve(buffers.size());
  for (const auto& b : buffers)
    mine.push_back(b.raw_data());
  run_collective(group, rank, fingerprint, &mine, options, [&] {
    if (rank == root)
      return;
    const auto& from = *static_cast<const std::vector<const void*>*>(group.payload(root));
    for (std::size_t i = 0; i < buffers.size(); ++i)
      std::memcpy(buffers[i].raw_data(), from[i], buffers[i].byte_size());
  });
}

} // namespace lockstep::detail
