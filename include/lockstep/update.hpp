#pragma once

// The machinery behind strategy_extended::update and update_non_slot: an
// update function with its arguments, type-erased so that each device's
// thread can call it for its copy. Included by strategy.hpp.

#include "lockstep/error.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/values.hpp"
#include "lockstep/variable.hpp"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace lockstep {

namespace detail {

struct strategy_state;

/// The function of one `update()` or `update_non_slot()` call with its
/// arguments, called once per copy (device) on that device's thread.
class update_function {
public:
  virtual ~update_function() = default;
  /// Calls the function for copy `copy`: `value` is the copy's tensor and
  /// `component` its handle (both nullptr for update_non_slot).
  virtual void call(std::size_t copy, tensor* value, const variable* component) = 0;
};

/// Posts `fn` to every copy of `var` in one write; waits until every copy
/// applied it when `wait` is set (rethrowing the first copy's exception).
void post_update(strategy_state& state, const variable& var,
                 std::shared_ptr<update_function> fn, bool wait);

/// Runs `fn` once per device of `devices` (devices of the strategy) in an
/// update context, and waits for all of them.
void run_non_slot(strategy_state& state, const std::vector<device_spec>& devices,
                  std::shared_ptr<update_function> fn);

/// The number of copies an update of `var` calls its function for.
std::size_t copies_of(const variable& var);

[[noreturn]] void throw_not_mirrored(const std::string& value);

/// TF's `select_device_mirrored` for copy `copy`: a mirrored value gives its
/// component, a per-replica value is an error (checked before posting, by
/// `check_mirrored`), anything else is passed as it is.
template <class T>
const T& select_mirrored(std::size_t, const T& x) {
  return x;
}

template <class T>
const T& select_mirrored(std::size_t copy, const mirrored<T>& x) {
  return x[copy];
}

template <class T>
const T& select_mirrored(std::size_t, const per_replica<T>& x) {
  return x.primary(); // single: check_mirrored rejected the others
}

template <class T>
void check_mirrored(const T&, std::size_t) {}

template <class T>
void check_mirrored(const mirrored<T>& x, std::size_t copies) {
  if (x.size() != copies)
    throw value_error("update: a mirrored argument has " + std::to_string(x.size())
                      + " components for " + std::to_string(copies) + " copies");
}

template <class T>
void check_mirrored(const per_replica<T>& x, std::size_t) {
  // TF's regroup collapses a value that is the same object on every replica.
  if (!x.is_single())
    throw_not_mirrored("a per_replica<" + std::string(typeid(T).name()) + "> of "
                       + std::to_string(x.size()) + " components");
}

template <class T>
using select_mirrored_t = std::decay_t<decltype(select_mirrored(0, std::declval<const T&>()))>;

/// How an update function is called: for a copy of a variable as
/// fn(tensor&, args...) when it can be, else as fn(variable&, args...);
/// for update_non_slot as fn(args...).
enum class update_call { value, component, non_slot };

template <bool ForVariable, class F, class... Args>
constexpr update_call update_call_of() {
  if constexpr (!ForVariable)
    return update_call::non_slot;
  else if constexpr (std::is_invocable_v<F&, tensor&, const select_mirrored_t<Args>&...>)
    return update_call::value;
  else
    return update_call::component;
}

template <update_call Call, class F, class... Args>
auto update_result_helper() {
  if constexpr (Call == update_call::value)
    return std::type_identity<std::invoke_result_t<F&, tensor&, const select_mirrored_t<Args>&...>>{};
  else if constexpr (Call == update_call::component)
    return std::type_identity<std::invoke_result_t<F&, variable&, const select_mirrored_t<Args>&...>>{};
  else
    return std::type_identity<std::invoke_result_t<F&, const select_mirrored_t<Args>&...>>{};
}

/// An update function with its arguments and a result slot per copy.
template <bool ForVariable, class F, class... Args>
class typed_update final : public update_function {
public:
  static constexpr update_call call_kind = update_call_of<ForVariable, F, Args...>();
  using result_type = typename decltype(update_result_helper<call_kind, F, Args...>())::type;

  typed_update(F fn, const Args&... args, std::size_t copies)
    : fn_(std::move(fn)), args_(args...), results_(copies) {}

  void call(std::size_t copy, tensor* value, const variable* component) override {
    std::apply([&](const auto&... a) { store(copy, invoke(copy, value, component, a...)); }, args_);
  }

  /// The results in copy order (after every copy ran).
  std::vector<result_type> results() {
    std::vector<result_type> out;
    out.reserve(results_.size());
    for (auto& r : results_)
      out.push_back(std::move(*r));
    return out;
  }

private:
  struct nothing {};
  using slot = std::conditional_t<std::is_void_v<result_type>, nothing, result_type>;

  template <class... A>
  auto invoke(std::size_t copy, tensor* value, const variable* component, const A&... a) {
    if constexpr (call_kind == update_call::value)
      return wrap([&] { return fn_(*value, select_mirrored(copy, a)...); });
    else if constexpr (call_kind == update_call::component)
      return wrap([&] {
        variable c = *component;
        return fn_(c, select_mirrored(copy, a)...);
      });
    else
      return wrap([&] { return fn_(select_mirrored(copy, a)...); });
  }

  template <class G>
  static slot wrap(G&& g) {
    if constexpr (std::is_void_v<result_type>) {
      g();
      return {};
    } else {
      return g();
    }
  }

  void store(std::size_t copy, slot value) {
    if constexpr (!std::is_void_v<result_type>)
      results_[copy] = std::move(value);
  }

  F fn_;
  std::tuple<Args...> args_;
  std::vector<std::optional<slot>> results_;
};

} // namespace detail

/// Tag for `update` / `update_non_slot`: return each copy's result as it
/// is (TF's group=False) instead of a `mirrored` value.
struct ungrouped_t {
  explicit ungrouped_t() = default;
};
inline constexpr ungrouped_t ungrouped{};

} // namespace lockstep
