// dataset<T>: sources, transformations and iteration of the input pipeline.
// The prefetch cases start the process's actor system (an input actor per
// iterator): suite 'replicas'. The prefetch_buffer cases drive the input
// actor's buffer from plain threads, without CAF, so that they can run under
// ThreadSanitizer (-tc='prefetch_buffer*'); every other case is
// deterministic and single-threaded.

#include "lockstep/dataset.hpp"

#include <doctest/doctest.h>

#include "input/prefetch_buffer.hpp"

#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/error.hpp"
#include "lockstep/nest.hpp"
#include "lockstep/tensor.hpp"

using namespace lockstep;
using namespace std::chrono_literals;

// Failed checks print sequences of numbers, not "{?}".
template <>
struct doctest::StringMaker<std::vector<std::int64_t>> {
  static doctest::String convert(const std::vector<std::int64_t>& xs) {
    std::string out = "{";
    for (std::size_t i = 0; i < xs.size(); ++i)
      out += (i ? ", " : "") + std::to_string(xs[i]);
    return (out + "}").c_str();
  }
};

namespace {

using ints = std::vector<std::int64_t>;

static_assert(std::input_iterator<dataset_iterator<tensor>::input_iterator>);
static_assert(std::input_iterator<dataset_iterator<std::int64_t>::input_iterator>);
static_assert(std::sentinel_for<std::default_sentinel_t, dataset_iterator<tensor>::input_iterator>);

/// Every element of one fresh pass, through range-for.
template <class T>
std::vector<T> collect(const dataset<T>& ds) {
  std::vector<T> out;
  for (auto& x : ds)
    out.push_back(x);
  return out;
}

/// Every element of `it`, through next().
template <class T>
std::vector<T> drain(dataset_iterator<T> it) {
  std::vector<T> out;
  while (auto x = it.next())
    out.push_back(std::move(*x));
  return out;
}

ints iota(std::int64_t begin, std::int64_t end) {
  ints out;
  for (auto i = begin; i < end; ++i)
    out.push_back(i);
  return out;
}

/// The elements of an int64 tensor, flat.
ints values_of(const tensor& t) {
  auto data = t.data<std::int64_t>();
  return {data.begin(), data.end()};
}

/// For each batch: its shape and its flat int64 values.
std::vector<std::pair<shape_t, ints>> batches_of(const dataset<tensor>& ds) {
  std::vector<std::pair<shape_t, ints>> out;
  for (auto& b : ds)
    out.emplace_back(b.shape(), values_of(b));
  return out;
}

bool is_permutation_of_iota(ints xs, std::int64_t n) {
  std::sort(xs.begin(), xs.end());
  return xs == iota(0, n);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The exception a test's map function throws: a type lockstep does not know.
struct input_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Waits (up to 10 s, polling) until `pred()` holds; returns whether it did.
template <class Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

} // namespace

// -- sources --------------------------------------------------------------------

TEST_CASE("range counts like Python's range") {
  using ds = dataset<std::int64_t>;
  CHECK(collect(ds::range(5)) == ints{0, 1, 2, 3, 4});
  CHECK(collect(ds::range(2, 10, 3)) == ints{2, 5, 8});
  CHECK(collect(ds::range(10, 2, -3)) == ints{10, 7, 4});
  CHECK(collect(ds::range(-2, 1)) == ints{-2, -1, 0});
  CHECK(collect(ds::range(3, 3)).empty());
  CHECK(collect(ds::range(5, 0)).empty());
  CHECK(collect(ds::range(0)).empty());
  constexpr auto max = std::numeric_limits<std::int64_t>::max();
  constexpr auto min = std::numeric_limits<std::int64_t>::min();
  CHECK(collect(ds::range(max - 2, max)) == ints{max - 2, max - 1});
  CHECK(collect(ds::range(max - 1, max, 5)) == ints{max - 1});
  CHECK(collect(ds::range(min + 1, min, -7)) == ints{min + 1});
  CHECK(error_of<value_error>([] { ds::range(0, 5, 0); })
        == "range: step must be a non-zero integer.");
}

TEST_CASE("from_tensor_slices of a tensor yields its rows as copies") {
  auto t = tensor::from<std::int32_t>({1, 2, 3, 4, 5, 6}, {3, 2});
  auto ds = dataset<tensor>::from_tensor_slices(t);
  auto rows = collect(ds);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0] == tensor::from<std::int32_t>({1, 2}));
  CHECK(rows[1] == tensor::from<std::int32_t>({3, 4}));
  CHECK(rows[2] == tensor::from<std::int32_t>({5, 6}));
  rows[0].data<std::int32_t>()[0] = 100; // a row is a copy
  CHECK(t.at<std::int32_t>(0) == 1);
  CHECK(collect(ds)[0] == tensor::from<std::int32_t>({1, 2}));

  // A 1-D tensor slices into scalars; a tensor with no rows into nothing.
  auto scalars = collect(dataset<tensor>::from_tensor_slices(tensor::from<double>({1.5, -2})));
  REQUIRE(scalars.size() == 2);
  CHECK(scalars[0] == tensor::scalar(1.5));
  CHECK(scalars[1] == tensor::scalar(-2.0));
  CHECK(collect(dataset<tensor>::from_tensor_slices(tensor::zeros(dtype::f32, {0, 4}))).empty());
  auto empty_rows = collect(dataset<tensor>::from_tensor_slices(tensor::zeros(dtype::f32, {2, 0})));
  REQUIRE(empty_rows.size() == 2);
  CHECK(empty_rows[1].shape() == shape_t{0});

  CHECK(error_of<value_error>([] { dataset<tensor>::from_tensor_slices(tensor::scalar(1.0f)); })
        == "from_tensor_slices: component 0 is a scalar (shape []); slicing needs at least one "
           "dimension");
}

