#pragma once

// The safetensors file format (github.com/huggingface/safetensors), the
// container of lockstep's checkpoints:
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header][byte buffer]
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets"},
// offsets relative to the start of the byte buffer; the optional key
// "__metadata__" maps to an object of strings. lockstep reads and writes the
// dtypes F32, F64, I32 and I64.
//
// lockstep adds checksums in "__metadata__", which any reader may ignore:
// "lockstep.crc32.<name>" for each tensor's bytes, and
// "lockstep.header_crc32" for the header itself (the 8 length bytes and the
// N header bytes, computed with the field's own 8 hex digits written as
// "00000000"). Every byte of a file lockstep writes is covered: the length
// and header by the header checksum, the buffer by the tensors' checksums
// and the exact tiling that the header promises.
//
// Reading validates the header before any tensor byte is read: the length
// against the file's size, then the header, then the file's size against
// the size the header promises; only then are the tensors allocated (as
// much memory as the valid header promises) and read.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/device_spec.hpp"
#include "lockstep/tensor.hpp"
#include "io/regular_file.hpp"

namespace lockstep::detail {

/// One tensor to write, with the name it is stored under.
struct named_tensor {
  std::string name;
  tensor value;
};

/// What a safetensors file holds.
struct safetensors_contents {
  /// The tensors, by name.
  std::map<std::string, tensor> tensors;
  /// The header's "__metadata__", less lockstep's checksums (verified while
  /// decoding), so it can be passed back to the encoder.
  std::map<std::string, std::string> metadata;
};

/// The prefix of the metadata keys holding each tensor's checksum.
inline constexpr std::string_view crc32_metadata_prefix = "lockstep.crc32.";

/// The metadata key holding the header's checksum.
inline constexpr std::string_view header_crc32_metadata_key = "lockstep.header_crc32";

/// One tensor's entry in a validated header.
struct safetensors_entry {
  std::string name;
  dtype type;
  shape_t shape;
  /// Its bytes are [begin, end) of the byte buffer.
  std::uint64_t begin;
  std::uint64_t end;
};

/// A validated header: everything a safetensors file says about itself,
/// checked against itself and against the file's size.
struct safetensors_header {
  /// N, the header's length in bytes.
  std::uint64_t length = 0;
  /// The tensors, by offset; they tile the byte buffer exactly.
  std::vector<safetensors_entry> entries;
  /// "__metadata__" less lockstep's checksums.
  std::map<std::string, std::string> metadata;
  /// The recorded checksum (8 hex digits) of each tensor that has one.
  std::map<std::string, std::string> checksums;
  /// Whether the header carried "lockstep.header_crc32" (which then matched).
  bool has_header_checksum = false;

  /// Where the byte buffer starts in the file: 8 + N.
  std::uint64_t buffer_offset() const noexcept { return 8 + length; }
  /// The size of the file the header promises: 8 + N + the buffer's bytes.
  std::uint64_t file_size() const noexcept;
};

/// The bytes of a safetensors file holding `tensors` and `metadata`.
/// Deterministic: the header is nlohmann::json's compact dump (keys in byte
/// order), padded with spaces so the buffer starts at a multiple of 8; the
/// tensors lie in the buffer in name order, without gaps. The metadata gains
/// "lockstep.crc32.<name>" (zlib crc32, 8 lowercase hex digits) for every
/// tensor and "lockstep.header_crc32" for the header. Throws value_error,
/// naming the culprit, for a duplicate, empty or "__metadata__" tensor name,
/// a metadata key starting with "lockstep.crc32." or equal to
/// "lockstep.header_crc32", or a name or value that is not valid UTF-8.
std::string encode_safetensors(const std::vector<named_tensor>& tensors,
                               const std::map<std::string, std::string>& metadata);

/// Reads the header length N from `first_bytes` (the file's first 8 bytes,
/// or all of a shorter file) and checks it against the limit (100 MB) and
/// against `file_size`. data_loss_error naming `source`, "the header
/// length" and the problem.
std::uint64_t decode_header_length(std::string_view first_bytes, std::uint64_t file_size,
                                   const std::string& source);

/// Validates the header in `prefix` (the file's first 8 + N bytes, N as
/// `decode_header_length` returned it) of a file of `file_size` bytes: the
/// header checksum if there is one, the JSON, every entry, the metadata,
/// that every "lockstep.crc32.<name>" names a tensor, and that the entries
/// tile a buffer of exactly the bytes that follow the header. Reads no
/// tensor bytes. data_loss_error naming `source`, the part (header, tensor,
/// "__metadata__") and the problem; dtype_error for a dtype lockstep does
/// not read.
safetensors_header decode_safetensors_header(std::string_view prefix, std::uint64_t file_size,
                                             const std::string& source);

/// Parses and validates the safetensors file `bytes`; the tensors come back
/// on `device`. `source` (a path, usually) opens every error message, which
/// also names the tensor where there is one and the problem. A corrupt or
/// truncated file (including a checksum that does not match) throws
/// data_loss_error; a dtype other than F32, F64, I32, I64 throws dtype_error;
/// memory running out for a tensor throws resource_error naming the source,
/// the tensor and its bytes. Safe on hostile input: every size and offset
/// is checked before use. Checksums are verified where present; whether one
/// must be present is the caller's rule (see checkpoint.cpp).
safetensors_contents decode_safetensors(std::string_view bytes, const std::string& source,
                                        const device_spec& device = current_device());

/// A safetensors file open for reading, its header read and validated
/// (`decode_safetensors_header`) and its size checked against the header
/// before any tensor byte is read or allocated. Move-only.
class safetensors_file {
public:
  /// Opens `path` as `regular_file::open` does (a FIFO, device, socket or
  /// directory is refused by type with io_error, without blocking) and
  /// validates its header: it reads the 8-byte length, checks it against
  /// the file's size before allocating the header, reads and validates the
  /// header, and refuses a file whose size differs from the size the header
  /// promises (data_loss_error; nothing of the buffer is read).
  /// resource_error naming the path and the bytes when memory runs out.
  static safetensors_file open(const std::filesystem::path& path);

  const safetensors_header& header() const noexcept { return header_; }
  const std::filesystem::path& path() const noexcept { return file_.path(); }

  /// Reads every tensor onto `device`, straight into its own buffer, and
  /// verifies each recorded checksum. data_loss_error naming the path and
  /// the tensor for a mismatch or a file that shrank; resource_error naming
  /// the path, the tensor and its bytes when memory runs out.
  std::map<std::string, tensor> read_tensors(const device_spec& device = current_device()) const;

  /// Verifies each recorded checksum, reading through one buffer of at most
  /// 1 MiB: what `read_tensors` checks, without the tensors' memory.
  void verify_tensors() const;

private:
  safetensors_file(regular_file file, safetensors_header header)
    : file_(std::move(file)), header_(std::move(header)) {}

  regular_file file_;
  safetensors_header header_;
};

/// Reads the file at `path` with `safetensors_file` (the path names every
/// error) and returns its tensors, on `device`, and its metadata.
safetensors_contents read_safetensors(const std::filesystem::path& path,
                                      const device_spec& device = current_device());

} // namespace lockstep::detail
