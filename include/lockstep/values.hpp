#pragma once

#include "lockstep/error.hpp"
#include "lockstep/nest.hpp"
#include "lockstep/tensor.hpp"

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace lockstep {

// -- identity ------------------------------------------------------------------

/// Whether two values are the same object, the test TF's `regroup` uses to
/// collapse a value that every replica returned unchanged. Tensors are the
/// same object when they share a buffer; other types are never collapsed.
/// Specialise for types with identity (variables do, in a later release).
template <class T>
struct identity_traits {
  static bool same_object(const T&, const T&) noexcept { return false; }
};

/// TF's `regroup` of the components of one distributed container: when
/// `values[r]` is component r of one container with exactly that many
/// components, `container` gives it back, and the values collapse into it.
/// Specialised for variables (variable.hpp); nothing else has components.
template <class T>
struct component_traits {
  static std::optional<T> container(const std::vector<T>&) { return std::nullopt; }
};

template <>
struct identity_traits<tensor> {
  static bool same_object(const tensor& a, const tensor& b) noexcept {
    return a.same_buffer(b);
  }
};

// -- distributed values --------------------------------------------------------

/// TF's DistributedValues: one component per replica (or device), in
/// replica order. `is_single()` is true when every component is the same
/// object, which TF would have collapsed into a plain value.
template <class T>
class distributed_values {
public:
  using value_type = T;

  /// Number of components.
  std::size_t size() const noexcept { return values_.size(); }

  /// Component `replica`; value_error if out of range. (A `bool` component
  /// comes by value: std::vector<bool> has no references.)
  typename std::vector<T>::const_reference operator[](std::size_t replica) const {
    if (replica >= values_.size())
      throw value_error("replica " + std::to_string(replica)
                        + " out of range for a distributed value of "
                        + std::to_string(values_.size()) + " components");
    return values_[replica];
  }

  const std::vector<T>& values() const noexcept { return values_; }

  /// The first component (TF's `primary`).
  typename std::vector<T>::const_reference primary() const { return (*this)[0]; }

  bool is_single() const noexcept { return single_; }

protected:
  distributed_values() = default;
  distributed_values(std::vector<T> values, bool single)
    : values_(std::move(values)), single_(single) {}

  /// One component, or components that are all the same object.
  bool all_same() const {
    if (values_.empty())
      return false;
    for (std::size_t i = 1; i < values_.size(); ++i)
      if (!identity_traits<T>::same_object(values_[0], values_[i]))
        return false;
    return true;
  }

  std::vector<T> values_;
  bool single_ = false;
};

/// Values that may differ per replica (TF's PerReplica); must be reduced
/// before they are read in cross-replica context.
template <class T>
class per_replica : public distributed_values<T> {
public:
  per_replica() = default;

  /// One value per replica. Collapses (`is_single()`) when there is one
  /// value or all are the same object, as TF's `regroup` does; components
  /// 0..N-1 of one distributed variable collapse into the variable itself
  /// (every component, `primary()` included, becomes the container).
  explicit per_replica(std::vector<T> values)
    : distributed_values<T>(std::move(values), false) {
    if (auto whole = component_traits<T>::container(this->values_)) {
      this->values_.assign(this->values_.size(), *whole);
      this->single_ = true;
      return;
    }
    this->single_ = this->all_same();
  }

  /// The same object on `replicas` (at least one) replicas.
  static per_replica single(T value, std::size_t replicas) {
    if (replicas == 0)
      throw value_error("per_replica::single needs at least one replica");
    per_replica out;
    out.values_.assign(replicas, std::move(value));
    out.single_ = true;
    return out;
  }
};

/// Values kept identical on every device (TF's Mirrored): what `reduce_to`,
/// `broadcast_to` and `all_reduce` produce, one copy per destination device.
template <class T>
class mirrored : public distributed_values<T> {
public:
  mirrored() = default;
  explicit mirrored(std::vector<T> values)
    : distributed_values<T>(std::move(values), false) {
    this->single_ = this->all_same();
  }
};

// -- select_replica ------------------------------------------------------------

/// TF's `select_replica(r, structure)`: distributed values are replaced by
/// their component r, containers are mapped element-wise, and every other
/// value is kept as it is. `select_replica_t<T>` is the resulting type.
template <class T>
struct replica_selector {
  using type = T;
  static const T& select(std::size_t, const T& x) { return x; }
};

template <class T>
using select_replica_t = typename replica_selector<std::decay_t<T>>::type;

template <class T>
select_replica_t<T> select_replica(std::size_t replica, const T& value) {
  return replica_selector<std::decay_t<T>>::select(replica, value);
}

template <class T>
struct replica_selector<per_replica<T>> {
  using type = T;
  static T select(std::size_t r, const per_replica<T>& x) { return x[r]; }
};

template <class T>
struct replica_selector<mirrored<T>> {
  using type = T;
  static T select(std::size_t r, const mirrored<T>& x) { return x[r]; }
};

template <class T>
struct replica_selector<std::vector<T>> {
  using type = std::vector<select_replica_t<T>>;
  static type select(std::size_t r, const std::vector<T>& xs) {
    type out;
    out.reserve(xs.size());
    for (const auto& x : xs)
      out.push_back(select_replica(r, x));
    return out;
  }
};

template <class T>
struct replica_selector<std::map<std::string, T>> {
  using type = std::map<std::string, select_replica_t<T>>;
  static type select(std::size_t r, const std::map<std::string, T>& xs) {
    type out;
    for (const auto& kv : xs)
      out.emplace(kv.first, select_replica(r, kv.second));
    return out;
  }
};

template <class... Ts>
struct replica_selector<std::tuple<Ts...>> {
  using type = std::tuple<select_replica_t<Ts>...>;
  static type select(std::size_t r, const std::tuple<Ts...>& xs) {
    return std::apply(
      [r](const auto&... x) { return type{select_replica(r, x)...}; }, xs);
  }
};

template <class T>
struct replica_selector<nest<T>> {
  using type = nest<select_replica_t<T>>;
  static type select(std::size_t r, const nest<T>& xs) {
    return xs.map([r](const T& x) { return select_replica(r, x); });
  }
};

// -- regroup -------------------------------------------------------------------

/// TF's `regroup`: turns one value per replica into one structure whose
/// leaves are `per_replica`. Lists, string-keyed maps, tuples and nests are
/// regrouped element-wise; structures that differ between replicas raise
/// value_error naming the replicas. `regroup_t<T>` is the resulting type.
template <class T>
struct regrouper {
  using type = per_replica<T>;
  static type regroup(std::vector<T> values) { return type{std::move(values)}; }
};

template <class T>
using regroup_t = typename regrouper<T>::type;

template <class T>
regroup_t<T> regroup(std::vector<T> values) {
  return regrouper<T>::regroup(std::move(values));
}

/// Regroups the components of a per_replica structure.
template <class T>
regroup_t<T> regroup(const per_replica<T>& value) {
  return regrouper<T>::regroup(value.values());
}

namespace detail {

[[noreturn]] void throw_structure_mismatch(std::size_t replica,
                                           const std::string& what,
                                           const std::string& first);

} // namespace detail

template <class T>
struct regrouper<std::vector<T>> {
  using type = std::vector<regroup_t<T>>;
  static type regroup(const std::vector<std::vector<T>>& values) {
    type out;
    if (values.empty())
      return out;
    const auto n = values[0].size();
    for (std::size_t r = 1; r < values.size(); ++r)
      if (values[r].size() != n)
        detail::throw_structure_mismatch(
          r, "a list of " + std::to_string(values[r].size()),
          "a list of " + std::to_string(n));
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<T> column;
      column.reserve(values.size());
      for (const auto& v : values)
        column.push_back(v[i]);
      out.push_back(regrouper<T>::regroup(std::move(column)));
    }
    return out;
  }
};