TEST_CASE("from_tensor_slices of a nest slices every leaf and keeps the structure") {
  using tn = nest<tensor>;
  auto images = tensor::from<float>({0, 1, 2, 3, 4, 5}, {3, 2});
  auto labels = tensor::from<std::int64_t>({7, 8, 9});
  auto ds = dataset<tn>::from_tensor_slices(tn(tn::dict{{"image", tn(images)}, {"label", tn(labels)}}));
  auto elements = collect(ds);
  REQUIRE(elements.size() == 3);
  for (std::int64_t i = 0; i < 3; ++i) {
    const auto& e = elements[static_cast<std::size_t>(i)];
    REQUIRE(e.is_dict());
    CHECK(e["image"].leaf() == tensor::from<float>({float(2 * i), float(2 * i + 1)}));
    CHECK(e["label"].leaf() == tensor::scalar<std::int64_t>(7 + i));
  }
  auto pairs = collect(dataset<tn>::from_tensor_slices(tn{tn(images), tn(labels)}));
  REQUIRE(pairs.size() == 3);
  CHECK(pairs[2].structure_string() == "[*, *]");
  CHECK(pairs[2][1].leaf() == tensor::scalar<std::int64_t>(9));

  CHECK(error_of<value_error>([&] {
          dataset<tn>::from_tensor_slices(tn{tn(images), tn(tensor::zeros(dtype::i64, {4}))});
        })
        == "from_tensor_slices: all components must have the same size in dimension 0, but "
           "component 0 has shape [3, 2] and component 1 has shape [4]");
  CHECK(contains(error_of<value_error>([] { dataset<tn>::from_tensor_slices(tn(tn::list{})); }),
                 "has no tensors"));
  CHECK(contains(error_of<value_error>([&] {
                   dataset<tn>::from_tensor_slices(tn{tn(images), tn(tensor::scalar(1.0f))});
                 }),
                 "component 1 is a scalar"));
}

// -- iteration ---------------------------------------------------------------------

TEST_CASE("an iterator ends with an empty optional, every time it is asked") {
  auto it = dataset<std::int64_t>::range(2).make_iterator();
  CHECK(it.next() == 0);
  CHECK(it.next() == 1);
  CHECK_FALSE(it.next().has_value());
  CHECK_FALSE(it.next().has_value());
  auto empty = dataset<std::int64_t>::range(0).make_iterator();
  CHECK(empty.begin() == empty.end());
  CHECK_FALSE(empty.next().has_value());
}

TEST_CASE("every pass over a dataset starts from the first element") {
  auto ds = dataset<std::int64_t>::range(4);
  CHECK(collect(ds) == ints{0, 1, 2, 3});
  CHECK(collect(ds) == ints{0, 1, 2, 3});
  // Two passes open at once are independent.
  auto a = ds.make_iterator();
  auto b = ds.make_iterator();
  CHECK(a.next() == 0);
  CHECK(a.next() == 1);
  CHECK(b.next() == 0);
  CHECK(a.next() == 2);
  // next() and range-for over one iterator share its position.
  ints rest;
  for (auto x : a)
    rest.push_back(x);
  CHECK(rest == ints{3});
  CHECK(drain(std::move(b)) == ints{1, 2, 3});
  // A range-for over a fresh iterator (the form a training loop uses).
  ints epoch;
  for (auto& x : ds.make_iterator(3))
    epoch.push_back(x);
  CHECK(epoch == ints{0, 1, 2, 3});
}

