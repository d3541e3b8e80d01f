#pragma once

// The pieces of the wire format that every layer's serialisable messages
// share: wire_enum (an enum field travels as its underlying integer, checked
// when read), wire_bytes (a byte vector whose length is checked before
// anything is allocated) and the inspect() of error_value (runtime/error_value.hpp), the
// error every layer may send. Each layer keeps its own messages' inspect()
// functions (node/wire_format.hpp, actors/messages.hpp) and registers its
// types with the actor system (actor_system.hpp).

#include "runtime/error_value.hpp"

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace lockstep::detail {

/// An enum field on the wire: its underlying integer, checked when read (a
/// value that names no enumerator fails with sec::invalid_argument instead
/// of making an enum value nobody handles); printed by name.
template <class Enum>
struct wire_enum {
  Enum& value;

  friend std::string to_string(const wire_enum& x) {
    if (!is_valid(x.value))
      return "<invalid " + std::to_string(static_cast<unsigned>(x.value)) + ">";
    return std::string(to_string(x.value));
  }
};

template <class Enum>
wire_enum(Enum&) -> wire_enum<Enum>;

template <class Inspector, class Enum>
typename Inspector::result_type inspect(Inspector& f, wire_enum<Enum>& x) {
  auto raw = static_cast<std::underlying_type_t<Enum>>(x.value);
  return f(raw, caf::meta::load_callback([&]() -> caf::error {
             const auto value = static_cast<Enum>(raw);
             if (!is_valid(value))
               return caf::sec::invalid_argument;
             x.value = value;
             return caf::none;
           }));
}

/// A byte-vector field on the wire: its length and its bytes, exactly as CAF
/// writes a std::vector<std::uint8_t>, but read as a std::string. CAF 0.17
/// resizes a byte vector to the length it reads before it checks that so
/// many bytes follow (a 5-byte length in a 20-byte frame allocated 4 GiB,
/// found by tests/fuzz); a string's length it checks first, so a length
/// beyond the frame fails with end_of_stream and allocates nothing.
struct wire_bytes {
  std::vector<std::uint8_t>& value;

  friend std::string to_string(const wire_bytes& x) {
    return std::to_string(x.value.size()) + " bytes";
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_bytes& x) {
  std::string raw(x.value.begin(), x.value.end());
  return f(raw, caf::meta::load_callback([&]() -> caf::error {
             x.value.assign(raw.begin(), raw.end());
             return caf::none;
           }));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, error_value& x) {
  return f(caf::meta::type_name("error_value"), wire_enum{x.kind}, x.message, x.type_name);
}

} // namespace lockstep::detail
