#include "safetensors.hpp"

#include "lockstep/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <zlib.h>

namespace lockstep::detail {

// Element data is copied between tensors and the file as raw bytes.
static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian elements; lockstep copies them as they are");

namespace {

using json = nlohmann::json;

constexpr std::string_view metadata_key = "__metadata__";

// The reference implementation's limit; real headers are a few MB at most.
constexpr std::uint64_t max_header_length = 100'000'000;

// tensor's own limit, so a shape accepted here always makes a tensor.
constexpr std::int64_t max_elements = std::numeric_limits<std::int64_t>::max() / 8;

std::string_view safetensors_name(dtype type) {
  switch (type) {
    case dtype::f32:
      return "F32";
    case dtype::f64:
      return "F64";
    case dtype::i32:
      return "I32";
    case dtype::i64:
      return "I64";
  }
  throw dtype_error("safetensors: invalid dtype");
}

std::optional<dtype> dtype_of_safetensors_name(std::string_view name) {
  for (auto type : {dtype::f32, dtype::f64, dtype::i32, dtype::i64})
    if (safetensors_name(type) == name)
      return type;
  return std::nullopt;
}

// zlib's crc32 of `bytes` as 8 lowercase hex digits.
std::string crc32_hex(std::string_view bytes) {
  auto crc = crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size());
  char text[9];
  std::snprintf(text, sizeof text, "%08lx", static_cast<unsigned long>(crc));
  return text;
}

std::string_view bytes_of(const tensor& t) {
  return {static_cast<const char*>(t.raw_data()), t.byte_size()};
}

std::string in_quotes(std::string_view text) {
  return "\"" + std::string(text) + "\"";
}

// -- decoding -----------------------------------------------------------------

// A tensor's header entry, validated on its own (not yet against the buffer).
struct header_entry {
  std::string name;
  dtype type;
  shape_t shape;
  std::uint64_t begin;
  std::uint64_t end;
};

// The errors of one decode, each message opening with the source.
class decode_errors {
public:
  explicit decode_errors(const std::string& source) : source_(source) {
  }

  data_loss_error corrupt(const std::string& problem) const {
    return data_loss_error(source_ + ": " + problem);
  }

  data_loss_error corrupt(std::string_view tensor_name, const std::string& problem) const {
    return data_loss_error(source_ + ": tensor " + in_quotes(tensor_name) + ": " + problem);
  }

  dtype_error unsupported(std::string_view tensor_name, const std::string& problem) const {
    return dtype_error(source_ + ": tensor " + in_quotes(tensor_name) + ": " + problem);
  }

private:
  const std::string& source_;
};

std::uint64_t read_u64_le(std::string_view bytes) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i)
    value = (value << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  return value;
}

// The member `key` of the entry `value`, which must be there.
const json& member(const json& value, const char* key, std::string_view name,
                   const decode_errors& errors) {
  auto found = value.find(key);
  if (found == value.end())
    throw errors.corrupt(name, std::string("the entry has no \"") + key + "\"");
  return *found;
}

shape_t parse_shape(const json& value, std::string_view name, const decode_errors& errors) {
  if (!value.is_array())
    throw errors.corrupt(name, "\"shape\" is a JSON " + std::string(value.type_name())
                                   + ", not an array");
  shape_t shape;
  for (const auto& dim : value) {
    if (dim.is_number_integer() && !dim.is_number_unsigned())
      throw errors.corrupt(name, "shape " + value.dump() + " has a negative dimension");
    if (!dim.is_number_unsigned())
      throw errors.corrupt(name, "shape " + value.dump()
                                     + " has a dimension that is not an integer");
    auto size = dim.get<std::uint64_t>();
    if (size > static_cast<std::uint64_t>(max_elements))
      throw errors.corrupt(name, "shape " + value.dump() + " has too many elements");
    shape.push_back(static_cast<std::int64_t>(size));
  }
  return shape;
}