TEST_CASE("an iterator outlives the dataset it came from") {
  auto it = dataset<std::int64_t>::range(3).map([](std::int64_t x) { return 10 * x; }).make_iterator();
  CHECK(drain(std::move(it)) == ints{0, 10, 20});
}

// -- map ---------------------------------------------------------------------------

TEST_CASE("map applies the function to every element and may change the type") {
  auto squares = dataset<std::int64_t>::range(5).map([](std::int64_t x) { return x * x; });
  CHECK(collect(squares) == ints{0, 1, 4, 9, 16});
  auto names = dataset<std::int64_t>::range(3).map([](std::int64_t x) { return "#" + std::to_string(x); });
  static_assert(std::is_same_v<decltype(names), dataset<std::string>>);
  CHECK(collect(names) == std::vector<std::string>{"#0", "#1", "#2"});
  auto tensors = dataset<std::int64_t>::range(2).map(
    [](const std::int64_t& x) { return tensor::from<float>({float(x), float(-x)}); });
  auto out = collect(tensors);
  REQUIRE(out.size() == 2);
  CHECK(out[1] == tensor::from<float>({1, -1}));
}

TEST_CASE("an exception in a map function reaches the consumer with its type") {
  auto ds = dataset<std::int64_t>::range(5).map([](std::int64_t x) {
    if (x == 2)
      throw input_failure("bad element 2");
    return x;
  });
  auto it = ds.make_iterator();
  CHECK(it.next() == 0);
  CHECK(it.next() == 1);
  CHECK(error_of<input_failure>([&] { it.next(); }) == "bad element 2");
  CHECK(it.next() == 3); // like tf.data, the pass goes on after a failed element
}

// -- batch -------------------------------------------------------------------------

TEST_CASE("batch groups 0, 1, 7 and 10 numbers into int64 tensors") {
  using batches = std::vector<std::pair<shape_t, ints>>;
  const auto batched = [](std::int64_t n, bool drop) {
    return batches_of(dataset<std::int64_t>::range(n).batch(3, drop));
  };
  CHECK(batched(0, false).empty());
  CHECK(batched(0, true).empty());
  CHECK(batched(1, false) == batches{{{1}, {0}}});
  CHECK(batched(1, true).empty());
  CHECK(batched(7, false) == batches{{{3}, {0, 1, 2}}, {{3}, {3, 4, 5}}, {{1}, {6}}});
  CHECK(batched(7, true) == batches{{{3}, {0, 1, 2}}, {{3}, {3, 4, 5}}});
  CHECK(batched(10, false)
        == batches{{{3}, {0, 1, 2}}, {{3}, {3, 4, 5}}, {{3}, {6, 7, 8}}, {{1}, {9}}});
  CHECK(batched(10, true) == batches{{{3}, {0, 1, 2}}, {{3}, {3, 4, 5}}, {{3}, {6, 7, 8}}});
  // A batch as large as the data, and larger.
  CHECK(batches_of(dataset<std::int64_t>::range(7).batch(7, true)) == batches{{{7}, iota(0, 7)}});
  CHECK(batches_of(dataset<std::int64_t>::range(7).batch(8, false)) == batches{{{7}, iota(0, 7)}});
  CHECK(batches_of(dataset<std::int64_t>::range(7).batch(8, true)).empty());
  CHECK(batches_of(dataset<std::int64_t>::range(3).batch(1))
        == batches{{{1}, {0}}, {{1}, {1}}, {{1}, {2}}});
}

TEST_CASE("batch stacks tensor elements along a new dimension 0") {
  for (std::int64_t n : {0, 1, 7, 10}) {
    CAPTURE(n);
    std::vector<std::int64_t> values(static_cast<std::size_t>(2 * n));
    std::iota(values.begin(), values.end(), 0);
    auto rows = dataset<tensor>::from_tensor_slices(tensor::from(values, {n, 2}));
    for (bool drop : {false, true}) {
      CAPTURE(drop);
      auto got = batches_of(rows.batch(4, drop));
      const std::int64_t full = n / 4;
      const std::int64_t rest = n % 4;
      REQUIRE(got.size() == static_cast<std::size_t>(full + (rest != 0 && !drop ? 1 : 0)));
      for (std::size_t b = 0; b < got.size(); ++b) {
        const std::int64_t size = std::int64_t(b) < full ? 4 : rest;
        CHECK(got[b].first == shape_t{size, 2});
        CHECK(got[b].second == iota(8 * std::int64_t(b), 8 * std::int64_t(b) + 2 * size));
      }
    }
  }
  auto floats = collect(dataset<tensor>::from_tensor_slices(tensor::from<float>({0.5f, 1.5f, 2.5f})).batch(2));
  REQUIRE(floats.size() == 2);
  CHECK(floats[0] == tensor::from<float>({0.5f, 1.5f}));
  CHECK(floats[1] == tensor::from<float>({2.5f}));
}

