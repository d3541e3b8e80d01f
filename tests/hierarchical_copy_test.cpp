// hierarchical_copy on virtual CPU devices: reduce and batch_reduce against
// closed-form values for every dtype and op, world sizes 1, 2, 3, 4 and 7
// and element counts 0, 1, 7, 13 and 70000; each result on its own device
// in its own buffer; the rotation of the main devices; the two-halves order
// of operations; packing bit-identical to reducing one by one; the fallback
// to one device; the shared validation. No actor system: suite 'unit'.

#include "lockstep/cross_device_ops.hpp"

#include <doctest/doctest.h>

#include "cross_device_ops/hierarchical_copy_roles.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "lockstep/device_spec.hpp"
#include "lockstep/error.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/values.hpp"

#include "device_components.hpp"

using namespace lockstep;

namespace {

constexpr int world_sizes[] = {1, 2, 3, 4, 7};
constexpr std::int64_t element_counts[] = {0, 1, 7, 13, 70000};
constexpr dtype all_dtypes[] = {dtype::f32, dtype::f64, dtype::i32, dtype::i64};
constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::mean, reduce_op::min,
                                 reduce_op::max, reduce_op::prod};

// Component d is on device d, and no result buffer is shared with another
// result or with an input.
void check_placement(const mirrored<tensor>& result, const per_replica<tensor>& inputs, int n) {
  REQUIRE(result.size() == static_cast<std::size_t>(n));
  for (std::size_t a = 0; a < result.size(); ++a) {
    CHECK(result[a].device() == cpu_device(static_cast<int>(a)));
    for (std::size_t b = a + 1; b < result.size(); ++b)
      CHECK_FALSE(result[a].same_buffer(result[b]));
    for (const auto& x : inputs.values())
      CHECK_FALSE(result[a].same_buffer(x));
  }
}

bool same_bytes(const tensor& a, const tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape()
         && std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0;
}

per_replica<tensor> per_device(std::vector<tensor> xs) {
  return per_replica<tensor>{std::move(xs)};
}

// Component r of n holds `values[r]` as float32, on device r.
per_replica<tensor> floats(const std::vector<float>& values) {
  std::vector<tensor> xs;
  for (std::size_t r = 0; r < values.size(); ++r)
    xs.push_back(tensor::from(std::vector<float>{values[r]}, {1}, cpu_device(static_cast<int>(r))));
  return per_device(std::move(xs));
}

// Component r on device r: element i of a tensor of `shape` is a float that
// rounds differently in other orders of addition.
per_replica<tensor> shaped(dtype type, const shape_t& shape, int n, int salt) {
  std::vector<tensor> xs;
  for (int r = 0; r < n; ++r) {
    auto t = tensor::zeros(type, shape, cpu_device(r));
    visit_dtype(type, [&]<class T>(T) {
      auto elements = t.data<T>();
      for (std::size_t i = 0; i < elements.size(); ++i)
        elements[i] = static_cast<T>((r + 1) * (static_cast<double>((i + static_cast<std::size_t>(salt)) % 13) - 6) / 3.0);
    });
    xs.push_back(std::move(t));
  }
  return per_device(std::move(xs));
}

std::string name_of(dtype type) {
  return std::string{to_string(type)};
}

} // namespace

// -- reduce: closed-form values ------------------------------------------------------

TEST_CASE("reduce: every dtype, op, world size and count, one buffer per device") {
  hierarchical_copy ops;
  for (auto type : all_dtypes)
    for (auto op : all_ops)
      for (auto n : world_sizes)
        for (auto count : element_counts) {
          INFO("dtype ", name_of(type), ", op ", to_string(op), ", n ", n, ", count ", count);
          const auto value = components(op, type, count, n);
          const auto result = ops.reduce(op, value, value);
          REQUIRE(result.size() == static_cast<std::size_t>(n));
          for (const auto& x : result.values())
            check_elements(x, op, type, count, n);
          if (n > 1)
            check_placement(result, value, n);
          else
            CHECK(result[0].same_buffer(value[0])); // one device: the identity
          for (int r = 0; r < n; ++r)
            CHECK(same_bytes(value[static_cast<std::size_t>(r)],
                             components(op, type, count, n)[static_cast<std::size_t>(r)]));
        }
}

