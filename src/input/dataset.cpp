// The non-template parts of dataset<T>: argument checks, the sources
// (from_tensor_slices, range), stacking for batch, and the shuffle generator.

#include "lockstep/dataset.hpp"
#include "lockstep/runtime_options.hpp"

#include <cstring>
#include <limits>
#include <string>
#include <string_view>

namespace lockstep::detail {

namespace {

std::string str(std::int64_t x) {
  return std::to_string(x);
}

/// One step of splitmix64: a well-mixed 64-bit value from a counter.
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t state = a;
  std::uint64_t h = splitmix64(state);
  state = h ^ b;
  return splitmix64(state);
}

/// Row `row` of `x` (dimension 0 removed) as a new tensor on x's device.
tensor slice_row(const tensor& x, std::int64_t row) {
  shape_t row_shape(x.shape().begin() + 1, x.shape().end());
  auto out = tensor::uninitialized(x.dtype(), std::move(row_shape), x.device());
  const auto row_bytes = out.byte_size();
  if (row_bytes != 0)
    std::memcpy(out.raw_data(),
                static_cast<const std::byte*>(x.raw_data()) + static_cast<std::size_t>(row) * row_bytes,
                row_bytes);
  return out;
}

void check_sliceable(const tensor& x, std::size_t component) {
  if (x.rank() == 0)
    throw value_error("from_tensor_slices: component " + std::to_string(component)
                      + " is a scalar (shape []); slicing needs at least one dimension");
}

/// Stacks `elements` along a new dimension 0. `component`: empty, or the
/// leaf's position in a nest, for messages.
tensor stack_tensors(const std::vector<tensor>& elements, const std::string& component) {
  const std::string where = component.empty() ? "batch: " : "batch: component " + component + ": ";
  if (elements.empty())
    throw value_error(where + "no elements to stack");
  const tensor& first = elements.front();
  for (std::size_t i = 1; i < elements.size(); ++i) {
    const tensor& x = elements[i];
    if (x.dtype() != first.dtype())
      throw dtype_error(where + "cannot stack element " + std::to_string(i) + " of dtype "
                        + std::string(to_string(x.dtype())) + " with element 0 of dtype "
                        + std::string(to_string(first.dtype()))
                        + "; the elements of a batch must have one dtype");
    if (x.shape() != first.shape())
      throw shape_error(where + "cannot stack element " + std::to_string(i) + " of shape "
                        + shape_to_string(x.shape()) + " with element 0 of shape "
                        + shape_to_string(first.shape())
                        + "; the elements of a batch must have one shape");
  }
  shape_t shape{static_cast<std::int64_t>(elements.size())};
  shape.insert(shape.end(), first.shape().begin(), first.shape().end());
  auto out = tensor::uninitialized(first.dtype(), std::move(shape), first.device());
  const auto element_bytes = first.byte_size();
  auto* destination = static_cast<std::byte*>(out.raw_data());
  for (const tensor& x : elements) {
    if (element_bytes != 0)
      std::memcpy(destination, x.raw_data(), element_bytes);
    destination += element_bytes;
  }
  return out;
}

// -- sources ------------------------------------------------------------------------

class tensor_slices final : public stage<tensor> {
public:
  explicit tensor_slices(tensor components) : components_(std::move(components)) {
    check_sliceable(components_, 0);
  }

  std::unique_ptr<source<tensor>> open(const iteration_key&) const override {
    return std::make_unique<rows>(components_);
  }

private:
  class rows final : public source<tensor> {
  public:
    explicit rows(tensor components) : components_(std::move(components)) {}

    std::optional<tensor> next() override {
      if (row_ >= components_.shape()[0])
        return std::nullopt;
      return slice_row(components_, row_++);
    }

  private:
    tensor components_;
    std::int64_t row_ = 0;
  };

  tensor components_;
};

class nest_slices final : public stage<nest<tensor>> {
public:
  explicit nest_slices(nest<tensor> components)
    : structure_(std::move(components)), leaves_(structure_.flatten()) {
    if (leaves_.empty())
      throw value_error("from_tensor_slices: the structure " + structure_.structure_string()
                        + " has no tensors");
    for (std::size_t i = 0; i < leaves_.size(); ++i) {
      check_sliceable(leaves_[i], i);
      if (leaves_[i].shape()[0] != leaves_[0].shape()[0])
        throw value_error(
          "from_tensor_slices: all components must have the same size in dimension 0, but "
          "component 0 has shape "
          + shape_to_string(leaves_[0].shape()) + " and component " + std::to_string(i)
          + " has shape " + shape_to_string(leaves_[i].shape()));
    }
  }

  std::unique_ptr<source<nest<tensor>>> open(const iteration_key&) const override {
    return std::make_unique<rows>(structure_, leaves_);
  }

private:
  class rows final : public source<nest<tensor>> {
  public:
    rows(nest<tensor> structure, std::vector<tensor> leaves)
      : structure_(std::move(structure)), leaves_(std::move(leaves)) {}

    std::optional<nest<tensor>> next() override {
      if (row_ >= leaves_[0].shape()[0])
        return std::nullopt;
      std::vector<tensor> slices;
      slices.reserve(leaves_.size());
      for (const auto& leaf : leaves_)
        slices.push_back(slice_row(leaf, row_));
      ++row_;
      return structure_.pack(slices);
    }

  private:
    nest<tensor> structure_;
    std::vector<tensor> leaves_;
    std::int64_t row_ = 0;
  };

  nest<tensor> structure_;
  std::vector<tensor> leaves_;
};

class range_source final : public stage<std::int64_t> {
public:
  range_source(std::int64_t start, std::int64_t stop, std::int64_t step)
    : start_(start), stop_(stop), step_(step) {
    if (step == 0)
      throw value_error("range: step must be a non-zero integer.");
  }

