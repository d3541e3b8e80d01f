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
  const auto fingerprint = broadcast_fingerprint(group, rank, root, buffers, options);
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