TEST_CASE("batch stacks each leaf of nest elements") {
  using tn = nest<tensor>;
  auto images = tensor::from<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {5, 2});
  auto labels = tensor::from<std::int64_t>({10, 11, 12, 13, 14});
  auto ds = dataset<tn>::from_tensor_slices(tn(tn::dict{{"x", tn(images)}, {"y", tn(labels)}}));
  auto batches = collect(ds.batch(2));
  REQUIRE(batches.size() == 3);
  CHECK(batches[0]["x"].leaf() == tensor::from<float>({0, 1, 2, 3}, {2, 2}));
  CHECK(batches[0]["y"].leaf() == tensor::from<std::int64_t>({10, 11}));
  CHECK(batches[2]["x"].leaf() == tensor::from<float>({8, 9}, {1, 2}));
  CHECK(batches[2]["y"].leaf() == tensor::from<std::int64_t>({14}));
  CHECK(collect(ds.batch(2, true)).size() == 2);
}

TEST_CASE("batch names the elements that cannot be stacked") {
  auto ragged = dataset<std::int64_t>::range(4).map([](std::int64_t x) {
    return tensor::zeros(dtype::f32, {x < 3 ? 2 : 3});
  });
  CHECK(error_of<shape_error>([&] { collect(ragged.batch(4)); })
        == "batch: cannot stack element 3 of shape [3] with element 0 of shape [2]; the elements "
           "of a batch must have one shape");
  // Only a batch that mixes shapes fails: [0, 1, 2] and [3] stack.
  auto split = batches_of(ragged.batch(3).map([](tensor b) {
    return tensor::from<std::int64_t>(std::vector<std::int64_t>(b.shape().begin(), b.shape().end()));
  }));
  CHECK(split == std::vector<std::pair<shape_t, ints>>{{{2}, {3, 2}}, {{2}, {1, 3}}});
  auto mixed = dataset<std::int64_t>::range(2).map([](std::int64_t x) {
    return x == 0 ? tensor::zeros(dtype::f32, {2}) : tensor::zeros(dtype::i32, {2});
  });
  CHECK(error_of<dtype_error>([&] { collect(mixed.batch(2)); })
        == "batch: cannot stack element 1 of dtype int32 with element 0 of dtype float32; the "
           "elements of a batch must have one dtype");
  using tn = nest<tensor>;
  auto leaf_shapes = dataset<std::int64_t>::range(2).map([](std::int64_t x) {
    return tn{tn(tensor::zeros(dtype::f32, {1})), tn(tensor::zeros(dtype::f32, {x + 1}))};
  });
  CHECK(error_of<shape_error>([&] { collect(leaf_shapes.batch(2)); })
        == "batch: component 1: cannot stack element 1 of shape [2] with element 0 of shape [1]; "
           "the elements of a batch must have one shape");
  auto structures = dataset<std::int64_t>::range(2).map([](std::int64_t x) {
    return x == 0 ? tn{tn(tensor::zeros(dtype::f32, {1}))}
                  : tn{tn(tensor::zeros(dtype::f32, {1})), tn(tensor::zeros(dtype::f32, {1}))};
  });
  CHECK(error_of<value_error>([&] { collect(structures.batch(2)); })
        == "batch: cannot stack element 1 of structure [*, *] with element 0 of structure [*]; "
           "the elements of a batch must have one structure");
}

TEST_CASE("batch rejects a batch size below one") {
  auto ds = dataset<std::int64_t>::range(3);
  CHECK(error_of<value_error>([&] { ds.batch(0); })
        == "batch: batch_size must be greater than zero (currently batch_size = 0).");
  CHECK(error_of<value_error>([&] { ds.batch(-2, true); })
        == "batch: batch_size must be greater than zero (currently batch_size = -2).");
}

// -- shuffle -----------------------------------------------------------------------

