// nest: trees of leaves, lists and string-keyed dicts. Deterministic, no
// actor system: suite 'unit'.

#include "lockstep/nest.hpp"

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "lockstep/error.hpp"

using namespace lockstep;

namespace {

using int_nest = nest<int>;

// [1, {b: 2, a: [3, 4]}, 5]: a list holding a dict whose keys are given out of
// order, so flatten must sort them (a before b).
int_nest sample() {
  return int_nest{
    int_nest(1),
    int_nest(int_nest::dict{{"b", int_nest(2)}, {"a", int_nest{int_nest(3), int_nest(4)}}}),
    int_nest(5)};
}

} // namespace

// -- construction -------------------------------------------------------------------

TEST_CASE("a nest built from a value is a leaf") {
  int_nest x(7);
  CHECK(x.is_leaf());
  CHECK_FALSE(x.is_list());
  CHECK_FALSE(x.is_dict());
  CHECK(x.leaf() == 7);
  int_nest implicit = 8;
  CHECK(implicit.leaf() == 8);
  nest<std::string> s(std::string{"text"});
  CHECK(s.leaf() == "text");
}

TEST_CASE("a nest built from a list holds the items in order") {
  int_nest x(int_nest::list{int_nest(1), int_nest(2), int_nest(3)});
  REQUIRE(x.is_list());
  CHECK_FALSE(x.is_leaf());
  CHECK_FALSE(x.is_dict());
  REQUIRE(x.as_list().size() == 3);
  CHECK(x[0].leaf() == 1);
  CHECK(x[1].leaf() == 2);
  CHECK(x[2].leaf() == 3);
  int_nest empty(int_nest::list{});
  CHECK(empty.is_list());
  CHECK(empty.as_list().empty());
}

TEST_CASE("a nest built from a dict holds the entries by key") {
  int_nest x(int_nest::dict{{"z", int_nest(1)}, {"a", int_nest(2)}});
  REQUIRE(x.is_dict());
  CHECK_FALSE(x.is_leaf());
  CHECK_FALSE(x.is_list());
  CHECK(x.as_dict().size() == 2);
  CHECK(x["z"].leaf() == 1);
  CHECK(x["a"].leaf() == 2);
  CHECK(x.as_dict().begin()->first == "a");
}

TEST_CASE("a braced initializer list makes a list") {
  int_nest x{1, 2, 3};
  REQUIRE(x.is_list());
  CHECK(x.flatten() == std::vector<int>{1, 2, 3});
  // One braced value is a list of one leaf, not a leaf (initializer_list wins).
  int_nest one{1};
  REQUIRE(one.is_list());
  CHECK(one.as_list().size() == 1);
  CHECK(one[0].leaf() == 1);
  // Empty braces: an empty list.
  int_nest none{};
  CHECK(none.is_list());
  CHECK(none.as_list().empty());
  // Nested lists.
  int_nest deep{int_nest{1, 2}, int_nest(3), int_nest{}};
  CHECK(deep.structure_string() == "[[*, *], *, []]");
  // Braces around one nest wrap it in a list, as documented; parentheses copy.
  int_nest wrapped{deep};
  CHECK(wrapped.structure_string() == "[[[*, *], *, []]]");
  int_nest copy(deep);
  CHECK(copy.structure_string() == "[[*, *], *, []]");
  // Braces around a dict make a list holding the dict.
  int_nest dict_in_list{int_nest::dict{{"a", int_nest(1)}}};
  CHECK(dict_in_list.structure_string() == "[{a: *}]");
}

// -- flatten ------------------------------------------------------------------------

TEST_CASE("flatten visits leaves depth first, dict entries in key order") {
  CHECK(sample().flatten() == std::vector<int>{1, 3, 4, 2, 5});
  CHECK(int_nest(9).flatten() == std::vector<int>{9});
  CHECK(int_nest{}.flatten().empty());
  CHECK(int_nest(int_nest::dict{}).flatten().empty());
  int_nest keys(int_nest::dict{
    {"c", int_nest(3)}, {"B", int_nest(2)}, {"a", int_nest(1)}, {"aa", int_nest(4)}});
  // Keys compare as std::string: "B" < "a" < "aa" < "c".
  CHECK(keys.flatten() == std::vector<int>{2, 1, 4, 3});
}

TEST_CASE("visit_leaves calls f in flatten order") {
  std::vector<int> seen;
  sample().visit_leaves([&](int x) { seen.push_back(x); });
  CHECK(seen == sample().flatten());
}

// -- map and pack -------------------------------------------------------------------

TEST_CASE("map replaces each leaf and keeps the structure") {
  auto squared = sample().map([](int x) { return x * x; });
  static_assert(std::is_same_v<decltype(squared), nest<int>>);
  CHECK(squared.flatten() == std::vector<int>{1, 9, 16, 4, 25});
  CHECK(squared.structure_string() == sample().structure_string());
  auto text = sample().map([](int x) { return std::to_string(x); });
  static_assert(std::is_same_v<decltype(text), nest<std::string>>);
  CHECK(text.flatten() == std::vector<std::string>{"1", "3", "4", "2", "5"});
  CHECK(text[1]["a"][1].leaf() == "4");
  CHECK(int_nest(2).map([](int x) { return 0.5 * x; }).leaf() == 1.0);
  CHECK(int_nest{}.map([](int x) { return x; }).as_list().empty());
}