// The element count of `shape`, checked as tensor checks it: dimension by
// dimension, so no product overflows.
std::int64_t checked_num_elements(const shape_t& shape, std::string_view name,
                                  const decode_errors& errors) {
  std::int64_t count = 1;
  for (auto dim : shape) {
    if (dim != 0 && count > max_elements / dim)
      throw errors.corrupt(name, "shape " + shape_to_string(shape) + " has too many elements");
    count *= dim;
  }
  return count;
}

header_entry parse_entry(const std::string& name, const json& value, const decode_errors& errors) {
  if (!value.is_object())
    throw errors.corrupt(name, "the entry is a JSON " + std::string(value.type_name())
                                   + ", not an object");
  header_entry entry{.name = name, .type = dtype::f32, .shape = {}, .begin = 0, .end = 0};

  const auto& type = member(value, "dtype", name, errors);
  if (!type.is_string())
    throw errors.corrupt(name, "\"dtype\" is a JSON " + std::string(type.type_name())
                                   + ", not a string");
  auto type_name = type.get<std::string>();
  auto found_type = dtype_of_safetensors_name(type_name);
  if (!found_type)
    throw errors.unsupported(name, "dtype " + type_name
                                       + " is not supported; lockstep reads F32, F64, I32, I64");
  entry.type = *found_type;

  entry.shape = parse_shape(member(value, "shape", name, errors), name, errors);
  auto elements = checked_num_elements(entry.shape, name, errors);

  const auto& offsets = member(value, "data_offsets", name, errors);
  bool well_formed = offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned()
                     && offsets[1].is_number_unsigned()
                     && offsets[0].get<std::uint64_t>() <= offsets[1].get<std::uint64_t>();
  if (!well_formed)
    throw errors.corrupt(name, "data_offsets " + offsets.dump()
                                   + " is not [begin, end] with integers 0 <= begin <= end");
  entry.begin = offsets[0].get<std::uint64_t>();
  entry.end = offsets[1].get<std::uint64_t>();

  // elements <= max_elements, so the byte count fits.
  auto needed = static_cast<std::uint64_t>(elements) * size_of(entry.type);
  if (entry.end - entry.begin != needed)
    throw errors.corrupt(name, "data_offsets " + offsets.dump() + " span "
                                   + std::to_string(entry.end - entry.begin) + " bytes, but "
                                   + type_name + " " + shape_to_string(entry.shape) + " needs "
                                   + std::to_string(needed));
  return entry;
}

std::map<std::string, std::string> parse_metadata(const json& value, const decode_errors& errors) {
  if (!value.is_object())
    throw errors.corrupt("\"__metadata__\" is a JSON " + std::string(value.type_name())
                         + ", not an object of strings");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, text] : value.items()) {
    if (!text.is_string())
      throw errors.corrupt("\"__metadata__\" maps " + in_quotes(key) + " to a JSON "
                           + std::string(text.type_name()) + ", not a string");
    metadata.emplace(key, text.get<std::string>());
  }
  return metadata;
}

// The spec's layout: the entries tile the buffer exactly, from offset 0 to
// its end, without holes or overlaps. (This also defeats duplicate JSON keys
// that alias one range: the parser keeps one of them and leaves a hole.)
void check_layout(std::vector<header_entry>& entries, std::uint64_t buffer_size,
                  const decode_errors& errors) {
  auto last = std::max_element(entries.begin(), entries.end(),
                               [](const auto& a, const auto& b) { return a.end < b.end; });
  if (last != entries.end() && last->end > buffer_size)
    throw errors.corrupt(last->name, "its data ends at byte " + std::to_string(last->end)
                                         + " of the data buffer, which has only "
                                         + std::to_string(buffer_size) + " bytes (truncated)");
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  std::uint64_t covered = 0;
  const header_entry* previous = nullptr;
  for (const auto& entry : entries) {
    if (entry.begin < covered)
      throw errors.corrupt(entry.name, "its bytes [" + std::to_string(entry.begin) + ", "
                                           + std::to_string(entry.end) + ") overlap tensor "
                                           + in_quotes(previous->name) + "'s");
    if (entry.begin > covered)
      throw errors.corrupt("bytes [" + std::to_string(covered) + ", "
                           + std::to_string(entry.begin) + ") of the data buffer, before tensor "
                           + in_quotes(entry.name) + ", belong to no tensor (a hole)");
    covered = entry.end;
    previous = &entry;
  }
  if (covered != buffer_size)
    throw errors.corrupt("the data buffer has " + std::to_string(buffer_size - covered)
                         + " bytes after the last tensor's data");
}

