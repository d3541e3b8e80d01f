#pragma once

// A reader for the IDX format, in which MNIST and Fashion-MNIST ship: a
// 4-byte magic (0x00 0x00, an element type code, the number of dimensions),
// one big-endian 32-bit size per dimension, then the elements in row-major
// order. Files may be gzip-compressed (as the datasets are distributed) or
// plain.

#include "lockstep/tensor.hpp"

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

namespace lockstep {

/// The contents of an IDX file of unsigned bytes (type code 0x08), the one
/// element type lockstep reads.
struct idx_array {
  /// The dimensions, outermost first (e.g. {60000, 28, 28}).
  shape_t dims;
  /// The elements in row-major order: as many as the product of `dims`.
  std::vector<std::uint8_t> data;
};

/// Reads the IDX file at `path`, gzip-compressed (its name ends in ".gz" or
/// it starts with gzip's magic) or plain. Only a regular file (or a
/// symbolic link to one) is read: a FIFO, socket, device or directory is
/// refused by its type, without blocking on it, with an io_error naming the
/// path and what it is; io_error also names the file and the system's
/// reason if it cannot be opened or read. data_loss_error names the file
/// and the problem if the gzip stream is corrupt or truncated, the magic is
/// wrong, the type code is unknown, the header or the elements are cut
/// short, bytes follow the elements, or the dimensions declare more bytes
/// than the file can hold; value_error for a valid IDX type other than
/// unsigned bytes (0x09 signed bytes, 0x0B int16, 0x0C int32, 0x0D float32,
/// 0x0E float64).
///
/// Memory: the header is read and checked before anything is allocated for
/// the elements. A plain file must be exactly header + elements long, so
/// at most its size is allocated. A gzip stream is inflated a piece at a
/// time and only up to the element bytes the header declares (a declared
/// size beyond deflate's limit of 1032 bytes per compressed byte is refused
/// at once); the elements get a buffer of at most max(1 MiB, 8 x the
/// compressed size) that doubles only as inflated data fills it, and one
/// 64 KiB probe past the elements detects trailing data without inflating
/// the rest. Running out of memory is a resource_error naming the file and
/// the bytes the elements need, never a bare std::bad_alloc.
idx_array read_idx(const std::filesystem::path& path);

/// Parses IDX `bytes` already in memory (plain or gzip, by gzip's magic);
/// `source` names them in errors. Throws as `read_idx`, except io_error,
/// and bounds memory as it does.
idx_array parse_idx(std::string_view bytes, std::string_view source);

/// Images [n, rows, cols] as a float32 tensor [n, rows * cols] with every
/// byte scaled to [0, 1] (x / 255). Throws value_error unless `images` has
/// three dimensions.
tensor idx_images_to_tensor(const idx_array& images);

/// Labels [n] as an int64 tensor [n]. Throws value_error unless `labels`
/// has one dimension.
tensor idx_labels_to_tensor(const idx_array& labels);

/// Images and labels of one split of an MNIST-style dataset.
struct mnist_split {
  /// float32 [n, rows * cols], scaled to [0, 1].
  tensor images;
  /// int64 [n].
  tensor labels;
};

/// An MNIST-style dataset: the training and the test split.
struct mnist_dataset {
  mnist_split train;
  mnist_split test;
  /// Rows and columns of one image (28 x 28 for MNIST and Fashion-MNIST).
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

/// Where Debian's dataset-fashion-mnist package installs Fashion-MNIST.
inline constexpr std::string_view fashion_mnist_directory = "/usr/share/datasets/fashion-mnist";

/// Loads the four files of MNIST or Fashion-MNIST from `directory`:
/// train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte
/// and t10k-labels-idx1-ubyte, each with ".gz" if present, else plain.
/// Throws as `read_idx` (io_error names a missing file or one that is not
/// a regular file), data_loss_error naming both files if a split's image
/// and label counts differ or the two splits' images differ in size, and
/// resource_error naming the file if its tensor cannot be allocated.
///
/// The four headers are read (only they are inflated) and checked first,
/// each against its file as `read_idx` checks it and against the others
/// (images [n, rows, cols] and labels [n] with the same n, both splits of
/// the same rows x cols); only then is any file read in full. So files
/// that disagree cost their headers, whatever size the images claim.
mnist_dataset load_mnist(const std::filesystem::path& directory);

} // namespace lockstep
