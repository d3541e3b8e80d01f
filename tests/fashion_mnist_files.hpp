#pragma once

// Made-up Fashion-MNIST files for tests that run the main job: IDX files of
// 28x28 random images with labels 0-9 in turn, small enough to train on in
// a second.

#include "file_support.hpp"

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

/// An IDX file: magic 0 0 8 (unsigned bytes) and the rank, the dimensions
/// as big-endian u32, then the bytes.
inline void write_idx(const std::filesystem::path& path, const std::vector<std::uint32_t>& dims,
                      const std::string& bytes) {
  std::string file{'\0', '\0', '\x08', static_cast<char>(dims.size())};
  for (auto d : dims)
    for (int shift = 24; shift >= 0; shift -= 8)
      file += static_cast<char>((d >> shift) & 0xff);
  write_file(path, file + bytes);
}

/// A Fashion-MNIST-shaped data set in `dir`: `train` and `test` images of
/// 28x28 random bytes with labels 0-9 in turn.
inline void write_data(const std::filesystem::path& dir, std::uint32_t train, std::uint32_t test) {
  std::filesystem::create_directories(dir);
  std::mt19937 generator{5};
  const auto split = [&](const char* images, const char* labels, std::uint32_t n) {
    std::string pixels(std::size_t{n} * 784, '\0');
    for (auto& p : pixels)
      p = static_cast<char>(generator() & 0xff);
    std::string classes(n, '\0');
    for (std::uint32_t i = 0; i < n; ++i)
      classes[i] = static_cast<char>(i % 10);
    write_idx(dir / images, {n, 28, 28}, pixels);
    write_idx(dir / labels, {n}, classes);
  };
  split("train-images-idx3-ubyte", "train-labels-idx1-ubyte", train);
  split("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", test);
}