// Checks the "lockstep.crc32.<name>" keys against the data and removes them.
void verify_checksums(std::map<std::string, std::string>& metadata,
                      const std::map<std::string, std::string_view>& data,
                      const decode_errors& errors) {
  for (auto it = metadata.begin(); it != metadata.end();) {
    if (!it->first.starts_with(crc32_metadata_prefix)) {
      ++it;
      continue;
    }
    auto name = std::string_view(it->first).substr(crc32_metadata_prefix.size());
    auto found = data.find(std::string(name));
    if (found == data.end())
      throw errors.corrupt("\"__metadata__\" holds " + in_quotes(it->first)
                           + ", a checksum of a tensor the file does not hold");
    auto actual = crc32_hex(found->second);
    if (it->second != actual)
      throw errors.corrupt(name, "the crc32 of its data is " + actual
                                     + ", but the file records " + in_quotes(it->second));
    it = metadata.erase(it);
  }
}

// -- reading files ------------------------------------------------------------

[[noreturn]] void throw_read_failure(const char* call, const std::filesystem::path& path) {
  auto reason = std::generic_category().message(errno);
  throw io_error(std::string(call) + " failed on " + in_quotes(path.string()) + ": " + reason);
}

std::string read_whole_file(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd == -1)
    throw_read_failure("open", path);
  // Closes the descriptor however this function ends; closing a file that
  // was only read has nothing to report.
  struct descriptor_closer {
    int fd;
    ~descriptor_closer() { ::close(fd); }
  } close_at_exit{fd};
  struct stat status {};
  if (::fstat(fd, &status) == -1)
    throw_read_failure("fstat", path);
  // One byte more than the size, so that the read which finds the end of the
  // file needs no second allocation.
  std::string bytes(static_cast<std::size_t>(std::max<off_t>(status.st_size, 0)) + 1, '\0');
  std::size_t used = 0;
  for (;;) {
    if (used == bytes.size())
      bytes.resize(bytes.size() * 2); // the file grew while being read
    auto count = ::read(fd, bytes.data() + used, bytes.size() - used);
    if (count == -1 && errno == EINTR)
      continue;
    if (count == -1)
      throw_read_failure("read", path);
    if (count == 0)
      break;
    used += static_cast<std::size_t>(count);
  }
  bytes.resize(used);
  return bytes;
}

} // namespace

// -- encoding -----------------------------------------------------------------

