#pragma once

// The stages behind lockstep/dataset.hpp (sources, the stage classes that
// map, batch, shuffle, repeat, shard, take and prefetch) and their helpers:
// implementation, not API. dataset.hpp includes it.

#include "lockstep/error.hpp"
#include "lockstep/input_context.hpp"
#include "lockstep/nest.hpp"
#include "lockstep/tensor.hpp"

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

template <class T>
class dataset_iterator;

namespace detail {

// -- stages and sources -------------------------------------------------------

/// How an iteration was started. With an epoch (`make_iterator(e)`) every
/// reshuffling stage derives its order from (seed, epoch): a pure function.
/// Without one (range-for, `make_iterator()`) each reshuffling stage counts
/// its own iterations, as TF's seed generator does.
struct iteration_key {
  std::optional<std::uint64_t> epoch;
};

/// The key of pass `pass` of a repeat opened with `key`: pass 0 keeps the
/// key (so `repeat(1)` changes nothing), later passes with an epoch get a
/// derived epoch, later passes without one stay implicit.
iteration_key repetition_key(const iteration_key& key, std::uint64_t pass);

/// One open iteration of a stage.
template <class T>
class source {
public:
  virtual ~source() = default;

  /// The next element, or nothing at the end of the data (and on every call
  /// after that).
  virtual std::optional<T> next() = 0;
};

/// One stage of a dataset's description; it opens independent iterations.
template <class T>
class stage {
public:
  virtual ~stage() = default;

  /// A fresh iteration from the first element.
  virtual std::unique_ptr<source<T>> open(const iteration_key& key) const = 0;

  /// The size of dimension 0 of every element, when it is known without
  /// iterating (TF's static batch dimension): set by `batch(n, true)` and
  /// kept by the stages that pass elements through unchanged; nullopt
  /// otherwise.
  virtual std::optional<std::int64_t> static_batch_size() const { return std::nullopt; }
};

// -- argument checks (value_error with TF's messages) --------------------------

/// batch_size > 0.
void check_batch_size(std::int64_t batch_size);
/// buffer_size > 0.
void check_shuffle_buffer_size(std::int64_t buffer_size);
/// buffer_size > 0, and a given timeout in (0, runtime_options::max_timeout].
void check_prefetch(std::int64_t buffer_size, std::optional<std::chrono::milliseconds> timeout);
/// count >= 0 for `operation` ("repeat" or "take").
void check_count(const char* operation, std::int64_t count);
/// num_shards > 0 and 0 <= index < num_shards.
void check_shard(std::int64_t num_shards, std::int64_t index);

// -- sources (src/dataset.cpp) -------------------------------------------------

/// The rows of `components` (from_tensor_slices of a tensor).
std::shared_ptr<const stage<tensor>> tensor_slices_stage(const tensor& components);
/// The rows of every leaf of `components`, in its structure.
std::shared_ptr<const stage<nest<tensor>>> nest_slices_stage(const nest<tensor>& components);
/// start, start + step, ... before stop.
std::shared_ptr<const stage<std::int64_t>> range_stage(std::int64_t start, std::int64_t stop,
                                                       std::int64_t step);

// -- batching ------------------------------------------------------------------

/// Stacks `elements` along a new dimension 0. Throws dtype_error or
/// shape_error naming the first element that differs from element 0.
tensor stack_elements(const std::vector<tensor>& elements);

/// Stacks each leaf of `elements` along a new dimension 0; every element
/// must have element 0's structure (value_error), and each leaf's tensors
/// must agree as in the tensor overload (the message names the leaf).
nest<tensor> stack_elements(const std::vector<nest<tensor>>& elements);

/// The C++ element types of tensors.
template <class T>
concept tensor_element = std::same_as<T, float> || std::same_as<T, double>
                         || std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t>;

/// What `batch` makes of elements of type T: `type` and `stack`. Defined for
/// tensor, nest<tensor> and the tensor element types (a batch of numbers is
/// a 1-D tensor).
template <class T>
struct batch_traits;

template <>
struct batch_traits<tensor> {
  using type = tensor;
  static tensor stack(const std::vector<tensor>& elements) { return stack_elements(elements); }
};

template <>
struct batch_traits<nest<tensor>> {
  using type = nest<tensor>;
  static nest<tensor> stack(const std::vector<nest<tensor>>& elements) {
    return stack_elements(elements);
  }
};

template <tensor_element T>
struct batch_traits<T> {
  using type = tensor;
  static tensor stack(const std::vector<T>& elements) { return tensor::from(elements); }
};

// -- shuffling -----------------------------------------------------------------

/// The shuffle stage's generator (splitmix64-seeded xoshiro256**): the same
/// (seed, iteration) gives the same picks on every platform.
class shuffle_random {
public:
  shuffle_random(std::uint64_t seed, std::uint64_t iteration);

