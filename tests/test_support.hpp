#pragma once

// Helpers shared by the doctest files.

#include <doctest/doctest.h>

#include <string>

/// The message of the exception of type E that `f` throws; fails the test
/// if `f` throws nothing.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("no exception was thrown");
  return {};
}
