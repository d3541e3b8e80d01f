#pragma once

// NCCL calls checked, as cuda_check.hpp checks the CUDA runtime's: a
// failure becomes lockstep::device_error naming the call, the device and
// NCCL's words. Built only with NCCL (meson option `nccl`).

#include <nccl.h>

#include <string>

namespace lockstep::detail {

/// NCCL's words for `code`: "<ncclGetErrorString> (<code>)", and its last
/// error message where it has one.
std::string nccl_error_text(ncclResult_t code);

/// Throws device_error for `code` from `call` (its text) at file:line:
/// "<call> failed on CUDA device <d>: <nccl_error_text> at <file>:<line>".
[[noreturn]] void throw_nccl_error(ncclResult_t code, const char* call, const char* file,
                                   int line);

} // namespace lockstep::detail

/// Runs an NCCL call; throws lockstep::device_error when it fails.
#define LOCKSTEP_NCCL_CHECK(call)                                                                  \
  do {                                                                                             \
    const ncclResult_t lockstep_nccl_code = (call);                                                \
    if (lockstep_nccl_code != ncclSuccess)                                                         \
      ::lockstep::detail::throw_nccl_error(lockstep_nccl_code, #call, __FILE__, __LINE__);        \
  } while (false)
