// LOCKSTEP_CUDA_CHECK (src/devices/cuda/cuda_check.hpp), on any machine
// with the CUDA toolkit, a GPU or not: a failed runtime call becomes a
// device_error naming the call, the device and the runtime's message, and
// counting the devices never throws. With NCCL, LOCKSTEP_NCCL_CHECK and
// nccl_error_text alike (NCCL's error strings need no device).

#include "devices/cuda/cuda_check.hpp"

#include "lockstep/config.hpp"

#if LOCKSTEP_HAVE_NCCL
#include "devices/cuda/nccl_check.hpp"
#endif

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

#if LOCKSTEP_HAVE_NCCL

namespace {

ncclResult_t nccl_fails_with(ncclResult_t code) {
  return code;
}

} // namespace

TEST_CASE("nccl_error_text: NCCL's words and the code") {
  using lockstep::detail::nccl_error_text;
  for (auto code : {ncclUnhandledCudaError, ncclSystemError, ncclInternalError,
                    ncclInvalidArgument, ncclInvalidUsage, ncclRemoteError}) {
    CAPTURE(static_cast<int>(code));
    const auto text = nccl_error_text(code);
    CHECK(has(text, ncclGetErrorString(code)));
    CHECK(has(text, "(ncclResult_t " + std::to_string(static_cast<int>(code)) + ")"));
  }
  CHECK(has(nccl_error_text(ncclInvalidArgument), "(ncclResult_t 4)"));
}

TEST_CASE("a failed NCCL call is a device_error naming the call, NCCL's words and the place") {
  const auto message = error_of<device_error>(
    [] { LOCKSTEP_NCCL_CHECK(nccl_fails_with(ncclInvalidUsage)); });
  CHECK(has(message, "nccl_fails_with(ncclInvalidUsage) failed on "));
  CHECK(has(message, ncclGetErrorString(ncclInvalidUsage)));
  CHECK(has(message, "(ncclResult_t 5)"));
  CHECK(has(message, "cuda_check_test.cpp:"));
  // Without a device: "no current CUDA device"; with one: its number.
  CHECK((has(message, "no current CUDA device") || has(message, "CUDA device ")));
  LOCKSTEP_NCCL_CHECK(nccl_fails_with(ncclSuccess)); // success passes through

  const auto direct = error_of<device_error>([] {
    lockstep::detail::throw_nccl_error(ncclSystemError, "ncclCommInitAll(...)", "here.cpp", 42);
  });
  CHECK(has(direct, "ncclCommInitAll(...) failed on "));
  CHECK(has(direct, "(ncclResult_t 2)"));
  CHECK(has(direct, " at here.cpp:42"));
}

#endif