TEST_CASE("batch_reduce without packing rotates the main device over every device") {
  // Tensor i has main device i mod n: a batch of 2n + 1 tensors gives every
  // device both roles, with both halves holding the main device.
  hierarchical_copy ops{0};
  for (auto op : all_ops)
    for (auto n : world_sizes)
      for (auto type : {dtype::f32, dtype::i64}) {
        INFO("dtype ", name_of(type), ", op ", to_string(op), ", n ", n);
        std::vector<reduce_pair> pairs;
        for (int i = 0; i < 2 * n + 1; ++i) {
          const auto value = components(op, type, element_counts[i % 4], n);
          pairs.push_back(reduce_pair{value, value});
        }
        const auto batch = ops.batch_reduce(op, pairs);
        REQUIRE(batch.size() == pairs.size());
        for (std::size_t k = 0; k < pairs.size(); ++k) {
          CAPTURE(k);
          for (const auto& x : batch[k].values())
            check_elements(x, op, type, pairs[k].value.primary().num_elements(), n);
          if (n > 1)
            check_placement(batch[k], pairs[k].value, n);
        }
      }
}

TEST_CASE("the main device rotates as in TF, the partner sits in the same position of the other half") {
  for (std::size_t n : {2, 3, 4, 5, 7, 8}) {
    CAPTURE(n);
    const auto half = n / 2;
    std::set<std::size_t> mains;
    std::set<std::size_t> partners;
    for (std::size_t i = 0; i < 3 * n; ++i) {
      CAPTURE(i);
      const auto roles = detail::hierarchical_roles(i, n);
      CHECK(roles.half == half);
      CHECK(roles.main == i % n);
      mains.insert(roles.main);
      partners.insert(roles.partner);
      const bool main_in_first = roles.main < half;
      CHECK((roles.partner < half) != main_in_first); // in the other half
      if (main_in_first)
        CHECK(roles.partner == half + roles.main % (n - half));
      else
        CHECK(roles.partner == (roles.main - half) % half);
      if (n % 2 == 0)
        CHECK(roles.partner == (roles.main + half) % n); // TF's group_1_main_device
    }
    CHECK(mains.size() == n);
    // Every device is a partner too, except with odd n the last of the
    // larger second half, whose position the first half lacks.
    CHECK(partners.size() == (n % 2 == 0 ? n : n - 1));
    CHECK(partners.count(n - 1) == (n % 2 == 0 ? 1 : 0));
  }
  // Seven devices: halves {0, 1, 2} and {3, 4, 5, 6}.
  CHECK(detail::hierarchical_roles(2, 7).partner == 5);
  CHECK(detail::hierarchical_roles(5, 7).partner == 2);
  CHECK(detail::hierarchical_roles(6, 7).partner == 0);
  CHECK(detail::hierarchical_roles(9, 7).partner == 5);
}

// -- the order of operations ----------------------------------------------------------

TEST_CASE("each half is combined in device order, then the first half with the second") {
  // float32: 1e8 + 1 rounds to 1e8. Halves {1e8, 1} and {-1e8, 1} give
  // 1e8 + -1e8 = 0; adding in replica order would give 1.
  hierarchical_copy ops{0};
  const auto value = floats({1e8f, 1.0f, -1e8f, 1.0f});
  CHECK(ops.reduce(reduce_op::sum, value, value)[3].at<float>(0) == 0.0f);
  CHECK(reduction_to_one_device{}.reduce(reduce_op::sum, value, value)[3].at<float>(0) == 1.0f);
  // Seven devices: halves {0, 1, 2} and {3, 4, 5, 6}.
  const auto seven = floats({1e8f, 1.0f, 1.0f, -1e8f, 1.0f, 1.0f, 1.0f});
  CHECK(ops.reduce(reduce_op::sum, seven, seven)[0].at<float>(0) == 0.0f);
  // The same for every main device: a batch rotates it through all seven.
  std::vector<reduce_pair> pairs(7, reduce_pair{seven, seven});
  for (const auto& result : ops.batch_reduce(reduce_op::sum, pairs))
    for (const auto& x : result.values())
      CHECK(x.at<float>(0) == 0.0f);
}

