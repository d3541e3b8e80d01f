#include "devices/cuda/cuda_check.hpp"

#include "lockstep/error.hpp"

#include <string>

namespace lockstep::detail {

void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  // A failed call leaves its error as the runtime's last one; clear it, so
  // the next call is judged on its own (a sticky error stays regardless).
  (void) cudaGetLastError();
  throw device_error(std::string{call} + " failed on " + current_cuda_device_text() + ": "
                     + cudaGetErrorString(code) + " (" + cudaGetErrorName(code) + ") at "
                     + file + ":" + std::to_string(line));
}

std::string current_cuda_device_text() {
  int device = -1;
  const bool known = cudaGetDevice(&device) == cudaSuccess;
  (void) cudaGetLastError();
  return known ? "CUDA device " + std::to_string(device) : "no current CUDA device";
}

cuda_device_keeper::cuda_device_keeper() noexcept
  : known_(cudaGetDevice(&device_) == cudaSuccess) {
  (void) cudaGetLastError();
}

cuda_device_keeper::~cuda_device_keeper() {
  if (known_)
    (void) cudaSetDevice(device_);
  (void) cudaGetLastError();
}

int cuda_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void) cudaGetLastError(); // no driver or no device: the CPU it is
    return 0;
  }
  return count;
}

} // namespace lockstep::detail