  /// A uniform index in [0, bound); bound > 0.
  std::size_t below(std::size_t bound);

private:
  std::uint64_t state_[4];
};

// -- prefetching ---------------------------------------------------------------

/// The consumer's end of an input actor that runs `produce` ahead of it
/// (actors/input_actor.hpp). Elements travel type-erased; a null element
/// is the end of the data.
class prefetch_channel {
public:
  /// Makes one element (a T behind the pointer); null at the end of the data.
  using producer = std::function<std::shared_ptr<void>()>;

  /// Starts an input actor that calls `produce` until `buffer_size` elements
  /// wait unconsumed. `timeout`: the longest wait in `next` (unset:
  /// get_runtime_options().timeout).
  prefetch_channel(std::size_t buffer_size, std::optional<std::chrono::milliseconds> timeout,
                   producer produce);

  /// Stops the actor: waits (at most the timeout) for an element being
  /// produced, then destroys the producer on this thread.
  ~prefetch_channel();

  /// Takes over `other`'s actor; `other` may then only be destroyed.
  prefetch_channel(prefetch_channel&& other) noexcept;
  /// Stops this channel's actor and takes over `other`'s.
  prefetch_channel& operator=(prefetch_channel&& other) noexcept;

  /// The next element; null at the end of the data. Rethrows the
  /// producer's exception (after the elements produced before it); throws
  /// timeout_error if none arrives within the timeout.
  std::shared_ptr<void> next();

  /// How many elements the actor produced that `next` has not returned yet.
  std::size_t ready() const;

  /// How many elements the actor produced in all.
  std::uint64_t produced() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Keeps the process's actor system alive while a prefetching dataset
/// exists, so that iterating it epoch after epoch reuses one system.
std::shared_ptr<void> input_runtime();

// -- transformation stages -------------------------------------------------------

/// `fn(element)` for every element of `upstream`.
template <class T, class U>
class map_stage final : public stage<U> {
public:
  using function = std::function<U(T)>;

  map_stage(std::shared_ptr<const stage<T>> upstream, function fn)
    : upstream_(std::move(upstream)), fn_(std::make_shared<const function>(std::move(fn))) {}

  std::unique_ptr<source<U>> open(const iteration_key& key) const override {
    return std::make_unique<mapped>(upstream_->open(key), fn_);
  }

private:
  // Shares the function with the stage: an iteration may outlive its dataset.
  class mapped final : public source<U> {
  public:
    mapped(std::unique_ptr<source<T>> upstream, std::shared_ptr<const function> fn)
      : upstream_(std::move(upstream)), fn_(std::move(fn)) {}

    std::optional<U> next() override {
      auto x = upstream_->next();
      if (!x)
        return std::nullopt;
      return (*fn_)(std::move(*x));
    }

  private:
    std::unique_ptr<source<T>> upstream_;
    std::shared_ptr<const function> fn_;
  };

  std::shared_ptr<const stage<T>> upstream_;
  std::shared_ptr<const function> fn_;
};

/// `batch_size` consecutive elements stacked by batch_traits<T>.
template <class T>
class batch_stage final : public stage<typename batch_traits<T>::type> {
public:
  using batch_type = typename batch_traits<T>::type;

  batch_stage(std::shared_ptr<const stage<T>> upstream, std::size_t batch_size,
              bool drop_remainder)
    : upstream_(std::move(upstream)), batch_size_(batch_size), drop_remainder_(drop_remainder) {}

  std::unique_ptr<source<batch_type>> open(const iteration_key& key) const override {
    return std::make_unique<batched>(upstream_->open(key), batch_size_, drop_remainder_);
  }

  /// `batch_size` when the remainder is dropped: every batch is full.
  std::optional<std::int64_t> static_batch_size() const override {
    if (!drop_remainder_)
      return std::nullopt;
    return static_cast<std::int64_t>(batch_size_);
  }

private:
  class batched final : public source<batch_type> {
  public:
    batched(std::unique_ptr<source<T>> upstream, std::size_t batch_size, bool drop_remainder)
      : upstream_(std::move(upstream)), batch_size_(batch_size), drop_remainder_(drop_remainder) {}

