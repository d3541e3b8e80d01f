// The main of the 'gpu' suite's doctest binaries: exits 77, which meson
// counts as skipped, when the process sees no CUDA device (no GPU, no
// driver, or CUDA_VISIBLE_DEVICES hiding them); else runs the tests.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "devices/cuda/cuda_check.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  if (lockstep::detail::cuda_device_count() == 0) {
    std::printf("no CUDA device visible: skipped\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
