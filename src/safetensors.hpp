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

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/device_spec.hpp"
#include "lockstep/tensor.hpp"

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
  /// The header's "__metadata__", less the "lockstep.crc32.<name>" checksums
  /// (verified while decoding), so it can be passed back to the encoder.
  std::map<std::string, std::string> metadata;
};

/// The prefix of the metadata keys holding each tensor's checksum.
inline constexpr std::string_view crc32_metadata_prefix = "lockstep.crc32.";

/// The bytes of a safetensors file holding `tensors` and `metadata`.
/// Deterministic: the header is nlohmann::json's compact dump (keys in byte
/// order), padded with spaces so the buffer starts at a multiple of 8; the
/// tensors lie in the buffer in name order, without gaps. The metadata gains
/// "lockstep.crc32.<name>" (zlib crc32, 8 lowercase hex digits) for every
/// tensor; "__metadata__" is left out when there is no metadata at all.
/// Throws value_error, naming the culprit, for a duplicate, empty or
/// "__metadata__" tensor name, a metadata key starting with
/// "lockstep.crc32.", or a name or value that is not valid UTF-8.
std::string encode_safetensors(const std::vector<named_tensor>& tensors,
                               const std::map<std::string, std::string>& metadata);

/// Parses and validates the safetensors file `bytes`; the tensors come back
/// on `device`. `source` (a path, usually) opens every error message, which
/// also names the tensor where there is one and the problem. A corrupt or
/// truncated file (including a checksum that does not match) throws
/// data_loss_error; a dtype other than F32, F64, I32, I64 throws dtype_error.
/// Safe on hostile input: every size and offset is checked before use.
safetensors_contents decode_safetensors(std::string_view bytes, const std::string& source,
                                        const device_spec& device = current_device());

/// Reads the whole file at `path` and decodes it as `decode_safetensors`
/// (with the path as the source). Throws io_error, naming the path and the
/// system's reason, if the file cannot be read.
safetensors_contents read_safetensors(const std::filesystem::path& path,
                                      const device_spec& device = current_device());

} // namespace lockstep::detail