TEST_CASE("MIN and MAX keep the first half's of equal values, whichever device is main") {
  // +0 and -0 compare equal: the first half's zero wins for every rotation.
  for (int n : {2, 3, 4, 7}) {
    CAPTURE(n);
    std::vector<float> zeros(static_cast<std::size_t>(n), -0.0f);
    for (int r = 0; r < n / 2; ++r)
      zeros[static_cast<std::size_t>(r)] = 0.0f;
    const auto value = floats(zeros);
    std::vector<reduce_pair> pairs(static_cast<std::size_t>(2 * n), reduce_pair{value, value});
    for (auto op : {reduce_op::min, reduce_op::max})
      for (const auto& result : hierarchical_copy{0}.batch_reduce(op, pairs))
        for (const auto& x : result.values()) {
          CHECK(x.at<float>(0) == 0.0f);
          CHECK_FALSE(std::signbit(x.at<float>(0)));
        }
  }
}

// -- packing -------------------------------------------------------------------------

TEST_CASE("packing a batch gives the results of reducing it one by one, bit for bit") {
  const std::vector<shape_t> shapes{{2, 3}, {}, {7}, {0}, {13, 1}, {4, 5, 6}, {1}, {70000}};
  for (int n : world_sizes)
    for (std::size_t packs : {1, 3, 5, 1000}) {
      for (auto op : all_ops) {
        INFO("n ", n, ", num_packs ", packs, ", op ", to_string(op));
        // One dtype, and then four dtypes in runs.
        std::vector<reduce_pair> same_dtype;
        std::vector<reduce_pair> mixed;
        for (std::size_t k = 0; k < shapes.size(); ++k) {
          const auto value = shaped(dtype::f32, shapes[k], n, static_cast<int>(k));
          same_dtype.push_back({value, value});
          const auto type = all_dtypes[(k / 2) % 4];
          const auto other = shaped(type, shapes[k], n, static_cast<int>(k));
          mixed.push_back({other, other});
        }
        for (const auto& pairs : {same_dtype, mixed}) {
          const auto packed = hierarchical_copy{packs}.batch_reduce(op, pairs);
          hierarchical_copy single{0};
          REQUIRE(packed.size() == pairs.size());
          for (std::size_t k = 0; k < pairs.size(); ++k) {
            CAPTURE(k);
            const auto alone = single.reduce(op, pairs[k].value, pairs[k].destination);
            REQUIRE(packed[k].size() == alone.size());
            for (std::size_t d = 0; d < alone.size(); ++d) {
              CHECK(same_bytes(packed[k][d], alone[d]));
              CHECK(packed[k][d].shape() == pairs[k].value.primary().shape());
            }
            if (n > 1)
              check_placement(packed[k], pairs[k].value, n);
          }
        }
      }
    }
}

TEST_CASE("packing a batch with closed-form values: one dtype, counts not divisible") {
  for (int n : world_sizes)
    for (std::size_t packs : {1, 3})
      for (auto op : all_ops) {
        INFO("n ", n, ", num_packs ", packs, ", op ", to_string(op));
        std::vector<reduce_pair> pairs;
        for (auto count : element_counts) {
          const auto value = components(op, dtype::i32, count, n);
          pairs.push_back({value, value});
        }
        const auto batch = hierarchical_copy{packs}.batch_reduce(op, pairs);
        REQUIRE(batch.size() == pairs.size());
        for (std::size_t k = 0; k < pairs.size(); ++k)
          for (const auto& x : batch[k].values())
            check_elements(x, op, dtype::i32, element_counts[k], n);
      }
}

// -- one device, fallback --------------------------------------------------------------

TEST_CASE("one device is the identity, packed or not") {
  for (std::size_t packs : {0, 1, 3}) {
    CAPTURE(packs);
    hierarchical_copy ops{packs};
    const auto a = components(reduce_op::sum, dtype::f64, 7, 1);
    const auto b = components(reduce_op::sum, dtype::i32, 13, 1);
    for (auto op : all_ops) {
      CHECK(ops.reduce(op, a, a)[0].same_buffer(a[0]));
      const auto batch = ops.batch_reduce(op, {{a, a}, {b, b}});
      REQUIRE(batch.size() == 2);
      CHECK(batch[0][0].same_buffer(a[0]));
      CHECK(batch[1][0].same_buffer(b[0]));
    }
  }
}

