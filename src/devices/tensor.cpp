#include "lockstep/tensor.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <new>
#include <ostream>
#include <string>
#include <vector>

#include "lockstep/error.hpp"

#include "devices/device_registry.hpp"
#include "runtime/error_text.hpp"

namespace lockstep {

namespace {

// Keeps byte counts (elements times at most 8 bytes) within std::int64_t.
constexpr std::int64_t max_elements = std::numeric_limits<std::int64_t>::max() / 8;

std::int64_t checked_num_elements(const shape_t& shape) {
  std::int64_t count = 1;
  for (auto dim : shape) {
    if (dim < 0)
      throw shape_error("shape " + shape_to_string(shape) + " has a negative dimension");
    if (dim != 0 && count > max_elements / dim)
      throw shape_error("shape " + shape_to_string(shape) + " has too many elements");
    count *= dim;
  }
  return count;
}

std::string dtype_name(dtype type) {
  return std::string(to_string(type));
}

// The shortest text that reads back as `value` (half types: as float, which
// holds every value exactly).
template <class T>
std::string format_element(T value) {
  char text[32];
  if constexpr (is_half_v<T>)
    return std::string(text, std::to_chars(text, text + sizeof text, static_cast<float>(value)).ptr);
  else
    return std::string(text, std::to_chars(text, text + sizeof text, value).ptr);
}

} // namespace

std::string shape_to_string(const shape_t& shape) {
  constexpr auto shown = 2 * detail::items_in_errors;
  std::vector<std::string> dims;
  for (std::size_t i = 0; i < shape.size() && i <= shown; ++i)
    dims.push_back(std::to_string(shape[i]));
  return "[" + detail::joined_list(dims, shown, shape.size()) + "]";
}

// -- construction -------------------------------------------------------------

tensor::tensor(lockstep::dtype type, shape_t shape, const device_spec& device)
  : dtype_(type),
    shape_(std::move(shape)),
    num_elements_(checked_num_elements(shape_)),
    device_(device.canonical()),
    buffer_(detail::allocate_buffer(detail::kind_of(device_), device_, byte_size())) {
}

tensor::tensor(lockstep::dtype type, shape_t shape, const device_spec& device,
               device_buffer buffer)
  : dtype_(type),
    shape_(std::move(shape)),
    num_elements_(checked_num_elements(shape_)),
    device_(device.canonical()),
    buffer_(std::move(buffer)) {
}

tensor::tensor() : tensor(lockstep::dtype::f32, {0}, current_device()) {
}

tensor tensor::zeros(lockstep::dtype type, shape_t shape, const device_spec& device) {
  tensor result(type, std::move(shape), device);
  detail::kind_of(result).zero(result.device_, result.buffer_.data(), result.byte_size());
  return result;
}

tensor tensor::uninitialized(lockstep::dtype type, shape_t shape, const device_spec& device) {
  return tensor(type, std::move(shape), device);
}

tensor tensor::filled(lockstep::dtype type, shape_t shape, double value,
                      const device_spec& device) {
  // Memory the host cannot write is filled on the host and copied over.
  if (!detail::kind_of(device).host_accessible)
    return filled(type, std::move(shape), value, cpu_device(0)).to(device);
  tensor result(type, std::move(shape), device);
  visit_dtype(type,
              [&]<class T>(T) { std::ranges::fill(result.data<T>(), static_cast<T>(value)); });
  return result;
}

tensor tensor::from_elements(lockstep::dtype type, const void* elements, std::size_t count,
                             shape_t shape, const device_spec& device) {
  if (!detail::kind_of(device).host_accessible)
    return from_elements(type, elements, count, std::move(shape), cpu_device(0)).to(device);
  tensor result(type, std::move(shape), device);
  if (static_cast<std::size_t>(result.num_elements_) != count)
    throw shape_error("tensor::from: " + std::to_string(count) + " values for shape "
                      + shape_to_string(result.shape_) + " ("
                      + std::to_string(result.num_elements_) + " elements)");
  // Not memcpy: `elements` may be null when `count` is 0.
  std::copy_n(static_cast<const std::byte*>(elements), result.byte_size(),
              static_cast<std::byte*>(result.raw_data()));
  return result;
}

// -- properties and element access --------------------------------------------

std::size_t tensor::byte_size() const {
  return static_cast<std::size_t>(num_elements_) * size_of(dtype_);
}

void tensor::check_element_type(lockstep::dtype requested) const {
  if (requested != dtype_)
    throw dtype_error("tensor::data: requested " + dtype_name(requested)
                      + " elements of a " + dtype_name(dtype_) + " tensor");
}

void tensor::throw_not_host_accessible() const {
  throw device_error("tensor: the buffer of this " + dtype_name(dtype_) + shape_to_string(shape_)
                     + " tensor is in " + std::string(detail::kind_of(*this).name)
                     + " memory of device " + device_.to_string()
                     + ", which the host cannot read; copy it to the host with "
                       "to(device), e.g. t.to(\"/cpu:0\")");
}

void tensor::check_index(std::int64_t flat_index) const {
  if (flat_index < 0 || flat_index >= num_elements_)
    throw value_error("tensor: flat index " + std::to_string(flat_index)
                      + " is out of range for " + std::to_string(num_elements_)
                      + " elements");
}

double tensor::as_double(std::int64_t flat_index) const {
  check_host_accessible();
  check_index(flat_index);
  return visit_dtype(dtype_, [&]<class T>(T) {
    return static_cast<double>(data<T>()[static_cast<std::size_t>(flat_index)]);
  });
}

// -- copies and views ---------------------------------------------------------

tensor tensor::copy() const {
  return to(device_);
}

tensor tensor::to(const device_spec& device) const {
  tensor result(dtype_, shape_, device);
  detail::copy_between(detail::kind_of(*this), detail::kind_of(result))(
    result.device_, result.buffer_.data(), device_, buffer_.data(), byte_size());
  return result;
}

bool tensor::same_buffer(const tensor& other) const {
  return buffer_ == other.buffer_;
}

tensor tensor::reshaped(shape_t shape) const {
  auto count = checked_num_elements(shape);
  if (count != num_elements_)
    throw shape_error("tensor::reshaped: shape " + shape_to_string(shape_) + " vs "
                      + shape_to_string(shape) + " (" + std::to_string(num_elements_)
                      + " vs " + std::to_string(count) + " elements)");
  tensor result = *this;
  result.shape_ = std::move(shape);
  return result;
}

std::string tensor::to_string() const {
  check_host_accessible();
  constexpr std::int64_t max_listed = 8; // beyond this, list 3 + "..." + 3
  std::string result = "tensor<" + dtype_name(dtype_) + ">" + shape_to_string(shape_) + "{";
  visit_dtype(dtype_, [&]<class T>(T) {
    auto elements = data<T>();
    auto append = [&](std::int64_t i) {
      result += (i == 0 ? "" : ", ") + format_element(elements[static_cast<std::size_t>(i)]);
    };
    if (num_elements_ <= max_listed) {
      for (std::int64_t i = 0; i < num_elements_; ++i)
        append(i);
    } else {
      for (std::int64_t i = 0; i < 3; ++i)
        append(i);
      result += ", ...";
      for (std::int64_t i = num_elements_ - 3; i < num_elements_; ++i)
        append(i);
    }
  });
  return result + "} @" + device_.to_string();
}

bool operator==(const tensor& lhs, const tensor& rhs) {
  if (lhs.dtype() != rhs.dtype() || lhs.shape() != rhs.shape())
    return false;
  return visit_dtype(lhs.dtype(),
                     [&]<class T>(T) { return std::ranges::equal(lhs.data<T>(), rhs.data<T>()); });
}

std::ostream& operator<<(std::ostream& out, const tensor& t) {
  return out << t.to_string();
}

} // namespace lockstep
