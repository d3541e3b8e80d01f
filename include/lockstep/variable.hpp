#pragma once

#include "lockstep/device_spec.hpp"
#include "lockstep/dtype.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/values.hpp"
#include "lockstep/variable_policies.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {

class strategy;

namespace detail {
struct variable_state;
struct variable_access;
}

/// How to create a variable (TF's tf.Variable arguments).
struct variable_options {
  /// Empty: "Variable". Names are not made unique (TF 2).
  std::string name;
  variable_synchronization synchronization = variable_synchronization::automatic;
  variable_aggregation aggregation = variable_aggregation::none;
  /// Unset: true, except for `on_read` variables.
  std::optional<bool> trainable;
  /// When set, the initial value must have this dtype / shape (no casts).
  std::optional<lockstep::dtype> dtype;
  std::optional<shape_t> shape;
  /// Makes the initial value when none is passed; called once.
  std::function<tensor()> initializer;
};

/// A variable: state that persists across steps and is changed only by
/// writes (TF's tf.Variable). What it is depends on where it is created,
/// as with TF's variable creators:
///  - inside a mirrored strategy's `scope()`: a mirrored variable (copies
///    kept equal by writes) or, with `on_read`, a sync-on-read variable
///    (copies written independently, combined when read), with one copy per
///    device of the strategy (or of `colocate_vars_with`);
///  - inside a replica function of a mirrored strategy: the same, created
///    once by replica 0; the other replicas receive that variable;
///  - elsewhere (the default strategy, a one-device strategy): one copy.
/// Copy i lives on device i and is named "<name>/replica_<i>" (copy 0 has
/// the name itself); every copy starts from copy 0's value.
///
/// Reads and writes follow TF's rules for the context they are made in
/// (docs/variables.md has the tables): in replica r they see copy r; in
/// cross-replica context they see the primary (mirrored) or the aggregate
/// (sync-on-read). Each copy is a variable actor that applies writes in one
/// order; a write posted from cross-replica context returns once it is
/// queued, and every later read sees it. A read never sees half a write.
///
/// A `variable` is a handle: copies refer to the same variable. The handles
/// returned by `values()` refer to single copies (`is_component()`).
class variable {
public:
  /// Creates a variable holding `initial_value` (see the class comment).
  /// value_error for invalid options, with TF's messages.
  explicit variable(tensor initial_value, variable_options options = {});

  /// Creates a variable whose initial value comes from `options.initializer`.
  explicit variable(variable_options options);

  // -- properties -------------------------------------------------------------

  /// The name; a component's is "<name>/replica_<i>" for i > 0.
  const std::string& name() const;
  lockstep::dtype dtype() const;
  const shape_t& shape() const;
  variable_synchronization synchronization() const;
  variable_aggregation aggregation() const;
  bool trainable() const;

  /// One copy per device (mirrored, sync-on-read), or a plain variable.
  bool is_mirrored() const;
  bool is_sync_on_read() const;
  /// A handle to one copy of a variable (from `values()`).
  bool is_component() const;

  /// The devices of the copies, in replica order (one for a component).
  std::vector<device_spec> devices() const;
  /// The copies, in replica order (TF's `values`); a component is its own.
  std::vector<variable> values() const;
  /// Copy 0.
  variable primary() const;
  /// The whole variable a component belongs to (itself if not a component).
  variable container() const;
  /// The strategy it was created in (the default strategy outside any).
  lockstep::strategy strategy() const;

  // -- reads and writes -------------------------------------------------------

  /// The value in the current context (TF's value() / read_value()): a
  /// snapshot that later writes do not change.
  tensor value() const;
  tensor read_value() const { return value(); }

  /// Writes in the current context. `x` must have the variable's dtype
  /// (dtype_error) and shape (shape_error).
  void assign(const tensor& x) const;
  void assign_add(const tensor& x) const;
  void assign_sub(const tensor& x) const;

  /// The same variable (identity).
  friend bool operator==(const variable& a, const variable& b) noexcept {
    return a.state_ == b.state_ && a.component_ == b.component_;
  }

  /// For the library's internals.
  detail::variable_state& state() const noexcept { return *state_; }
  std::optional<std::size_t> component() const noexcept { return component_; }

private:
  // The library makes variables from their state through detail::variable_access.
  friend struct detail::variable_access;

  variable(std::shared_ptr<detail::variable_state> state, std::optional<std::size_t> component)
    : state_(std::move(state)), component_(component) {}

  std::shared_ptr<detail::variable_state> state_;
  std::optional<std::size_t> component_;
};

/// A checked view of a mirrored variable (TF's MirroredVariable);
/// type_error for any other variable.
class mirrored_variable : public variable {
public:
  explicit mirrored_variable(const variable& v);
};

/// A checked view of a sync-on-read variable (TF's SyncOnReadVariable);
/// type_error for any other variable.
class sync_on_read_variable : public variable {
public:
  explicit sync_on_read_variable(const variable& v);
};

/// TF's canonical name for matching variables across replicas: "_<digits>/"
/// becomes "/", a trailing "_<digits>" is dropped, "" is "Variable".
std::string canonical_variable_name(std::string_view name);

/// Components of one variable are the same object for `regroup`.
template <>
struct identity_traits<variable> {
  static bool same_object(const variable& a, const variable& b) noexcept {
    return a == b;
  }
};

/// TF's regroup: copies 0..N-1 of one distributed variable, in order, are
/// that variable.
template <>
struct component_traits<variable> {
  static std::optional<variable> container(const std::vector<variable>& values);
};

/// TF's experimental_local_results of a variable: its copies.
inline std::vector<variable> local_results(const variable& v) {
  return v.values();
}

} // namespace lockstep
