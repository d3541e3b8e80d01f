#pragma once

// Helpers shared by the doctest files.

#include <doctest/doctest.h>

#include <exception>
#include <string>

/// The message of the exception of type E that `f` throws; fails the test
/// if `f` throws nothing or another std::exception.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("threw another exception: " << std::string{e.what()});
    return {};
  }
  FAIL("no exception was thrown");
  return {};
}

/// The message of the exception `error` holds ("" for none; "unknown" for
/// one that is no std::exception).
inline std::string what_of(const std::exception_ptr& error) {
  if (!error)
    return "";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown";
  }
}