  std::unique_ptr<source<std::int64_t>> open(const iteration_key&) const override {
    return std::make_unique<counter>(start_, stop_, step_);
  }

private:
  class counter final : public source<std::int64_t> {
  public:
    counter(std::int64_t start, std::int64_t stop, std::int64_t step)
      : next_(start), stop_(stop), step_(step) {}

    std::optional<std::int64_t> next() override {
      if (done_ || (step_ > 0 ? next_ >= stop_ : next_ <= stop_))
        return std::nullopt;
      const auto value = next_;
      // Past the int64 range the sequence has ended anyway.
      done_ = __builtin_add_overflow(next_, step_, &next_);
      return value;
    }

  private:
    std::int64_t next_;
    std::int64_t stop_;
    std::int64_t step_;
    bool done_ = false;
  };

  std::int64_t start_;
  std::int64_t stop_;
  std::int64_t step_;
};

} // namespace

// -- keys and checks ----------------------------------------------------------------

iteration_key repetition_key(const iteration_key& key, std::uint64_t pass) {
  if (pass == 0 || !key.epoch)
    return key;
  return iteration_key{mix(*key.epoch, pass)};
}

void check_batch_size(std::int64_t batch_size) {
  if (batch_size <= 0)
    throw value_error("batch: batch_size must be greater than zero (currently batch_size = "
                      + str(batch_size) + ").");
}

void check_shuffle_buffer_size(std::int64_t buffer_size) {
  if (buffer_size <= 0)
    throw value_error("shuffle: buffer_size must be greater than zero (currently buffer_size = "
                      + str(buffer_size) + ").");
}

void check_prefetch(std::int64_t buffer_size, std::optional<std::chrono::milliseconds> timeout) {
  if (buffer_size <= 0)
    throw value_error("prefetch: buffer_size must be greater than zero (currently buffer_size = "
                      + str(buffer_size) + "); AUTOTUNE (-1) is not supported.");
  if (timeout && (timeout->count() <= 0 || *timeout > runtime_options::max_timeout))
    throw value_error("prefetch: the timeout must be positive and at most "
                      + str(runtime_options::max_timeout.count()) + " ms (currently "
                      + str(timeout->count()) + " ms).");
}

void check_count(const char* operation, std::int64_t count) {
  if (count < 0)
    throw value_error(std::string(operation) + ": count must not be negative (currently count = "
                      + str(count) + ")"
                      + (std::string_view{operation} == "repeat"
                           ? "; use repeat() to repeat forever."
                           : "; to keep every element, leave out take."));
}

void check_shard(std::int64_t num_shards, std::int64_t index) {
  if (num_shards <= 0)
    throw value_error("shard: Number of shards must be greater than zero (currently num_shards = "
                      + str(num_shards) + ").");
  if (index < 0 || index >= num_shards)
    throw value_error("shard: Index must be between 0 and " + str(num_shards - 1)
                      + " (currently index = " + str(index) + ").");
}

// -- sources ------------------------------------------------------------------------

std::shared_ptr<const stage<tensor>> tensor_slices_stage(const tensor& components) {
  return std::make_shared<tensor_slices>(components);
}

std::shared_ptr<const stage<nest<tensor>>> nest_slices_stage(const nest<tensor>& components) {
  return std::make_shared<nest_slices>(components);
}

std::shared_ptr<const stage<std::int64_t>> range_stage(std::int64_t start, std::int64_t stop,
                                                       std::int64_t step) {
  return std::make_shared<range_source>(start, stop, step);
}

// -- batching -----------------------------------------------------------------------

tensor stack_elements(const std::vector<tensor>& elements) {
  return stack_tensors(elements, {});
}

nest<tensor> stack_elements(const std::vector<nest<tensor>>& elements) {
  if (elements.empty())
    throw value_error("batch: no elements to stack");
  const auto& first = elements.front();
  for (std::size_t i = 1; i < elements.size(); ++i)
    if (!elements[i].same_structure(first))
      throw value_error("batch: cannot stack element " + std::to_string(i) + " of structure "
                        + elements[i].structure_string() + " with element 0 of structure "
                        + first.structure_string()
                        + "; the elements of a batch must have one structure");
  std::vector<std::vector<tensor>> columns;
  for (const auto& element : elements) {
    auto leaves = element.flatten();
    columns.resize(leaves.size());
    for (std::size_t leaf = 0; leaf < leaves.size(); ++leaf)
      columns[leaf].push_back(std::move(leaves[leaf]));
  }
  std::vector<tensor> stacked;
  stacked.reserve(columns.size());
  for (std::size_t leaf = 0; leaf < columns.size(); ++leaf)
    stacked.push_back(stack_tensors(columns[leaf], std::to_string(leaf)));
  return first.pack(stacked);
}

// -- shuffle_random -----------------------------------------------------------------

shuffle_random::shuffle_random(std::uint64_t seed, std::uint64_t iteration) {
  std::uint64_t state = mix(seed, iteration);
  for (auto& word : state_)
    word = splitmix64(state);
}

std::size_t shuffle_random::below(std::size_t bound) {
  // xoshiro256**, then rejection of the top values that would bias the
  // remainder.
  const auto next = [this] {
    const auto rotl = [](std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  };
  const std::uint64_t n = bound;
  const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max()
                              - std::numeric_limits<std::uint64_t>::max() % n;
  std::uint64_t x = next();
  while (x >= limit)
    x = next();
  return static_cast<std::size_t>(x % n);
}

} // namespace lockstep::detail