TEST_CASE("shuffle with one seed gives one order, a permutation of the input") {
  auto first = collect(dataset<std::int64_t>::range(100).shuffle(10, 42));
  auto again = collect(dataset<std::int64_t>::range(100).shuffle(10, 42));
  CHECK(first == again);
  CHECK(is_permutation_of_iota(first, 100));
  CHECK(first != iota(0, 100));
  // Another seed gives another order.
  auto other = collect(dataset<std::int64_t>::range(100).shuffle(10, 43));
  CHECK(is_permutation_of_iota(other, 100));
  CHECK(other != first);
  // The order is a fixed function of (seed, epoch) on every platform; the
  // training example's epochs rely on it.
  CHECK(drain(dataset<std::int64_t>::range(10).shuffle(4, 7).make_iterator(0))
        == ints{1, 0, 2, 4, 7, 8, 9, 6, 5, 3});
}

TEST_CASE("shuffle only moves an element within its buffer") {
  for (std::int64_t buffer : {1, 2, 5, 20, 200}) {
    CAPTURE(buffer);
    auto order = collect(dataset<std::int64_t>::range(50).shuffle(buffer, 3));
    REQUIRE(is_permutation_of_iota(order, 50));
    // Before output p the shuffle has read at most p + buffer + 1 elements.
    for (std::size_t p = 0; p < order.size(); ++p)
      CHECK(order[p] < std::int64_t(p) + buffer + 1);
    if (buffer == 1)
      CHECK(order == iota(0, 50));
  }
  CHECK(collect(dataset<std::int64_t>::range(0).shuffle(5, 1)).empty());
  CHECK(collect(dataset<std::int64_t>::range(1).shuffle(5, 1)) == ints{0});
}

TEST_CASE("shuffle reshuffles each pass; an epoch makes the order a pure function") {
  auto ds = dataset<std::int64_t>::range(30).shuffle(30, 9);
  auto pass0 = collect(ds);
  auto pass1 = collect(ds);
  CHECK(is_permutation_of_iota(pass1, 30));
  CHECK(pass0 != pass1);
  // Pass k of a fresh dataset is epoch k, whatever ran before.
  CHECK(drain(ds.make_iterator(0)) == pass0);
  CHECK(drain(ds.make_iterator(1)) == pass1);
  auto fresh = dataset<std::int64_t>::range(30).shuffle(30, 9);
  CHECK(drain(fresh.make_iterator(1)) == pass1);
  CHECK(drain(fresh.make_iterator(1)) == pass1);
  CHECK(collect(fresh) == pass0); // make_iterator(epoch) does not count as a pass
  auto epoch5 = drain(ds.make_iterator(5));
  CHECK(is_permutation_of_iota(epoch5, 30));
  CHECK(epoch5 != pass0);
  CHECK(epoch5 != pass1);
  // Downstream stages pass the epoch through.
  auto batched = ds.map([](std::int64_t x) { return x + 100; }).batch(30);
  auto b = drain(batched.make_iterator(5));
  REQUIRE(b.size() == 1);
  ints shifted = epoch5;
  for (auto& x : shifted)
    x += 100;
  CHECK(values_of(b[0]) == shifted);

  // Without reshuffling every pass has the order of epoch 0.
  auto fixed = dataset<std::int64_t>::range(30).shuffle(30, 9, false);
  CHECK(collect(fixed) == pass0);
  CHECK(collect(fixed) == pass0);
  CHECK(drain(fixed.make_iterator(5)) == pass0);
}

TEST_CASE("a repeated shuffle reshuffles every repetition, deterministically per epoch") {
  auto ds = dataset<std::int64_t>::range(20).shuffle(20, 5).repeat(3);
  auto epoch2 = drain(ds.make_iterator(2));
  REQUIRE(epoch2.size() == 60);
  ints p0(epoch2.begin(), epoch2.begin() + 20);
  ints p1(epoch2.begin() + 20, epoch2.begin() + 40);
  ints p2(epoch2.begin() + 40, epoch2.end());
  CHECK(is_permutation_of_iota(p0, 20));
  CHECK(is_permutation_of_iota(p1, 20));
  CHECK(is_permutation_of_iota(p2, 20));
  CHECK(p0 != p1);
  CHECK(p1 != p2);
  CHECK(p0 == drain(dataset<std::int64_t>::range(20).shuffle(20, 5).make_iterator(2)));
  CHECK(drain(ds.make_iterator(2)) == epoch2);
  // Implicit passes: every repetition opens the shuffle once more.
  auto implicit = collect(ds);
  ints q0(implicit.begin(), implicit.begin() + 20);
  ints q1(implicit.begin() + 20, implicit.begin() + 40);
  CHECK(q0 == drain(dataset<std::int64_t>::range(20).shuffle(20, 5).make_iterator(0)));
  CHECK(q1 == drain(dataset<std::int64_t>::range(20).shuffle(20, 5).make_iterator(1)));
}