TEST_CASE("components that are not one per destination device reduce to one device") {
  // The float32 values of the order test: hierarchical_copy gives 0,
  // reduction_to_one_device 1.
  hierarchical_copy ops{1};
  const auto value = floats({1e8f, 1.0f, -1e8f, 1.0f});
  // One destination elsewhere.
  const auto elsewhere = ops.reduce(reduce_op::sum, value, "/cpu:6");
  REQUIRE(elsewhere.size() == 1);
  CHECK(elsewhere[0].device() == cpu_device(6));
  CHECK(elsewhere[0].at<float>(0) == 1.0f);
  // The destinations in another order.
  const auto reversed = per_device({tensor::zeros(dtype::f32, {1}, cpu_device(3)),
                                    tensor::zeros(dtype::f32, {1}, cpu_device(2)),
                                    tensor::zeros(dtype::f32, {1}, cpu_device(1)),
                                    tensor::zeros(dtype::f32, {1}, cpu_device(0))});
  const auto result = ops.reduce(reduce_op::sum, value, reversed);
  REQUIRE(result.size() == 4);
  for (std::size_t d = 0; d < 4; ++d) {
    CHECK(result[d].device() == cpu_device(3 - static_cast<int>(d)));
    CHECK(result[d].at<float>(0) == 1.0f);
  }
  // Two components on one device.
  const auto crowded = per_device({tensor::scalar(1e8f, cpu_device(0)), tensor::scalar(1.0f, cpu_device(0)),
                                   tensor::scalar(-1e8f, cpu_device(1)), tensor::scalar(1.0f, cpu_device(2))});
  CHECK(ops.reduce(reduce_op::sum, crowded, crowded)[0].at<float>(0) == 1.0f);
  // A batch with one such pair is reduced pair by pair: the others still
  // take the hierarchical path.
  const auto batch = ops.batch_reduce(reduce_op::sum, {{value, value}, {value, "/cpu:6"}});
  REQUIRE(batch.size() == 2);
  CHECK(batch[0][0].at<float>(0) == 0.0f);
  CHECK(batch[1][0].at<float>(0) == 1.0f);
  // Pairs on different device lists, each one per device: pair by pair too.
  const auto three = floats({1.0f, 2.0f, 3.0f});
  const auto mixed = ops.batch_reduce(reduce_op::max, {{value, value}, {three, three}});
  REQUIRE(mixed.size() == 2);
  CHECK(mixed[0].size() == 4);
  CHECK(mixed[0][0].at<float>(0) == 1e8f);
  REQUIRE(mixed[1].size() == 3);
  for (const auto& x : mixed[1].values())
    CHECK(x.at<float>(0) == 3.0f);
}

// -- validation -----------------------------------------------------------------------

TEST_CASE("the shared validation applies") {
  hierarchical_copy ops;
  const auto value = components(reduce_op::sum, dtype::f32, 7, 2);
  CHECK(ops.name() == "hierarchical_copy");
  CHECK(error_of<value_error>([&] { (void) ops.reduce(reduce_op::sum, value, ""); })
        == "destinations can not be empty");
  CHECK(error_of<value_error>([&] {
          (void) ops.batch_reduce(reduce_op::max, {reduce_pair{value, value}, reduce_pair{value, ""}});
        })
        == "destinations can not be empty");
  CHECK(error_of<value_error>(
          [&] { (void) ops.reduce(reduce_op::prod, per_replica<tensor>{}, "/cpu:0"); })
        == "cannot reduce a per_replica value without components");
  const auto mixed_types = per_device({tensor::zeros(dtype::f32, {7}, cpu_device(0)),
                                       tensor::zeros(dtype::i32, {7}, cpu_device(1))});
  CHECK(error_of<dtype_error>([&] { (void) ops.reduce(reduce_op::min, mixed_types, mixed_types); })
        == "cannot reduce across replicas: replica 0 has dtype float32 but replica 1 has dtype int32");
  const auto mixed_shapes = per_device({tensor::zeros(dtype::f32, {2, 3}, cpu_device(0)),
                                        tensor::zeros(dtype::f32, {3, 2}, cpu_device(1))});
  CHECK(error_of<shape_error>([&] {
          (void) ops.batch_reduce(reduce_op::sum, {reduce_pair{value, value}, reduce_pair{mixed_shapes, mixed_shapes}});
        })
        == "cannot reduce across replicas: replica 0 has shape [2, 3] but replica 1 has shape [3, 2]");
  CHECK(ops.batch_reduce(reduce_op::sum, {}).empty());
}
