#include "devices/cuda/nccl_check.hpp"

#include "lockstep/error.hpp"

#include "devices/cuda/cuda_check.hpp"

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
  throw device_error(std::string{call} + " failed on " + current_cuda_device_text() + ": "
                     + nccl_error_text(code) + " at " + file + ":"
                     + std::to_string(line));
}

} // namespace lockstep::detail