TEST_CASE("shuffle rejects an empty buffer") {
  CHECK(error_of<value_error>([] { dataset<std::int64_t>::range(3).shuffle(0, 1); })
        == "shuffle: buffer_size must be greater than zero (currently buffer_size = 0).");
  CHECK(contains(error_of<value_error>([] { dataset<std::int64_t>::range(3).shuffle(-1, 1); }),
                 "currently buffer_size = -1"));
}

// -- shard ---------------------------------------------------------------------------

TEST_CASE("shard keeps every num_shards-th element from index") {
  auto ds = dataset<std::int64_t>::range(10);
  CHECK(collect(ds.shard(3, 0)) == ints{0, 3, 6, 9});
  CHECK(collect(ds.shard(3, 1)) == ints{1, 4, 7});
  CHECK(collect(ds.shard(3, 2)) == ints{2, 5, 8});
  CHECK(collect(ds.shard(1, 0)) == iota(0, 10));
  CHECK(collect(ds.shard(12, 11)).empty());
  CHECK(collect(ds.shard(12, 9)) == ints{9});
  // The shards of world sizes 1, 2, 3, 4 and 7 partition the data.
  for (std::int64_t n : {1, 2, 3, 4, 7}) {
    ints all;
    for (std::int64_t i = 0; i < n; ++i) {
      auto part = collect(ds.shard(n, i));
      all.insert(all.end(), part.begin(), part.end());
    }
    CHECK(is_permutation_of_iota(all, 10));
  }
}

TEST_CASE("shard then batch gives each worker its own batches") {
  using batches = std::vector<std::pair<shape_t, ints>>;
  auto ds = dataset<std::int64_t>::range(10);
  CHECK(batches_of(ds.shard(2, 0).batch(2)) == batches{{{2}, {0, 2}}, {{2}, {4, 6}}, {{1}, {8}}});
  CHECK(batches_of(ds.shard(2, 1).batch(2, true)) == batches{{{2}, {1, 3}}, {{2}, {5, 7}}});
  // Batching first shards whole batches.
  CHECK(batches_of(ds.batch(3).shard(2, 1)) == batches{{{3}, {3, 4, 5}}, {{1}, {9}}});
}

TEST_CASE("shard rejects arguments out of range, with TF's messages") {
  auto ds = dataset<std::int64_t>::range(10);
  CHECK(error_of<value_error>([&] { ds.shard(0, 0); })
        == "shard: Number of shards must be greater than zero (currently num_shards = 0).");
  CHECK(error_of<value_error>([&] { ds.shard(-3, 0); })
        == "shard: Number of shards must be greater than zero (currently num_shards = -3).");
  CHECK(error_of<value_error>([&] { ds.shard(3, 3); })
        == "shard: Index must be between 0 and 2 (currently index = 3).");
  CHECK(error_of<value_error>([&] { ds.shard(3, -1); })
        == "shard: Index must be between 0 and 2 (currently index = -1).");
}

// -- repeat and take -------------------------------------------------------------------

TEST_CASE("repeat and take") {
  auto ds = dataset<std::int64_t>::range(3);
  CHECK(collect(ds.repeat(2)) == ints{0, 1, 2, 0, 1, 2});
  CHECK(collect(ds.repeat(1)) == ints{0, 1, 2});
  CHECK(collect(ds.repeat(0)).empty());
  CHECK(collect(ds.repeat().take(7)) == ints{0, 1, 2, 0, 1, 2, 0});
  CHECK(collect(ds.take(0)).empty());
  CHECK(collect(ds.take(2)) == ints{0, 1});
  CHECK(collect(ds.take(100)) == ints{0, 1, 2});
  CHECK(collect(ds.take(2).repeat(2)) == ints{0, 1, 0, 1});
  CHECK(collect(ds.repeat(2).batch(4)).size() == 2);
  // An endless repeat of nothing ends, as in TF.
  CHECK(collect(dataset<std::int64_t>::range(0).repeat()).empty());
  CHECK(collect(ds.take(0).repeat()).empty());
}

TEST_CASE("take reads no more input than it returns") {
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto ds = dataset<std::int64_t>::range(100).map([reads](std::int64_t x) {
    ++*reads;
    return x;
  });
  CHECK(collect(ds.take(4)) == ints{0, 1, 2, 3});
  CHECK(*reads == 4);
}