std::string encode_safetensors(const std::vector<named_tensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::map<std::string_view, const tensor*> by_name;
  for (const auto& [name, value] : tensors) {
    if (name.empty())
      throw value_error("encode_safetensors: a tensor name is empty");
    if (name == metadata_key)
      throw value_error("encode_safetensors: \"__metadata__\" names the header's metadata, "
                        "not a tensor");
    if (!by_name.emplace(name, &value).second)
      throw value_error("encode_safetensors: tensor name " + in_quotes(name) + " appears twice");
  }
  for (const auto& [key, value] : metadata)
    if (key.starts_with(crc32_metadata_prefix))
      throw value_error("encode_safetensors: metadata key " + in_quotes(key) + " starts with "
                        + in_quotes(crc32_metadata_prefix) + ", which is reserved for checksums");

  auto all_metadata = metadata;

  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, value] : by_name) {
    auto bytes = bytes_of(*value);
    json entry = json::object();
    entry["dtype"] = safetensors_name(value->dtype());
    entry["shape"] = value->shape();
    entry["data_offsets"] = {offset, offset + bytes.size()};
    header[std::string(name)] = std::move(entry);
    all_metadata[std::string(crc32_metadata_prefix) + std::string(name)] = crc32_hex(bytes);
    offset += bytes.size();
  }
  if (!all_metadata.empty())
    header[std::string(metadata_key)] = all_metadata;

  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const json::type_error& e) {
    throw value_error(std::string("encode_safetensors: tensor names and metadata must be "
                                  "valid UTF-8: ")
                      + e.what());
  }
  // 8 + N is a multiple of 8: the buffer starts 8-byte aligned in the file,
  // as the spec recommends.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::string file;
  file.reserve(8 + header_text.size() + offset);
  for (int i = 0; i < 8; ++i)
    file.push_back(static_cast<char>((header_text.size() >> (8 * i)) & 0xff));
  file += header_text;
  for (const auto& [name, value] : by_name)
    file += bytes_of(*value);
  return file;
}

// -- decoding -----------------------------------------------------------------

safetensors_contents decode_safetensors(std::string_view bytes, const std::string& source,
                                        const device_spec& device) {
  decode_errors errors(source);
  if (bytes.size() < 8)
    throw errors.corrupt("the file has " + std::to_string(bytes.size())
                         + " bytes, fewer than the 8 of the header length (truncated)");
  auto header_length = read_u64_le(bytes);
  if (header_length > max_header_length)
    throw errors.corrupt("the header length " + std::to_string(header_length)
                         + " exceeds the limit of " + std::to_string(max_header_length)
                         + " bytes");
  if (header_length > bytes.size() - 8)
    throw errors.corrupt("the header length " + std::to_string(header_length)
                         + " exceeds the " + std::to_string(bytes.size() - 8)
                         + " bytes after it (truncated)");
  auto header_text = bytes.substr(8, header_length);
  auto buffer = bytes.substr(8 + header_length);

  // nlohmann's parser takes a NUL byte for the end of the input; JSON allows
  // none, so the text after one would be ignored silently.
  if (auto nul = header_text.find('\0'); nul != std::string_view::npos)
    throw errors.corrupt("the header is not valid JSON: it holds a NUL byte at offset "
                         + std::to_string(nul));
  json header;
  try {
    header = json::parse(header_text);
  } catch (const json::parse_error& e) {
    throw errors.corrupt(std::string("the header is not valid JSON: ") + e.what());
  }
  if (!header.is_object())
    throw errors.corrupt("the header is a JSON " + std::string(header.type_name())
                         + ", not an object");

  safetensors_contents contents;
  std::vector<header_entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == metadata_key)
      contents.metadata = parse_metadata(value, errors);
    else
      entries.push_back(parse_entry(name, value, errors));
  }
  check_layout(entries, buffer.size(), errors);

  std::map<std::string, std::string_view> data;
  for (const auto& entry : entries)
    data.emplace(entry.name, buffer.substr(entry.begin, entry.end - entry.begin));
  verify_checksums(contents.metadata, data, errors);

  for (auto& entry : entries) {
    auto value = tensor::zeros(entry.type, std::move(entry.shape), device);
    const auto& source_bytes = data.at(entry.name);
    std::memcpy(value.raw_data(), source_bytes.data(), source_bytes.size());
    contents.tensors.emplace(std::move(entry.name), std::move(value));
  }
  return contents;
}

safetensors_contents read_safetensors(const std::filesystem::path& path,
                                      const device_spec& device) {
  return decode_safetensors(read_whole_file(path), path.string(), device);
}

} // namespace lockstep::detail
