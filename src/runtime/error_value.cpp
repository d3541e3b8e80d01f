#include "runtime/error_value.hpp"

#include "lockstep/error.hpp"

#include <cstdlib>
#include <memory>
#include <stdexcept>

#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#define LOCKSTEP_HAVE_CXXABI 1
#endif

namespace lockstep::detail {

namespace {

/// The demangled type of the exception being handled (call it inside a
/// catch block); empty where the ABI does not tell.
std::string current_exception_type() {
#ifdef LOCKSTEP_HAVE_CXXABI
  const std::type_info* type = abi::__cxa_current_exception_type();
  if (type == nullptr)
    return {};
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled{
    abi::__cxa_demangle(type->name(), nullptr, nullptr, &status), std::free};
  if (status == 0 && demangled)
    return demangled.get();
  return type->name();
#else
  return {};
#endif
}

error_value caught(error_kind kind, const std::exception& e) {
  return {kind, e.what(), current_exception_type()};
}

} // namespace

std::string_view to_string(error_kind kind) noexcept {
  switch (kind) {
    case error_kind::error:
      return "error";
    case error_kind::context_error:
      return "context_error";
    case error_kind::value_error:
      return "value_error";
    case error_kind::type_error:
      return "type_error";
    case error_kind::shape_error:
      return "shape_error";
    case error_kind::dtype_error:
      return "dtype_error";
    case error_kind::timeout_error:
      return "timeout_error";
    case error_kind::io_error:
      return "io_error";
    case error_kind::data_loss_error:
      return "data_loss_error";
    case error_kind::resource_error:
      return "resource_error";
    case error_kind::device_error:
      return "device_error";
    case error_kind::authentication_error:
      return "authentication_error";
    case error_kind::peer_lost_error:
      return "peer_lost_error";
    case error_kind::cancelled_error:
      return "cancelled_error";
    case error_kind::unknown:
      return "unknown";
  }
  return "invalid error kind";
}

bool is_valid(error_kind kind) noexcept {
  switch (kind) {
    case error_kind::error:
    case error_kind::context_error:
    case error_kind::value_error:
    case error_kind::type_error:
    case error_kind::shape_error:
    case error_kind::dtype_error:
    case error_kind::timeout_error:
    case error_kind::io_error:
    case error_kind::data_loss_error:
    case error_kind::resource_error:
    case error_kind::unknown:
    case error_kind::device_error:
    case error_kind::authentication_error:
    case error_kind::peer_lost_error:
    case error_kind::cancelled_error:
      return true;
  }
  return false;
}

error_value to_error_value(const std::exception_ptr& error) {
  if (!error)
    return {error_kind::unknown, "no exception (a null std::exception_ptr)", {}};
  try {
    std::rethrow_exception(error);
  }
  // Derived classes before their bases.
  catch (const shape_error& e) {
    return caught(error_kind::shape_error, e);
  } catch (const dtype_error& e) {
    return caught(error_kind::dtype_error, e);
  } catch (const context_error& e) {
    return caught(error_kind::context_error, e);
  } catch (const value_error& e) {
    return caught(error_kind::value_error, e);
  } catch (const type_error& e) {
    return caught(error_kind::type_error, e);
  } catch (const timeout_error& e) {
    return caught(error_kind::timeout_error, e);
  } catch (const io_error& e) {
    return caught(error_kind::io_error, e);
  } catch (const data_loss_error& e) {
    return caught(error_kind::data_loss_error, e);
  } catch (const resource_error& e) {
    return caught(error_kind::resource_error, e);
  } catch (const device_error& e) {
    return caught(error_kind::device_error, e);
  } catch (const authentication_error& e) {
    return caught(error_kind::authentication_error, e);
  } catch (const peer_lost_error& e) {
    return caught(error_kind::peer_lost_error, e);
  } catch (const cancelled_error& e) {
    return caught(error_kind::cancelled_error, e);
  } catch (const lockstep::error& e) {
    return caught(error_kind::error, e);
  } catch (const std::exception& e) {
    return caught(error_kind::unknown, e);
  } catch (...) {
    auto type = current_exception_type();
    auto message = type.empty() ? std::string{"an exception that is not a std::exception"}
                                : "an exception of type " + type
                                    + ", which is not a std::exception";
    return {error_kind::unknown, std::move(message), std::move(type)};
  }
}

void rethrow(const error_value& error) {
  const auto& what = error.message;
  switch (error.kind) {
    case error_kind::error:
      throw lockstep::error(what);
    case error_kind::context_error:
      throw context_error(what);
    case error_kind::value_error:
      throw value_error(what);
    case error_kind::type_error:
      throw type_error(what);
    case error_kind::shape_error:
      throw shape_error(what);
    case error_kind::dtype_error:
      throw dtype_error(what);
    case error_kind::timeout_error:
      throw timeout_error(what);
    case error_kind::io_error:
      throw io_error(what);
    case error_kind::data_loss_error:
      throw data_loss_error(what);
    case error_kind::resource_error:
      throw resource_error(what);
    case error_kind::device_error:
      throw device_error(what);
    case error_kind::authentication_error:
      throw authentication_error(what);
    case error_kind::peer_lost_error:
      throw peer_lost_error(what);
    case error_kind::cancelled_error:
      throw cancelled_error(what);
    case error_kind::unknown:
      break;
  }
  throw std::runtime_error(what);
}

std::exception_ptr to_exception_ptr(const error_value& error) {
  try {
    rethrow(error);
  } catch (...) {
    return std::current_exception();
  }
}

} // namespace lockstep::detail