template <class T>
struct regrouper<std::map<std::string, T>> {
  using type = std::map<std::string, regroup_t<T>>;
  static type regroup(const std::vector<std::map<std::string, T>>& values) {
    type out;
    if (values.empty())
      return out;
    auto keys = [](const std::map<std::string, T>& m) {
      std::string s = "a dict with keys {";
      for (const auto& kv : m)
        s += (s.back() == '{' ? "" : ", ") + kv.first;
      return s + "}";
    };
    for (std::size_t r = 1; r < values.size(); ++r) {
      bool same = values[r].size() == values[0].size();
      for (auto i = values[0].begin(), j = values[r].begin();
           same && i != values[0].end(); ++i, ++j)
        same = i->first == j->first;
      if (!same)
        detail::throw_structure_mismatch(r, keys(values[r]), keys(values[0]));
    }
    for (const auto& kv : values[0]) {
      std::vector<T> column;
      column.reserve(values.size());
      for (const auto& v : values)
        column.push_back(v.at(kv.first));
      out.emplace(kv.first, regrouper<T>::regroup(std::move(column)));
    }
    return out;
  }
};

template <class... Ts>
struct regrouper<std::tuple<Ts...>> {
  using type = std::tuple<regroup_t<Ts>...>;
  static type regroup(const std::vector<std::tuple<Ts...>>& values) {
    return columns(values, std::index_sequence_for<Ts...>{});
  }

private:
  template <std::size_t... Is>
  static type columns(const std::vector<std::tuple<Ts...>>& values,
                     std::index_sequence<Is...>) {
    return type{regroup_column<Is>(values)...};
  }
  template <std::size_t I>
  static auto regroup_column(const std::vector<std::tuple<Ts...>>& values) {
    using E = std::tuple_element_t<I, std::tuple<Ts...>>;
    std::vector<E> column;
    column.reserve(values.size());
    for (const auto& v : values)
      column.push_back(std::get<I>(v));
    return regrouper<E>::regroup(std::move(column));
  }
};

template <class T>
struct regrouper<nest<T>> {
  using type = nest<per_replica<T>>;
  static type regroup(const std::vector<nest<T>>& values) {
    if (values.empty())
      throw value_error("regroup: no values");
    for (std::size_t r = 1; r < values.size(); ++r)
      if (!values[r].same_structure(values[0]))
        detail::throw_structure_mismatch(
          r, "the structure " + values[r].structure_string(),
          "the structure " + values[0].structure_string());
    std::vector<std::vector<T>> leaves;
    for (const auto& v : values)
      leaves.push_back(v.flatten());
    std::vector<per_replica<T>> grouped;
    for (std::size_t i = 0; i < leaves[0].size(); ++i) {
      std::vector<T> column;
      for (const auto& l : leaves)
        column.push_back(l[i]);
      grouped.emplace_back(std::move(column));
    }
    return values[0].pack(grouped);
  }
};

/// True for the container types that `regroup` maps element-wise.
template <class T>
inline constexpr bool is_structure_v =
  !std::is_same_v<regroup_t<T>, per_replica<T>>;

// -- local results -------------------------------------------------------------

/// TF's `experimental_local_results`: the components in replica order; a
/// plain value is its own single local result.
template <class T>
std::vector<T> local_results(const distributed_values<T>& value) {
  return value.values();
}

/// True for per_replica, mirrored and other distributed_values.
template <class T>
concept distributed = requires { typename T::value_type; }
  && std::is_base_of_v<distributed_values<typename T::value_type>, T>;

template <class T>
  requires(!distributed<T>)
std::vector<T> local_results(const T& value) {
  return {value};
}

} // namespace lockstep