TEST_CASE("repeat and take reject negative counts") {
  auto ds = dataset<std::int64_t>::range(3);
  CHECK(error_of<value_error>([&] { ds.repeat(-1); })
        == "repeat: count must not be negative (currently count = -1); use repeat() to repeat "
           "forever.");
  CHECK(error_of<value_error>([&] { ds.take(-1); })
        == "take: count must not be negative (currently count = -1); to keep every element, "
           "leave out take.");
}

// -- prefetch_buffer (no actor system) -----------------------------------------------------

namespace {

/// Records the thread that destroyed it.
struct destruction_probe {
  explicit destruction_probe(std::shared_ptr<std::atomic<std::thread::id>> where)
    : where_(std::move(where)) {}
  ~destruction_probe() { *where_ = std::this_thread::get_id(); }
  std::shared_ptr<std::atomic<std::thread::id>> where_;
};

} // namespace

TEST_CASE("prefetch_buffer hands elements, then the producer's exception, across threads") {
  auto next = std::make_shared<std::int64_t>(0);
  detail::prefetch_buffer buffer{[next]() -> std::shared_ptr<void> {
    if (*next == 100)
      throw input_failure("after 100");
    return std::make_shared<std::int64_t>((*next)++);
  }};
  std::thread producer{[&] {
    while (buffer.produce_one()) {
    }
  }};
  for (std::int64_t i = 0; i < 100; ++i) {
    auto x = buffer.take(10s);
    REQUIRE(x);
    CHECK(*static_cast<std::int64_t*>(x.get()) == i);
  }
  CHECK(error_of<input_failure>([&] { buffer.take(10s); }) == "after 100");
  CHECK(buffer.take(10s) == nullptr);
  producer.join();
  CHECK(buffer.produced() == 100);
  CHECK(buffer.cancel(10s));
  CHECK_FALSE(buffer.produce_one());
}

TEST_CASE("prefetch_buffer::cancel destroys the producer on the consumer's thread") {
  auto destroyed_on = std::make_shared<std::atomic<std::thread::id>>();
  auto entered = std::make_shared<std::atomic<bool>>(false);
  auto release = std::make_shared<std::atomic<bool>>(false);
  auto probe = std::make_shared<destruction_probe>(destroyed_on);
  detail::prefetch_buffer buffer{[probe = std::move(probe), entered, release]() -> std::shared_ptr<void> {
    *entered = true;
    while (!*release)
      std::this_thread::yield();
    return std::make_shared<int>(1);
  }};
  std::atomic<bool> more{true};
  std::thread producer{[&] { more = buffer.produce_one(); }};
  REQUIRE(eventually([&] { return entered->load(); }));
  std::thread releaser{[&] {
    std::this_thread::sleep_for(20ms);
    *release = true;
  }};
  CHECK(buffer.cancel(10s)); // waits for the running call, then destroys the producer here
  CHECK(destroyed_on->load() == std::this_thread::get_id());
  producer.join();
  releaser.join();
  CHECK_FALSE(more.load()); // the late element is dropped
  CHECK(buffer.produced() == 0);
}

TEST_CASE("prefetch_buffer::cancel leaves a stuck producer to the actor's thread") {
  auto destroyed_on = std::make_shared<std::atomic<std::thread::id>>();
  auto entered = std::make_shared<std::atomic<bool>>(false);
  auto release = std::make_shared<std::atomic<bool>>(false);
  auto probe = std::make_shared<destruction_probe>(destroyed_on);
  detail::prefetch_buffer buffer{[probe = std::move(probe), entered, release]() -> std::shared_ptr<void> {
    *entered = true;
    while (!*release)
      std::this_thread::yield();
    return std::make_shared<int>(1);
  }};
  std::thread::id producer_id;
  std::thread producer{[&] { buffer.produce_one(); }};
  producer_id = producer.get_id();
  REQUIRE(eventually([&] { return entered->load(); }));
  CHECK_FALSE(buffer.cancel(10ms)); // gives up: the producer is still running
  CHECK(destroyed_on->load() == std::thread::id{});
  *release = true;
  producer.join();
  CHECK(destroyed_on->load() == producer_id);
}

// -- prefetch ----------------------------------------------------------------------------

