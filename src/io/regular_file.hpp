#pragma once

// Input files that lockstep reads whole (checkpoints, IDX data): opened
// only when they are regular files, so a FIFO, socket or device at the path
// is refused by its type instead of blocking the reader or feeding it an
// endless stream, and read with the size known before anything is
// allocated.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "io/file_descriptor.hpp"

namespace lockstep::detail {

/// A regular file open for reading. Move-only; closes on destruction.
class regular_file {
public:
  /// Opens `path`, following symbolic links, without blocking: anything
  /// but a regular file (a directory, FIFO, socket, character or block
  /// device, or a link to one) throws io_error naming the path and what it
  /// is, before it is opened where that can be told from its status.
  /// io_error names the path and the system's reason when it cannot be
  /// opened at all.
  static regular_file open(const std::filesystem::path& path);

  /// The size in bytes when the file was opened.
  std::uint64_t size() const noexcept { return size_; }

  const std::filesystem::path& path() const noexcept { return path_; }

  /// Reads up to `count` bytes at `offset` into `into`, resuming after
  /// signals and short reads; fewer only at the end of the file. io_error
  /// naming the path for a failed read.
  std::size_t read_at(std::uint64_t offset, void* into, std::size_t count) const;

  /// Reads the whole file (`size()` bytes); data_loss_error naming the
  /// path if it shrank while being read.
  std::string read_all() const;

private:
  regular_file(std::filesystem::path path, file_descriptor fd) noexcept
    : path_(std::move(path)), fd_(std::move(fd)) {}

  std::filesystem::path path_;
  file_descriptor fd_;
  std::uint64_t size_ = 0;
};

/// What the file mode `mode` (st_mode) is, in words: "a regular file",
/// "a directory", "a FIFO (named pipe)", ...
std::string describe_file_type(unsigned mode);

} // namespace lockstep::detail