    std::optional<batch_type> next() override {
      std::vector<T> elements;
      elements.reserve(batch_size_);
      while (elements.size() < batch_size_) {
        auto x = upstream_->next();
        if (!x)
          break;
        elements.push_back(std::move(*x));
      }
      if (elements.empty() || (drop_remainder_ && elements.size() < batch_size_))
        return std::nullopt;
      return batch_traits<T>::stack(elements);
    }

  private:
    std::unique_ptr<source<T>> upstream_;
    std::size_t batch_size_;
    bool drop_remainder_;
  };

  std::shared_ptr<const stage<T>> upstream_;
  std::size_t batch_size_;
  bool drop_remainder_;
};

/// TF's buffer shuffle, ordered by (seed, iteration).
template <class T>
class shuffle_stage final : public stage<T> {
public:
  shuffle_stage(std::shared_ptr<const stage<T>> upstream, std::size_t buffer_size,
                std::uint64_t seed, bool reshuffle_each_iteration)
    : upstream_(std::move(upstream)),
      buffer_size_(buffer_size),
      seed_(seed),
      reshuffle_each_iteration_(reshuffle_each_iteration) {}

  std::unique_ptr<source<T>> open(const iteration_key& key) const override {
    std::uint64_t iteration = 0;
    if (reshuffle_each_iteration_)
      iteration = key.epoch ? *key.epoch : iterations_.fetch_add(1, std::memory_order_relaxed);
    return std::make_unique<shuffled>(upstream_->open(key), buffer_size_,
                                      shuffle_random{seed_, iteration});
  }

  std::optional<std::int64_t> static_batch_size() const override {
    return upstream_->static_batch_size();
  }

private:
  // TF's buffer shuffle: keep `buffer_size` elements, hand out a uniformly
  // chosen one and put the next input element in its place.
  class shuffled final : public source<T> {
  public:
    shuffled(std::unique_ptr<source<T>> upstream, std::size_t buffer_size, shuffle_random random)
      : upstream_(std::move(upstream)), buffer_size_(buffer_size), random_(random) {}

    std::optional<T> next() override {
      while (!upstream_done_ && buffer_.size() < buffer_size_) {
        auto x = upstream_->next();
        if (!x)
          upstream_done_ = true;
        else
          buffer_.push_back(std::move(*x));
      }
      if (buffer_.empty())
        return std::nullopt;
      const auto pick = random_.below(buffer_.size());
      std::optional<T> out{std::move(buffer_[pick])};
      std::optional<T> replacement;
      if (!upstream_done_) {
        replacement = upstream_->next();
        upstream_done_ = !replacement;
      }
      if (replacement) {
        buffer_[pick] = std::move(*replacement);
      } else {
        if (pick + 1 != buffer_.size())
          buffer_[pick] = std::move(buffer_.back());
        buffer_.pop_back();
      }
      return out;
    }

  private:
    std::unique_ptr<source<T>> upstream_;
    std::size_t buffer_size_;
    shuffle_random random_;
    std::vector<T> buffer_;
    bool upstream_done_ = false;
  };

  std::shared_ptr<const stage<T>> upstream_;
  std::size_t buffer_size_;
  std::uint64_t seed_;
  bool reshuffle_each_iteration_;
  mutable std::atomic<std::uint64_t> iterations_{0};
};

/// The elements of `upstream`, pass after pass.
template <class T>
class repeat_stage final : public stage<T> {
public:
  /// `count`: the number of passes; unset: forever.
  repeat_stage(std::shared_ptr<const stage<T>> upstream, std::optional<std::uint64_t> count)
    : upstream_(std::move(upstream)), count_(count) {}

  std::unique_ptr<source<T>> open(const iteration_key& key) const override {
    return std::make_unique<repeated>(upstream_, count_, key);
  }

  std::optional<std::int64_t> static_batch_size() const override {
    return upstream_->static_batch_size();
  }

private:
  class repeated final : public source<T> {
  public:
    repeated(std::shared_ptr<const stage<T>> upstream, std::optional<std::uint64_t> count,
             iteration_key key)
      : upstream_(std::move(upstream)), count_(count), key_(key) {}

    std::optional<T> next() override {
      for (;;) {
        if (!current_) {
          if (count_ && pass_ >= *count_)
            return std::nullopt;
          current_ = upstream_->open(repetition_key(key_, pass_));
          pass_has_elements_ = false;
        }
        if (auto x = current_->next()) {
          pass_has_elements_ = true;
          return x;
        }
        current_.reset();
        ++pass_;
        // An empty pass ends even an endless repeat, as in TF.
        if (!pass_has_elements_) {
          count_ = pass_;
          return std::nullopt;
        }
      }
    }

