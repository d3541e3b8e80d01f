#include "devices/cuda/nccl_check.hpp"

#include "lockstep/error.hpp"

#include <cuda_runtime_api.h>

namespace lockstep::detail {

std::string nccl_error_text(ncclResult_t code) {
  std::string text = std::string{ncclGetErrorString(code)} + " (ncclResult_t "
                     + std::to_string(static_cast<int>(code)) + ")";
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0')
    text += "; NCCL's last error: " + std::string{last};
  return text;
}

void throw_nccl_error(ncclResult_t code, const char* call, const char* file, int line) {
  int device = -1;
  const bool known = cudaGetDevice(&device) == cudaSuccess;
  (void) cudaGetLastError();
  throw device_error(std::string{call} + " failed on "
                     + (known ? "CUDA device " + std::to_string(device)
                              : std::string{"no current CUDA device"})
                     + ": " + nccl_error_text(code) + " at " + file + ":"
                     + std::to_string(line));
}

} // namespace lockstep::detail
