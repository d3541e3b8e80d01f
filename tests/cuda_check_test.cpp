// LOCKSTEP_CUDA_CHECK (src/devices/cuda/cuda_check.hpp), on any machine
// with the CUDA toolkit, a GPU or not: a failed runtime call becomes a
// device_error naming the call, the device and the runtime's message, and
// counting the devices never throws.

#include "devices/cuda/cuda_check.hpp"

#include "lockstep/error.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <string>

using lockstep::device_error;
using lockstep::detail::cuda_device_count;

namespace {

cudaError_t fails_with(cudaError_t code) {
  return code;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("a failed CUDA call is a device_error naming the call and the runtime's words") {
  const auto message = error_of<device_error>(
    [] { LOCKSTEP_CUDA_CHECK(fails_with(cudaErrorMemoryAllocation)); });
  CHECK(has(message, "fails_with(cudaErrorMemoryAllocation) failed on "));
  CHECK(has(message, "out of memory"));
  CHECK(has(message, "(cudaErrorMemoryAllocation)"));
  CHECK(has(message, "cuda_check_test.cpp:"));
  LOCKSTEP_CUDA_CHECK(fails_with(cudaSuccess)); // success passes through
}

TEST_CASE("counting devices never throws; a device past the last is a device_error") {
  const int count = cuda_device_count(); // 0 without a driver or a GPU
  CHECK(count >= 0);
  // Without a device the runtime refuses every device; with N, device N.
  const auto message = error_of<device_error>([&] { LOCKSTEP_CUDA_CHECK(cudaSetDevice(count)); });
  CHECK(has(message, "cudaSetDevice(count) failed on "));
  // With a driver, the failure leaves no error behind for the next call to
  // trip on (without one, the runtime keeps answering that it has none).
  if (count > 0)
    CHECK(cudaGetLastError() == cudaSuccess);
}