TEST_CASE("pack fills the structure with leaves in flatten order") {
  auto packed = sample().pack(std::vector<std::string>{"p", "q", "r", "s", "t"});
  static_assert(std::is_same_v<decltype(packed), nest<std::string>>);
  CHECK(packed.flatten() == std::vector<std::string>{"p", "q", "r", "s", "t"});
  CHECK(packed[0].leaf() == "p");
  CHECK(packed[1]["a"][0].leaf() == "q");
  CHECK(packed[1]["a"][1].leaf() == "r");
  CHECK(packed[1]["b"].leaf() == "s");
  CHECK(packed[2].leaf() == "t");
  // pack(flatten()) is the identity.
  CHECK(sample().pack(sample().flatten()).flatten() == sample().flatten());
  CHECK(int_nest{}.pack(std::vector<int>{}).as_list().empty());
  CHECK(int_nest(0).pack(std::vector<double>{2.5}).leaf() == 2.5);
}

TEST_CASE("pack with the wrong number of leaves throws value_error") {
  CHECK(error_of<value_error>([] { (void) sample().pack(std::vector<int>{1, 2, 3, 4}); })
        == "nest::pack: 4 leaves for a structure of 5");
  CHECK(error_of<value_error>([] { (void) sample().pack(std::vector<int>{1, 2, 3, 4, 5, 6}); })
        == "nest::pack: 6 leaves for a structure of 5");
  CHECK(error_of<value_error>([] { (void) int_nest(1).pack(std::vector<int>{}); })
        == "nest::pack: 0 leaves for a structure of 1");
  CHECK(error_of<value_error>([] { (void) int_nest{}.pack(std::vector<int>{1}); })
        == "nest::pack: 1 leaves for a structure of 0");
}

// -- same_structure -----------------------------------------------------------------

TEST_CASE("same_structure compares lists by length and dicts by keys") {
  CHECK(sample().same_structure(sample()));
  CHECK(sample().same_structure(sample().map([](int x) { return std::to_string(x); })));
  CHECK(int_nest(1).same_structure(int_nest(2)));
  CHECK(int_nest(1).same_structure(nest<double>(2.0)));
  CHECK_FALSE(int_nest(1).same_structure(int_nest{1}));
  CHECK_FALSE(int_nest{1}.same_structure(int_nest(1)));
  CHECK(int_nest{1, 2}.same_structure(int_nest{3, 4}));
  CHECK_FALSE(int_nest{1, 2}.same_structure(int_nest{1, 2, 3}));
  CHECK(int_nest{}.same_structure(int_nest{}));
  // A list is not a dict, even when both are empty.
  CHECK_FALSE(int_nest{}.same_structure(int_nest(int_nest::dict{})));
  CHECK_FALSE(int_nest(int_nest::dict{}).same_structure(int_nest{}));
  const int_nest ab(int_nest::dict{{"a", int_nest(1)}, {"b", int_nest(2)}});
  const int_nest ac(int_nest::dict{{"a", int_nest(1)}, {"c", int_nest(2)}});
  const int_nest a(int_nest::dict{{"a", int_nest(1)}});
  CHECK(ab.same_structure(ab));
  CHECK_FALSE(ab.same_structure(ac));
  CHECK_FALSE(ab.same_structure(a));
  CHECK_FALSE(a.same_structure(ab));
  // Same keys, different structure below one key.
  const int_nest ab_deep(int_nest::dict{{"a", int_nest(1)}, {"b", int_nest{2, 3}}});
  CHECK_FALSE(ab.same_structure(ab_deep));
  // Same length, different structure at one position.
  CHECK_FALSE(int_nest{int_nest(1), int_nest(2)}.same_structure(
    int_nest{int_nest(1), int_nest{2}}));
}

// -- structure_string ---------------------------------------------------------------

TEST_CASE("structure_string shows the tree without its leaves") {
  CHECK(int_nest(1).structure_string() == "*");
  CHECK(int_nest{}.structure_string() == "[]");
  CHECK(int_nest(int_nest::dict{}).structure_string() == "{}");
  CHECK(int_nest{1}.structure_string() == "[*]");
  CHECK(int_nest{1, 2, 3}.structure_string() == "[*, *, *]");
  CHECK(sample().structure_string() == "[*, {a: [*, *], b: *}, *]");
  CHECK(int_nest(int_nest::dict{{"k", int_nest{}}}).structure_string() == "{k: []}");
  CHECK(int_nest{int_nest{}, int_nest{}}.structure_string() == "[[], []]");
}

// -- access errors ------------------------------------------------------------------

TEST_CASE("operator[] on a list checks the index") {
  const auto x = sample();
  CHECK(x[2].leaf() == 5);
  CHECK(error_of<value_error>([&] { (void) x[3]; })
        == "nest index 3 out of range for a list of 3");
  CHECK(error_of<value_error>([] { (void) int_nest{}[0]; })
        == "nest index 0 out of range for a list of 0");
}

TEST_CASE("operator[] on a dict checks the key") {
  const auto x = sample();
  CHECK(x[1]["b"].leaf() == 2);
  CHECK(error_of<value_error>([&] { (void) x[1]["c"]; }) == "nest has no key 'c'");
  CHECK(error_of<value_error>([&] { (void) x[1][std::string{}]; }) == "nest has no key ''");
}

TEST_CASE("accessing a node as the wrong kind throws type_error") {
  const auto x = sample();
  CHECK(error_of<type_error>([&] { (void) x["a"]; }) == "nest node is not a dict");
  CHECK(error_of<type_error>([&] { (void) x[1][0]; }) == "nest node is not a list");
  CHECK(error_of<type_error>([&] { (void) x[0][0]; }) == "nest node is not a list");
  CHECK(error_of<type_error>([&] { (void) x.leaf(); }) == "nest node is not a leaf");
  CHECK(error_of<type_error>([&] { (void) x[0].as_list(); }) == "nest node is not a list");
  CHECK(error_of<type_error>([&] { (void) x[0].as_dict(); }) == "nest node is not a dict");
  CHECK(error_of<type_error>([&] { (void) x[1].leaf(); }) == "nest node is not a leaf");
}