TEST_CASE("prefetch produces the same sequence as without it") {
  auto ds = dataset<std::int64_t>::range(200).map([](std::int64_t x) { return 3 * x + 1; });
  const auto expected = collect(ds);
  for (std::int64_t buffer : {1, 2, 3, 200, 1000}) {
    CAPTURE(buffer);
    CHECK(collect(ds.prefetch(buffer)) == expected);
  }
  CHECK(collect(dataset<std::int64_t>::range(0).prefetch(2)).empty());
  // Batches of nests, shuffled by epoch, and prefetching stacked on prefetching.
  using tn = nest<tensor>;
  auto pairs = dataset<tn>::from_tensor_slices(
                 tn{tn(tensor::from<float>(std::vector<float>(40, 0.5f), {20, 2})),
                    tn(tensor::from<std::int64_t>(iota(0, 20)))})
                 .shuffle(8, 11)
                 .batch(3);
  auto plain = drain(pairs.make_iterator(4));
  auto fetched = drain(pairs.prefetch(2).map([](tn x) { return x; }).prefetch(3).make_iterator(4));
  REQUIRE(fetched.size() == plain.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    CHECK(fetched[i][0].leaf() == plain[i][0].leaf());
    CHECK(fetched[i][1].leaf() == plain[i][1].leaf());
  }
}

TEST_CASE("prefetch fills at most buffer_size elements ahead of the consumer") {
  constexpr std::int64_t total = 40;
  constexpr std::int64_t ahead = 4;
  auto produced = std::make_shared<std::atomic<std::int64_t>>(0);
  auto ds = dataset<std::int64_t>::range(total)
              .map([produced](std::int64_t x) {
                ++*produced;
                return x;
              })
              .prefetch(ahead);
  auto it = ds.make_iterator();
  std::int64_t consumed = 0;
  for (;;) {
    // The input actor runs ahead until the buffer is full, and no further.
    const auto target = std::min(total, consumed + ahead);
    CHECK(eventually([&] { return *produced >= target; }));
    std::this_thread::sleep_for(2ms);
    CHECK(*produced == target);
    auto x = it.next();
    if (!x)
      break;
    CHECK(*x == consumed);
    ++consumed;
    CHECK(*produced <= consumed + ahead);
  }
  CHECK(consumed == total);
  CHECK(*produced == total);
}

TEST_CASE("prefetch delivers the elements before a producer exception, then the exception") {
  auto ds = dataset<std::int64_t>::range(10)
              .map([](std::int64_t x) {
                if (x == 5)
                  throw input_failure("element 5 is unreadable");
                return x;
              })
              .prefetch(3);
  auto it = ds.make_iterator();
  for (std::int64_t i = 0; i < 5; ++i)
    CHECK(it.next() == i);
  CHECK(error_of<input_failure>([&] { it.next(); }) == "element 5 is unreadable");
  CHECK_FALSE(it.next().has_value()); // the input actor stopped at the failure
  // lockstep's own errors keep their type too.
  auto stacking = dataset<std::int64_t>::range(2)
                    .map([](std::int64_t x) { return tensor::zeros(dtype::f32, {x + 1}); })
                    .batch(2)
                    .prefetch(1);
  CHECK(contains(error_of<shape_error>([&] { collect(stacking); }), "cannot stack element 1"));
}

TEST_CASE("prefetch waits for an element at most its timeout") {
  auto ds = dataset<std::int64_t>::range(3)
              .map([](std::int64_t x) {
                if (x == 1)
                  std::this_thread::sleep_for(300ms);
                return x;
              })
              .prefetch(1, 20ms);
  auto it = ds.make_iterator();
  CHECK(it.next() == 0);
  CHECK(contains(error_of<timeout_error>([&] { it.next(); }),
                 "prefetch: the input actor produced no element within 20 ms"));
}

TEST_CASE("a prefetching iterator can be dropped before its data ends") {
  auto produced = std::make_shared<std::atomic<std::int64_t>>(0);
  auto ds = dataset<std::int64_t>::range(5)
              .map([produced](std::int64_t x) {
                ++*produced;
                return x;
              })
              .repeat()
              .prefetch(2);
  for (int pass = 0; pass < 3; ++pass) {
    ints seen;
    for (auto x : ds) {
      seen.push_back(x);
      if (seen.size() == 7)
        break;
    }
    CHECK(seen == ints{0, 1, 2, 3, 4, 0, 1});
  }
  CHECK(*produced <= 3 * (7 + 2));
}

TEST_CASE("prefetch rejects an empty buffer and a timeout that is not positive") {
  auto ds = dataset<std::int64_t>::range(3);
  CHECK(error_of<value_error>([&] { ds.prefetch(0); })
        == "prefetch: buffer_size must be greater than zero (currently buffer_size = 0); "
           "AUTOTUNE (-1) is not supported.");
  CHECK(contains(error_of<value_error>([&] { ds.prefetch(-1); }), "currently buffer_size = -1"));
  CHECK(contains(error_of<value_error>([&] { ds.prefetch(1, 0ms); }), "currently 0 ms"));
}
