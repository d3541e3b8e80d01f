#pragma once

#include "lockstep/error.hpp"

#include <cstddef>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace lockstep {

/// A tree of leaves, lists and string-keyed dicts: the structured values that
/// TF passes through `all_reduce` and returns from replica functions (TF's
/// tuples are lists here). Dicts are ordered by key, so `flatten` visits
/// leaves in the same order on every replica.
///
/// Braces make a list: `nest<tensor>{a, b}` is the list [a, b], and so is
/// `nest<tensor>{a}`; write `nest<tensor>(a)` for a leaf and
/// `nest<tensor>(nest<tensor>::dict{...})` for a dict.
template <class T>
class nest {
public:
  using list = std::vector<nest>;
  using dict = std::map<std::string, nest>;

  nest(T leaf) : node_(std::move(leaf)) {}
  nest(list items) : node_(std::move(items)) {}
  nest(dict items) : node_(std::move(items)) {}
  nest(std::initializer_list<nest> items) : node_(list(items)) {}

  bool is_leaf() const noexcept { return node_.index() == 0; }
  bool is_list() const noexcept { return node_.index() == 1; }
  bool is_dict() const noexcept { return node_.index() == 2; }

  const T& leaf() const { return std::get<0>(checked(0, "a leaf")); }
  const list& as_list() const { return std::get<1>(checked(1, "a list")); }
  const dict& as_dict() const { return std::get<2>(checked(2, "a dict")); }

  const nest& operator[](std::size_t index) const {
    const auto& items = as_list();
    if (index >= items.size())
      throw value_error("nest index " + std::to_string(index)
                        + " out of range for a list of "
                        + std::to_string(items.size()));
    return items[index];
  }

  const nest& operator[](const std::string& key) const {
    const auto& items = as_dict();
    auto i = items.find(key);
    if (i == items.end())
      throw value_error("nest has no key '" + key + "'");
    return i->second;
  }

  /// The leaves, depth first, dict entries in key order.
  std::vector<T> flatten() const {
    std::vector<T> out;
    visit_leaves([&](const T& x) { out.push_back(x); });
    return out;
  }

  /// Calls `f` on every leaf in `flatten` order.
  template <class F>
  void visit_leaves(F&& f) const {
    if (is_leaf())
      f(leaf());
    else if (is_list())
      for (const auto& x : as_list())
        x.visit_leaves(f);
    else
      for (const auto& kv : as_dict())
        kv.second.visit_leaves(f);
  }

  /// The same structure with leaf i replaced by f(leaf i).
  template <class F>
  auto map(F&& f) const -> nest<std::decay_t<decltype(f(std::declval<const T&>()))>> {
    using U = std::decay_t<decltype(f(std::declval<const T&>()))>;
    if (is_leaf())
      return nest<U>(f(leaf()));
    if (is_list()) {
      typename nest<U>::list out;
      for (const auto& x : as_list())
        out.push_back(x.map(f));
      return nest<U>(std::move(out));
    }
    typename nest<U>::dict out;
    for (const auto& kv : as_dict())
      out.emplace(kv.first, kv.second.map(f));
    return nest<U>(std::move(out));
  }

  /// This structure with its leaves replaced, in `flatten` order, by
  /// `leaves`; value_error if the count differs.
  template <class U>
  nest<U> pack(const std::vector<U>& leaves) const {
    std::size_t count = 0;
    visit_leaves([&](const T&) { ++count; });
    if (count != leaves.size())
      throw value_error("nest::pack: " + std::to_string(leaves.size())
                        + " leaves for a structure of " + std::to_string(count));
    std::size_t next = 0;
    return map([&](const T&) { return leaves[next++]; });
  }

  /// True when both trees have the same lists (lengths) and dicts (keys).
  template <class U>
  bool same_structure(const nest<U>& other) const {
    if (is_leaf() || other.is_leaf())
      return is_leaf() && other.is_leaf();
    if (is_list() != other.is_list())
      return false;
    if (is_list()) {
      const auto& a = as_list();
      const auto& b = other.as_list();
      if (a.size() != b.size())
        return false;
      for (std::size_t i = 0; i < a.size(); ++i)
        if (!a[i].same_structure(b[i]))
          return false;
      return true;
    }
    const auto& a = as_dict();
    const auto& b = other.as_dict();
    if (a.size() != b.size())
      return false;
    for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j)
      if (i->first != j->first || !i->second.same_structure(j->second))
        return false;
    return true;
  }

  /// The shape of the tree without its leaves, e.g. "[*, {a: *, b: *}]".
  std::string structure_string() const {
    if (is_leaf())
      return "*";
    std::string out;
    if (is_list()) {
      out = "[";
      for (const auto& x : as_list())
        out += (out.size() > 1 ? ", " : "") + x.structure_string();
      return out + "]";
    }
    out = "{";
    for (const auto& kv : as_dict())
      out += (out.size() > 1 ? ", " : "") + kv.first + ": "
             + kv.second.structure_string();
    return out + "}";
  }

private:
  const std::variant<T, list, dict>& checked(std::size_t index,
                                             const char* what) const {
    if (node_.index() != index)
      throw type_error(std::string{"nest node is not "} + what);
    return node_;
  }

  std::variant<T, list, dict> node_;
};

} // namespace lockstep
