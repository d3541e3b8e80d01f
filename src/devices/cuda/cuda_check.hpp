#pragma once

// CUDA runtime calls checked: a failure becomes lockstep::device_error
// naming the call, the device and the runtime's message (as c10d's
// C10_CUDA_CHECK does), never a code to be forgotten. Built only where the
// CUDA toolkit is (meson option `cuda`).

#include <cuda_runtime_api.h>

#include <string>

namespace lockstep::detail {

/// Throws device_error for `code` from `call` (its text) at file:line:
/// "<call> failed on CUDA device <d>: <message> (<name>) at <file>:<line>".
[[noreturn]] void throw_cuda_error(cudaError_t code, const char* call, const char* file,
                                   int line);

/// "CUDA device <d>" for the calling thread's current device, or "no
/// current CUDA device"; leaves no error behind (for error messages).
std::string current_cuda_device_text();

/// Restores the calling thread's current CUDA device when it goes, around
/// calls that change it (cudaSetDevice on teardown paths, NCCL's abort and
/// destroy). Never throws.
class cuda_device_keeper {
public:
  cuda_device_keeper() noexcept;
  ~cuda_device_keeper();
  cuda_device_keeper(const cuda_device_keeper&) = delete;
  cuda_device_keeper& operator=(const cuda_device_keeper&) = delete;

private:
  int device_ = -1;
  bool known_ = false;
};

/// The CUDA devices this process may use (CUDA_VISIBLE_DEVICES applies);
/// 0 where there is no driver or no device. Never throws: a program linked
/// with the CUDA backend runs on the CPU on such a machine.
int cuda_device_count() noexcept;

} // namespace lockstep::detail

/// Runs a CUDA runtime call; throws lockstep::device_error when it fails.
#define LOCKSTEP_CUDA_CHECK(call)                                                                  \
  do {                                                                                             \
    const cudaError_t lockstep_cuda_code = (call);                                                 \
    if (lockstep_cuda_code != cudaSuccess)                                                         \
      ::lockstep::detail::throw_cuda_error(lockstep_cuda_code, #call, __FILE__, __LINE__);        \
  } while (false)
