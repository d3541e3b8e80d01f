// The `gpu` suite's first test: device memory through LOCKSTEP_CUDA_CHECK,
// a round trip host -> device -> device -> host compared byte for byte.
// Exits 77 (skipped) where the process sees no CUDA device.

#include "devices/cuda/cuda_check.hpp"

#include "lockstep/error.hpp"

#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  using lockstep::detail::cuda_device_count;
  const int devices = cuda_device_count();
  if (devices == 0) {
    std::printf("gpu_smoke: no CUDA device visible: skipped\n");
    return 77;
  }
  try {
    for (int d = 0; d < devices; ++d) {
      LOCKSTEP_CUDA_CHECK(cudaSetDevice(d));
      constexpr std::size_t bytes = 1 << 20;
      std::vector<unsigned char> out(bytes), back(bytes, 0);
      for (std::size_t i = 0; i < bytes; ++i)
        out[i] = static_cast<unsigned char>(i * 7 + static_cast<std::size_t>(d));
      void* first = nullptr;
      void* second = nullptr;
      LOCKSTEP_CUDA_CHECK(cudaMalloc(&first, bytes));
      LOCKSTEP_CUDA_CHECK(cudaMalloc(&second, bytes));
      LOCKSTEP_CUDA_CHECK(cudaMemcpy(first, out.data(), bytes, cudaMemcpyHostToDevice));
      LOCKSTEP_CUDA_CHECK(cudaMemcpy(second, first, bytes, cudaMemcpyDeviceToDevice));
      LOCKSTEP_CUDA_CHECK(cudaMemcpy(back.data(), second, bytes, cudaMemcpyDeviceToHost));
      LOCKSTEP_CUDA_CHECK(cudaFree(first));
      LOCKSTEP_CUDA_CHECK(cudaFree(second));
      if (std::memcmp(out.data(), back.data(), bytes) != 0) {
        std::fprintf(stderr, "gpu_smoke: device %d returned other bytes\n", d);
        return 1;
      }
    }
    // An allocation no device has: the error names the call.
    void* huge = nullptr;
    try {
      LOCKSTEP_CUDA_CHECK(cudaMalloc(&huge, std::size_t{1} << 62));
      std::fprintf(stderr, "gpu_smoke: a 4 EiB allocation succeeded\n");
      return 1;
    } catch (const lockstep::device_error& e) {
      if (std::strstr(e.what(), "cudaMalloc(&huge") == nullptr) {
        std::fprintf(stderr, "gpu_smoke: the error does not name the call: %s\n", e.what());
        return 1;
      }
    }
    std::printf("gpu_smoke: %d device(s): memory round trips and errors as device_error\n",
                devices);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_smoke: %s\n", e.what());
    return 1;
  }
}
