#pragma once

// Errors as values: an exception turned into data that can cross a thread,
// an actor or a process (a type tag and the message), and thrown again at the
// API boundary with its lockstep type and message intact, so that
// `catch (const lockstep::shape_error&)` works on the other side.
//
// Transport-neutral: no CAF here. The wire format (an inspect()) lives with
// actor_system/wire_format.hpp, which every layer's messages share.
//
// A new exception class in include/lockstep/error.hpp needs a kind here, a
// case in to_error_value() (below its bases) and one in rethrow(); the test
// tests/messages_test.cpp round-trips every kind.

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

namespace lockstep::detail {

/// One tag per exception class of include/lockstep/error.hpp (the most
/// derived one an error was thrown as), and `unknown` for everything else.
/// The values are the wire format: append new kinds, never renumber.
enum class error_kind : std::uint8_t {
  /// lockstep::error itself.
  error = 0,
  context_error = 1,
  value_error = 2,
  type_error = 3,
  shape_error = 4,
  dtype_error = 5,
  timeout_error = 6,
  io_error = 7,
  data_loss_error = 8,
  resource_error = 9,
  /// A std::exception that is no lockstep::error, or not a std::exception
  /// at all: rethrown as std::runtime_error.
  unknown = 10,
  device_error = 11,
  authentication_error = 12,
  peer_lost_error = 13,
  cancelled_error = 14,
};

/// True for a value of `kind` that names one of the kinds above (a value
/// read from the wire may not).
bool is_valid(error_kind kind) noexcept;

/// "shape_error", "unknown", ...: the kind's name (the C++ class name).
std::string_view to_string(error_kind kind) noexcept;

/// An exception as a value.
struct error_value {
  error_kind kind = error_kind::unknown;
  /// The exception's what(), byte for byte (for `unknown` without a
  /// std::exception, a sentence that says what was thrown).
  std::string message;
  /// The C++ type the exception was thrown as, demangled ("lockstep::
  /// shape_error", "std::out_of_range", "my_app::failure", "int"), for
  /// messages and logs; empty where unknown. rethrow() does not use it.
  std::string type_name;

  friend bool operator==(const error_value&, const error_value&) = default;
};

/// The exception `error` holds as a value. Never throws an exception of its
/// own except std::bad_alloc; a null `error` gives `unknown` with a message
/// that says so.
error_value to_error_value(const std::exception_ptr& error);

/// The exception of `error`'s kind with its message: lockstep::shape_error
/// for shape_error and so on, std::runtime_error for `unknown` (and for a
/// kind value that names no kind). `rethrow(to_error_value(e)).what()` is
/// `e.what()` for every lockstep error and every std::exception.
[[noreturn]] void rethrow(const error_value& error);

/// An exception_ptr to what rethrow(error) throws.
std::exception_ptr to_exception_ptr(const error_value& error);

} // namespace lockstep::detail
