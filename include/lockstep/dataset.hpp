#pragma once

// dataset<T>: an input pipeline in the model of tf.data. A dataset is a
// cheap, immutable description (a chain of stages held by shared pointers);
// copying it copies the handle. Iterating it opens a fresh iteration of every
// stage, so two loops over one dataset see the data from the start.
//
// Stages are type-erased (a virtual `source<T>::next()` per open iteration);
// the work that does not depend on the element type (slicing, stacking,
// the shuffle generator, the input actor behind `prefetch`) lives in
// src/dataset*.cpp and actors/input_actor.cpp. The stages themselves are in
// lockstep/detail/dataset_stages.hpp: this header is the API.

#include "lockstep/error.hpp"
#include "lockstep/input_context.hpp"
#include "lockstep/nest.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/detail/dataset_stages.hpp"

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace lockstep {

template <class T>
class dataset;

// -- iteration --------------------------------------------------------------------

/// One pass over a dataset, from its first element. Move-only; `next()`
/// and range-for may be mixed (both consume the same elements). Not for use
/// from several threads at once.
template <class T>
class dataset_iterator {
public:
  /// A std::input_iterator over the elements `dataset_iterator::next` has
  /// not returned yet. Copies share one position.
  class input_iterator {
  public:
    using iterator_concept = std::input_iterator_tag;
    using iterator_category = std::input_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using reference = T&;

    /// An iterator at the end of the data.
    input_iterator() = default;

    /// The current element; valid until the next increment.
    T& operator*() const { return *cursor_->current; }

    /// The current element's address; valid until the next increment.
    T* operator->() const { return &*cursor_->current; }

    /// Reads the next element (exceptions from the pipeline propagate).
    input_iterator& operator++() {
      cursor_->current = cursor_->source->next();
      return *this;
    }
    /// As the prefix increment (an input iterator's copy would share the position).
    void operator++(int) { ++*this; }

    /// True at the end of the data.
    friend bool operator==(const input_iterator& it, std::default_sentinel_t) {
      return !it.cursor_ || !it.cursor_->current;
    }

  private:
    friend class dataset_iterator;

    struct cursor {
      std::shared_ptr<detail::source<T>> source;
      std::optional<T> current;
    };

    explicit input_iterator(std::shared_ptr<detail::source<T>> source)
      : cursor_(std::make_shared<cursor>(cursor{std::move(source), std::nullopt})) {
      ++*this;
    }

    std::shared_ptr<cursor> cursor_;
  };

  /// The next element, or an empty optional at the end of the data (and on
  /// every call after it). Exceptions from the pipeline (a map function, a
  /// batch of disagreeing shapes, a prefetch timeout) propagate.
  std::optional<T> next() { return source_->next(); }

  /// Reads the next element and points at it; the end of the data compares
  /// equal to `end()`.
  input_iterator begin() { return input_iterator{source_}; }

  /// The end of the data, for range-for.
  std::default_sentinel_t end() const noexcept { return {}; }

private:
  // Opened by dataset::make_iterator, and by distributed_iterator over its steps.
  template <class U>
  friend class dataset;
  template <distributable U>
  friend class distributed_iterator;

  /// A pass over `source`.
  explicit dataset_iterator(std::unique_ptr<detail::source<T>> source)
    : source_(std::move(source)) {}

  std::shared_ptr<detail::source<T>> source_;
};

// -- dataset ----------------------------------------------------------------------

/// A tf.data-style input pipeline whose elements are `T` (tensor,
/// nest<tensor>, std::int64_t, or whatever a `map` returns). Immutable:
/// every transformation returns a new dataset and leaves this one as it is.
///
///     auto ds = dataset<nest<tensor>>::from_tensor_slices(nest<tensor>{images, labels})
///                 .shuffle(10'000, seed).batch(64, true).prefetch(2);
///     for (auto& batch : ds.make_iterator(epoch)) ...
///
/// Each range-for (and `make_iterator()`) starts a fresh pass. Reshuffling
/// stages order such a pass by how many passes they opened before (TF's
/// behaviour); `make_iterator(epoch)` instead makes every shuffle's order a
/// pure function of its seed and `epoch`, whatever ran before.
template <class T>
class dataset {
public:
  /// The type of one element.
  using element_type = T;

  // -- sources ------------------------------------------------------------------

  /// Element i is `components`'s row i (TF's from_tensor_slices): a tensor
  /// of shape `components.shape()[1:]`. Throws value_error for a scalar.
  static dataset from_tensor_slices(const tensor& components)
    requires std::same_as<T, tensor>
  {
    return dataset{detail::tensor_slices_stage(components)};
  }

  /// Element i has `components`'s structure with every leaf replaced by that
  /// leaf's row i. All leaves must have the same size in dimension 0;
  /// otherwise value_error names the shapes.
  static dataset from_tensor_slices(const nest<tensor>& components)
    requires std::same_as<T, nest<tensor>>
  {
    return dataset{detail::nest_slices_stage(components)};
  }

  /// start, start + step, ... up to but excluding stop (Python's range).
  /// Throws value_error for a zero step.
  static dataset range(std::int64_t start, std::int64_t stop, std::int64_t step = 1)
    requires std::same_as<T, std::int64_t>
  {
    return dataset{detail::range_stage(start, stop, step)};
  }

  /// 0, 1, ..., stop - 1.
  static dataset range(std::int64_t stop)
    requires std::same_as<T, std::int64_t>
  {
    return range(0, stop, 1);
  }

  // -- transformations ------------------------------------------------------------

  /// `fn(element)` for every element. `fn` is copied into the dataset and
  /// called as a const object, from the thread that iterates (or from an
  /// input actor's thread, upstream of a prefetch); exceptions propagate to
  /// the consumer.
  template <class F>
  auto map(F fn) const -> dataset<std::decay_t<std::invoke_result_t<const F&, T&&>>> {
    using result = std::decay_t<std::invoke_result_t<const F&, T&&>>;
    return dataset<result>{std::make_shared<detail::map_stage<T, result>>(
      stage_, std::function<result(T)>{std::move(fn)})};
  }

  /// Groups `batch_size` consecutive elements and stacks them along a new
  /// dimension 0 (numbers become a 1-D tensor). The last batch holds the
  /// remaining elements, or is dropped if `drop_remainder`. Throws
  /// value_error unless batch_size > 0; iteration throws shape_error or
  /// dtype_error for elements that cannot be stacked.
  template <class Element = T>
  auto batch(std::int64_t batch_size, bool drop_remainder = false) const
    -> dataset<typename detail::batch_traits<Element>::type> {
    detail::check_batch_size(batch_size);
    using batch_type = typename detail::batch_traits<Element>::type;
    return dataset<batch_type>{std::make_shared<detail::batch_stage<Element>>(
      stage_, static_cast<std::size_t>(batch_size), drop_remainder)};
  }

  /// TF's buffer shuffle: fills a buffer of `buffer_size` elements, hands out
  /// a uniformly chosen one and refills its place from the input. The same
  /// seed gives the same order. With `reshuffle_each_iteration` (TF's
  /// default) pass k is ordered by (seed, k), where k is the epoch given to
  /// `make_iterator(epoch)`, or else the number of passes this shuffle opened
  /// before; without it every pass has one order. Throws value_error unless
  /// buffer_size > 0.
  dataset shuffle(std::int64_t buffer_size, std::uint64_t seed,
                  bool reshuffle_each_iteration = true) const {
    detail::check_shuffle_buffer_size(buffer_size);
    return dataset{std::make_shared<detail::shuffle_stage<T>>(
      stage_, static_cast<std::size_t>(buffer_size), seed, reshuffle_each_iteration)};
  }

  /// The elements `count` times over (0: none). Pass p > 0 of a pass
  /// started with an epoch reshuffles with an epoch derived from (epoch, p).
  /// Throws value_error for a negative count (use `repeat()` for TF's -1).
  dataset repeat(std::int64_t count) const {
    detail::check_count("repeat", count);
    return dataset{
      std::make_shared<detail::repeat_stage<T>>(stage_, static_cast<std::uint64_t>(count))};
  }

  /// The elements over and over; ends only if a pass is empty.
  dataset repeat() const {
    return dataset{std::make_shared<detail::repeat_stage<T>>(stage_, std::nullopt)};
  }

  /// Every `num_shards`-th element starting at element `index` (TF's shard).
  /// Throws value_error unless num_shards > 0 and 0 <= index < num_shards.
  dataset shard(std::int64_t num_shards, std::int64_t index) const {
    detail::check_shard(num_shards, index);
    return dataset{std::make_shared<detail::shard_stage<T>>(
      stage_, static_cast<std::uint64_t>(num_shards), static_cast<std::uint64_t>(index))};
  }

  /// At most the first `count` elements; never reads more from the input.
  /// Throws value_error for a negative count (TF's take(-1) is this dataset).
  dataset take(std::int64_t count) const {
    detail::check_count("take", count);
    return dataset{
      std::make_shared<detail::take_stage<T>>(stage_, static_cast<std::uint64_t>(count))};
  }

  /// The same elements, produced ahead of the consumer by an input actor on
  /// its own thread, at most `buffer_size` elements ahead. An exception in
  /// the input reaches the consumer with its type intact, after the elements
  /// before it. A consumer waits at most `timeout` (unset: the runtime
  /// options' timeout) for an element, then throws timeout_error. Throws
  /// value_error unless buffer_size > 0 (TF's AUTOTUNE is not supported) and
  /// a given timeout is positive.
  dataset prefetch(std::int64_t buffer_size,
                   std::optional<std::chrono::milliseconds> timeout = std::nullopt) const {
    detail::check_prefetch(buffer_size, timeout);
    return dataset{std::make_shared<detail::prefetch_stage<T>>(
      stage_, static_cast<std::size_t>(buffer_size), timeout)};
  }

  // -- iteration --------------------------------------------------------------------

  /// The size of dimension 0 of every element when it is known without
  /// iterating: `batch(n, true)` sets it to n, and shuffle, repeat, shard,
  /// take and prefetch keep it; sources, `map` and `batch(n, false)` leave
  /// it unknown (nullopt). experimental_distribute_dataset checks it.
  std::optional<std::int64_t> static_batch_size() const { return stage_->static_batch_size(); }

  /// A fresh pass; reshuffling stages count it as their next iteration.
  dataset_iterator<T> make_iterator() const {
    return dataset_iterator<T>{stage_->open(detail::iteration_key{})};
  }

  /// A fresh pass in which every reshuffling stage orders its elements by
  /// (its seed, `epoch`): the same epoch gives the same order every time.
  dataset_iterator<T> make_iterator(std::uint64_t epoch) const {
    return dataset_iterator<T>{stage_->open(detail::iteration_key{epoch})};
  }

  /// A fresh pass for range-for, as `make_iterator()`.
  typename dataset_iterator<T>::input_iterator begin() const { return make_iterator().begin(); }

  /// The end of the data, for range-for.
  std::default_sentinel_t end() const noexcept { return {}; }

private:
  // map and batch make datasets of other element types.
  template <class U>
  friend class dataset;

  /// A dataset whose elements come from `stage`.
  explicit dataset(std::shared_ptr<const detail::stage<T>> stage) : stage_(std::move(stage)) {}

  std::shared_ptr<const detail::stage<T>> stage_;
};

} // namespace lockstep