  private:
    std::shared_ptr<const stage<T>> upstream_;
    std::optional<std::uint64_t> count_;
    iteration_key key_;
    std::unique_ptr<source<T>> current_;
    std::uint64_t pass_ = 0;
    bool pass_has_elements_ = false;
  };

  std::shared_ptr<const stage<T>> upstream_;
  std::optional<std::uint64_t> count_;
};

/// Every `num_shards`-th element from `index`.
template <class T>
class shard_stage final : public stage<T> {
public:
  shard_stage(std::shared_ptr<const stage<T>> upstream, std::uint64_t num_shards,
              std::uint64_t index)
    : upstream_(std::move(upstream)), num_shards_(num_shards), index_(index) {}

  std::unique_ptr<source<T>> open(const iteration_key& key) const override {
    return std::make_unique<sharded>(upstream_->open(key), num_shards_, index_);
  }

  std::optional<std::int64_t> static_batch_size() const override {
    return upstream_->static_batch_size();
  }

private:
  class sharded final : public source<T> {
  public:
    sharded(std::unique_ptr<source<T>> upstream, std::uint64_t num_shards, std::uint64_t index)
      : upstream_(std::move(upstream)), num_shards_(num_shards), index_(index) {}

    std::optional<T> next() override {
      for (;;) {
        auto x = upstream_->next();
        if (!x)
          return std::nullopt;
        if (position_++ % num_shards_ == index_)
          return x;
      }
    }

  private:
    std::unique_ptr<source<T>> upstream_;
    std::uint64_t num_shards_;
    std::uint64_t index_;
    std::uint64_t position_ = 0;
  };

  std::shared_ptr<const stage<T>> upstream_;
  std::uint64_t num_shards_;
  std::uint64_t index_;
};

/// The first `count` elements.
template <class T>
class take_stage final : public stage<T> {
public:
  take_stage(std::shared_ptr<const stage<T>> upstream, std::uint64_t count)
    : upstream_(std::move(upstream)), count_(count) {}

  std::unique_ptr<source<T>> open(const iteration_key& key) const override {
    return std::make_unique<taken>(upstream_->open(key), count_);
  }

  std::optional<std::int64_t> static_batch_size() const override {
    return upstream_->static_batch_size();
  }

private:
  // Never asks upstream for more than `count` elements.
  class taken final : public source<T> {
  public:
    taken(std::unique_ptr<source<T>> upstream, std::uint64_t remaining)
      : upstream_(std::move(upstream)), remaining_(remaining) {}

    std::optional<T> next() override {
      if (remaining_ == 0)
        return std::nullopt;
      auto x = upstream_->next();
      remaining_ = x ? remaining_ - 1 : 0;
      return x;
    }

  private:
    std::unique_ptr<source<T>> upstream_;
    std::uint64_t remaining_;
  };

  std::shared_ptr<const stage<T>> upstream_;
  std::uint64_t count_;
};

/// The elements of `upstream`, produced ahead by an input actor.
template <class T>
class prefetch_stage final : public stage<T> {
public:
  prefetch_stage(std::shared_ptr<const stage<T>> upstream, std::size_t buffer_size,
                 std::optional<std::chrono::milliseconds> timeout)
    : upstream_(std::move(upstream)), buffer_size_(buffer_size), timeout_(timeout) {}

  std::unique_ptr<source<T>> open(const iteration_key& key) const override {
    std::call_once(runtime_once_, [this] { runtime_ = input_runtime(); });
    std::shared_ptr<source<T>> upstream = upstream_->open(key);
    auto produce = [upstream]() -> std::shared_ptr<void> {
      auto x = upstream->next();
      if (!x)
        return nullptr;
      return std::make_shared<T>(std::move(*x));
    };
    return std::make_unique<prefetched>(
      prefetch_channel{buffer_size_, timeout_, std::move(produce)});
  }

  std::optional<std::int64_t> static_batch_size() const override {
    return upstream_->static_batch_size();
  }

private:
  class prefetched final : public source<T> {
  public:
    explicit prefetched(prefetch_channel channel) : channel_(std::move(channel)) {}

    std::optional<T> next() override {
      auto x = channel_.next();
      if (!x)
        return std::nullopt;
      return std::move(*static_cast<T*>(x.get()));
    }

  private:
    prefetch_channel channel_;
  };

  std::shared_ptr<const stage<T>> upstream_;
  std::size_t buffer_size_;
  std::optional<std::chrono::milliseconds> timeout_;
  mutable std::once_flag runtime_once_;
  mutable std::shared_ptr<void> runtime_;
};

} // namespace detail

} // namespace lockstep
