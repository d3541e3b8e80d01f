#include "collectives/byte_reduction.hpp"

#include "devices/elementwise_loops.hpp"

#include "lockstep/error.hpp"
#include "lockstep/float16.hpp"

#include <cstring>
#include <string>
#include <vector>

namespace lockstep::detail {

void combine_bytes(reduce_op op, dtype type, std::uint8_t* accumulator, const std::uint8_t* x,
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

void combine_ordered(reduce_op op, dtype type, std::span<std::uint8_t> a,
                     std::span<std::uint8_t> b, bool a_first) {
  if (a.empty())
    return;
  if (is_half(type))
    throw value_error("combine_ordered: " + std::string(to_string(type))
                      + " is combined in float32");
  if (a_first) {
    combine_bytes(op, type, a.data(), b.data(), a.size());
  } else {
    combine_bytes(op, type, b.data(), a.data(), a.size());
    std::memcpy(a.data(), b.data(), a.size());
  }
}

void reduce_as_ring_does(
    std::string_view algorithm, reduce_op op, dtype type, std::span<std::uint8_t> data,
    std::size_t world,
    const std::function<void(reduce_op, dtype, std::span<std::uint8_t>)>& reduce) {
  if (data.size() % size_of(type) != 0)
    throw value_error(std::string(algorithm) + ": " + std::to_string(data.size())
                      + " bytes are not whole " + std::string(to_string(type)) + " elements");
  if (is_half(type)) { // in float32, rounded once at the end
    const auto count = data.size() / size_of(type);
    std::vector<float> wide(count);
    visit_dtype(type, [&]<class T>(T) {
      if constexpr (is_half_v<T>)
        widen(reinterpret_cast<const T*>(data.data()), wide.data(),
              static_cast<std::int64_t>(count));
    });
    reduce_as_ring_does(algorithm, op, dtype::f32,
                        {reinterpret_cast<std::uint8_t*>(wide.data()), count * sizeof(float)},
                        world, reduce);
    visit_dtype(type, [&]<class T>(T) {
      if constexpr (is_half_v<T>)
        narrow(wide.data(), reinterpret_cast<T*>(data.data()), static_cast<std::int64_t>(count));
    });
    return;
  }
  reduce(op == reduce_op::mean ? reduce_op::sum : op, type, data);
  if (op == reduce_op::mean)
    visit_dtype(type, [&]<class T>(T) {
      if constexpr (!is_half_v<T>)
        divide_loop(reinterpret_cast<T*>(data.data()), static_cast<std::int64_t>(world),
                    static_cast<std::int64_t>(data.size() / sizeof(T)));
    });
}

} // namespace lockstep::detail
