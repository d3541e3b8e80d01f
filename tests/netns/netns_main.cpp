// The main of the netns suite's doctest binaries: exits 77, which meson
// counts as skipped, when this process cannot build a network of
// namespaces (not root, no `ip`, namespaces or bridges not allowed); else
// runs the tests.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "network_lab.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  if (const auto why = network_lab_unavailable(); !why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
