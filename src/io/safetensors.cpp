#include "io/safetensors.hpp"

#include "lockstep/error.hpp"

#include "runtime/error_text.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <string>
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

// The format's nesting: the header object, an entry (or "__metadata__")
// object in it, and an entry's "shape" and "data_offsets" arrays.
constexpr std::size_t max_header_depth = 3;

// The JSON keys and values a header may hold: a tensor's entry takes about
// 14 (its name, three keys and their values, its shape's dimensions, two
// offsets, its checksum's key and value), so some 70,000 tensors. The
// parsed tree costs up to about 140 bytes for each (a map node with its
// key), so at most about 150 MB, whatever the header's length.
constexpr std::size_t max_header_items = std::size_t{1} << 20;

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
    case dtype::f16:
      return "F16";
    case dtype::bf16:
      return "BF16";
  }
  throw dtype_error("safetensors: invalid dtype");
}

std::optional<dtype> dtype_of_safetensors_name(std::string_view name) {
  for (auto type : {dtype::f32, dtype::f64, dtype::i32, dtype::i64, dtype::f16, dtype::bf16})
    if (safetensors_name(type) == name)
      return type;
  return std::nullopt;
}

// A crc32 as 8 lowercase hex digits.
std::string crc32_hex(std::uint32_t crc) {
  char text[9];
  std::snprintf(text, sizeof text, "%08lx", static_cast<unsigned long>(crc));
  return text;
}

std::string_view bytes_of(const tensor& t) {
  return {static_cast<const char*>(t.raw_data()), t.byte_size()};
}

// -- decoding -----------------------------------------------------------------


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

  resource_error out_of_memory(const std::string& what, std::uint64_t bytes) const {
    return resource_error(source_ + ": memory ran out allocating " + std::to_string(bytes)
                          + " bytes for " + what);
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

/// `text`, or its first `max_bytes` and how long it was.
std::string cut_text(std::string text, std::size_t max_bytes) {
  if (text.size() > max_bytes)
    text = text.substr(0, max_bytes) + "... (" + std::to_string(text.size()) + " bytes)";
  return text;
}

/// `value` as compact JSON for an error message, cut as lists in lockstep's
/// errors are: a hostile header's array of millions of items shows its
/// first few, and a text of megabytes its first bytes.
std::string json_excerpt(const json& value) {
  constexpr std::size_t max_bytes = 64;
  if (value.is_array() && value.size() > items_in_errors + 1) {
    std::string out = "[";
    for (std::size_t i = 0; i < items_in_errors; ++i)
      out += json_excerpt(value[i]) + ",";
    return out + "... and " + std::to_string(value.size() - items_in_errors) + " more]";
  }
  return cut_text(value.dump(), max_bytes);
}

shape_t parse_shape(const json& value, std::string_view name, const decode_errors& errors) {
  if (!value.is_array())
    throw errors.corrupt(name, "\"shape\" is a JSON " + std::string(value.type_name())
                                   + ", not an array");
  shape_t shape;
  for (const auto& dim : value) {
    if (dim.is_number_integer() && !dim.is_number_unsigned())
      throw errors.corrupt(name, "shape " + json_excerpt(value) + " has a negative dimension");
    if (!dim.is_number_unsigned())
      throw errors.corrupt(name, "shape " + json_excerpt(value)
                                     + " has a dimension that is not an integer");
    auto size = dim.get<std::uint64_t>();
    if (size > static_cast<std::uint64_t>(max_elements))
      throw errors.corrupt(name, "shape " + json_excerpt(value) + " has too many elements");
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

safetensors_entry parse_entry(const std::string& name, const json& value,
                              const decode_errors& errors) {
  if (!value.is_object())
    throw errors.corrupt(name, "the entry is a JSON " + std::string(value.type_name())
                                   + ", not an object");
  safetensors_entry entry{.name = name, .type = dtype::f32, .shape = {}, .begin = 0, .end = 0};

  const auto& type = member(value, "dtype", name, errors);
  if (!type.is_string())
    throw errors.corrupt(name, "\"dtype\" is a JSON " + std::string(type.type_name())
                                   + ", not a string");
  auto type_name = type.get<std::string>();
  auto found_type = dtype_of_safetensors_name(type_name);
  if (!found_type)
    throw errors.unsupported(name, "dtype " + cut_text(type_name, 64)
                                       + " is not supported; lockstep reads F32, F64, I32, I64, F16, BF16");
  entry.type = *found_type;

  entry.shape = parse_shape(member(value, "shape", name, errors), name, errors);
  auto elements = checked_num_elements(entry.shape, name, errors);

  const auto& offsets = member(value, "data_offsets", name, errors);
  bool well_formed = offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned()
                     && offsets[1].is_number_unsigned()
                     && offsets[0].get<std::uint64_t>() <= offsets[1].get<std::uint64_t>();
  if (!well_formed)
    throw errors.corrupt(name, "data_offsets " + json_excerpt(offsets)
                                   + " is not [begin, end] with integers 0 <= begin <= end");
  entry.begin = offsets[0].get<std::uint64_t>();
  entry.end = offsets[1].get<std::uint64_t>();

  // elements <= max_elements, so the byte count fits.
  auto needed = static_cast<std::uint64_t>(elements) * size_of(entry.type);
  if (entry.end - entry.begin != needed)
    throw errors.corrupt(name, "data_offsets " + json_excerpt(offsets) + " span "
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
void check_layout(std::vector<safetensors_entry>& entries, std::uint64_t buffer_size,
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
  const safetensors_entry* previous = nullptr;
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

// Moves the "lockstep.crc32.<name>" keys out of `metadata` into the
// header's checksums; each must name a tensor of the file.
void take_checksums(safetensors_header& header, const decode_errors& errors) {
  auto& metadata = header.metadata;
  std::set<std::string_view> names;
  for (const auto& entry : header.entries)
    names.insert(entry.name);
  for (auto it = metadata.begin(); it != metadata.end();) {
    if (!it->first.starts_with(crc32_metadata_prefix)) {
      ++it;
      continue;
    }
    auto name = it->first.substr(crc32_metadata_prefix.size());
    if (!names.contains(name))
      throw errors.corrupt("\"__metadata__\" holds " + in_quotes(it->first)
                           + ", a checksum of a tensor the file does not hold");
    header.checksums.emplace(std::move(name), std::move(it->second));
    it = metadata.erase(it);
  }
}

// Checks the crc32 `actual` of tensor `name`'s bytes against the checksum
// the header records, if it records one.
void check_tensor_checksum(const safetensors_header& header, const std::string& name,
                           std::uint32_t actual, const decode_errors& errors) {
  auto recorded = header.checksums.find(name);
  if (recorded == header.checksums.end())
    return;
  auto actual_hex = crc32_hex(actual);
  if (recorded->second != actual_hex)
    throw errors.corrupt(name, "the crc32 of its data is " + actual_hex + ", but the file records "
                                   + in_quotes(recorded->second));
}

std::uint32_t crc32_of(std::string_view bytes, std::uint32_t crc = 0) {
  return static_cast<std::uint32_t>(
    crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

// The memory for `entry`'s tensor on `device`, to be filled with its bytes;
// resource_error naming the tensor when it runs out.
tensor allocate_tensor(const safetensors_entry& entry, const device_spec& device,
                       const decode_errors& errors) {
  try {
    return tensor::uninitialized(entry.type, entry.shape, device);
  } catch (const std::bad_alloc&) {
    throw errors.out_of_memory("tensor " + in_quotes(entry.name), entry.end - entry.begin);
  }
}

// Reads `count` bytes of tensor `name` at `offset` of `file`; a file that
// shrank since its size was checked is corrupt.
void read_tensor_bytes(const regular_file& file, std::uint64_t offset, char* into,
                       std::uint64_t count, const std::string& name, const decode_errors& errors) {
  if (file.read_at(offset, into, static_cast<std::size_t>(count)) != count)
    throw errors.corrupt(name, "the file shrank while its data was read (it had "
                                   + std::to_string(file.size()) + " bytes)");
}

// Refuses, before it is parsed, a header whose JSON nests deeper than the
// format does or holds more keys and values than max_header_items: the
// parsed tree of "[[[[..." costs dozens of bytes for each byte of text,
// and that of 80 MB of `"k":"",` about 1.7 GB. A linear scan that
// allocates nothing; strings (with their escapes) are skipped. Each key
// and each value but an array's or object's first is preceded by a ',' or
// ':', and each array or object opens with a '[' or '{': counting those
// counts the keys and values.
void check_structure(std::string_view header_text, const decode_errors& errors) {
  std::size_t depth = 0;
  std::size_t items = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < header_text.size(); ++i) {
    const char c = header_text[i];
    if (in_string) {
      if (c == '\\')
        ++i; // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c == '{' || c == '[') {
      if (++depth > max_header_depth)
        throw errors.corrupt("the header's JSON nests deeper than the "
                             + std::to_string(max_header_depth)
                             + " levels of the format (the header object, a tensor's entry, "
                               "its \"shape\" or \"data_offsets\" array): level "
                             + std::to_string(depth) + " opens at byte " + std::to_string(i));
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
      continue;
    } else if (c != ',' && c != ':') {
      continue;
    }
    if (++items > max_header_items)
      throw errors.corrupt("the header's JSON holds more than " + std::to_string(max_header_items)
                           + " keys and values (some 70,000 tensors), the most lockstep parses: "
                             "the limit is passed at byte " + std::to_string(i));
  }
}

// -- the header checksum ------------------------------------------------------

// The text that opens the header checksum's value in a header lockstep wrote
// (compact JSON): a tensor name or metadata value cannot hold it, since
// JSON escapes the quotes inside strings.
std::string header_checksum_opening() {
  return "\"" + std::string(header_crc32_metadata_key) + "\":\"";
}

constexpr std::size_t crc32_digits = 8;
constexpr std::string_view blank_crc32 = "00000000";

// Where the header checksum's 8 digits lie in `header_text`, if it has one.
std::optional<std::size_t> header_checksum_at(std::string_view header_text,
                                              const decode_errors& errors) {
  const auto opening = header_checksum_opening();
  const auto found = header_text.find(opening);
  if (found == std::string_view::npos)
    return std::nullopt;
  const auto digits = found + opening.size();
  if (header_text.find(opening, digits) != std::string_view::npos)
    throw errors.corrupt("the header holds its checksum field "
                         + in_quotes(header_crc32_metadata_key) + " twice");
  if (header_text.size() < digits + crc32_digits + 1 || header_text[digits + crc32_digits] != '"')
    throw errors.corrupt("the header's checksum field " + in_quotes(header_crc32_metadata_key)
                         + " does not hold 8 characters before the header ends (after the "
                         + std::to_string(header_text.size()) + " bytes the header length gives)");
  return digits;
}

// zlib's crc32 of the 8 length bytes and the header, with the checksum's
// digits (at `digits`, if any) read as "00000000".
std::uint32_t header_crc32(std::string_view length_bytes, std::string_view header_text,
                           std::optional<std::size_t> digits) {
  auto crc = crc32_of(length_bytes);
  if (!digits)
    return crc32_of(header_text, crc);
  crc = crc32_of(header_text.substr(0, *digits), crc);
  crc = crc32_of(blank_crc32, crc);
  return crc32_of(header_text.substr(*digits + crc32_digits), crc);
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
  for (const auto& [key, value] : metadata) {
    if (key.starts_with(crc32_metadata_prefix))
      throw value_error("encode_safetensors: metadata key " + in_quotes(key) + " starts with "
                        + in_quotes(crc32_metadata_prefix) + ", which is reserved for checksums");
    if (key == header_crc32_metadata_key)
      throw value_error("encode_safetensors: metadata key " + in_quotes(key)
                        + " is reserved for the header's checksum");
  }

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
    all_metadata[std::string(crc32_metadata_prefix) + std::string(name)] =
      crc32_hex(crc32_of(bytes));
    offset += bytes.size();
  }
  // A placeholder of the checksum's final length: the layout is final.
  all_metadata[std::string(header_crc32_metadata_key)] = std::string(blank_crc32);
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

  std::string length_bytes;
  for (int i = 0; i < 8; ++i)
    length_bytes.push_back(static_cast<char>((header_text.size() >> (8 * i)) & 0xff));
  // The placeholder is the only text of this form (see header_checksum_opening).
  const auto digits = header_text.find(header_checksum_opening() + std::string(blank_crc32) + "\"")
                      + header_checksum_opening().size();
  header_text.replace(digits, crc32_digits,
                      crc32_hex(header_crc32(length_bytes, header_text, digits)));

  std::string file;
  file.reserve(8 + header_text.size() + offset);
  file += length_bytes;
  file += header_text;
  for (const auto& [name, value] : by_name)
    file += bytes_of(*value);
  return file;
}

// -- decoding -----------------------------------------------------------------

std::uint64_t safetensors_header::file_size() const noexcept {
  return buffer_offset() + (entries.empty() ? 0 : entries.back().end);
}

std::uint64_t decode_header_length(std::string_view first_bytes, std::uint64_t file_size,
                                   const std::string& source) {
  decode_errors errors(source);
  if (file_size < 8 || first_bytes.size() < 8)
    throw errors.corrupt("the file has "
                         + std::to_string(std::min<std::uint64_t>(file_size, first_bytes.size()))
                         + " bytes, fewer than the 8 of the header length (truncated)");
  auto header_length = read_u64_le(first_bytes);
  if (header_length > max_header_length)
    throw errors.corrupt("the header length " + std::to_string(header_length)
                         + " exceeds the limit of " + std::to_string(max_header_length)
                         + " bytes");
  if (header_length > file_size - 8)
    throw errors.corrupt("the header length " + std::to_string(header_length)
                         + " exceeds the " + std::to_string(file_size - 8)
                         + " bytes after it (truncated)");
  return header_length;
}

safetensors_header decode_safetensors_header(std::string_view prefix, std::uint64_t file_size,
                                             const std::string& source) {
  decode_errors errors(source);
  safetensors_header result;
  result.length = decode_header_length(prefix.substr(0, 8), file_size, source);
  if (prefix.size() < 8 + result.length)
    throw errors.corrupt("the header has " + std::to_string(prefix.size() - 8) + " of its "
                         + std::to_string(result.length) + " bytes (truncated)");
  const auto header_text = prefix.substr(8, result.length);

  // First the checksum, over the raw bytes: whatever else a flipped bit
  // breaks, the error says the header is corrupt.
  const auto digits = header_checksum_at(header_text, errors);
  if (digits) {
    const auto recorded = header_text.substr(*digits, crc32_digits);
    const auto actual = crc32_hex(header_crc32(prefix.substr(0, 8), header_text, digits));
    if (recorded != actual)
      throw errors.corrupt("the crc32 of the header length and the header is " + actual
                           + ", but the header records " + in_quotes(recorded)
                           + " (the header length or the header is corrupt)");
    result.has_header_checksum = true;
  }

  // nlohmann's parser takes a NUL byte for the end of the input; JSON allows
  // none, so the text after one would be ignored silently.
  // A wrong header length shows as JSON cut short or run on: the message
  // gives the length it read.
  const auto not_json = "the header is not valid JSON (the header length gives it "
                        + std::to_string(header_text.size()) + " bytes): ";
  if (auto nul = header_text.find('\0'); nul != std::string_view::npos)
    throw errors.corrupt(not_json + "it holds a NUL byte at offset " + std::to_string(nul));
  check_structure(header_text, errors);
  json header;
  try {
    header = json::parse(header_text);
  } catch (const json::parse_error& e) {
    throw errors.corrupt(not_json + e.what());
  } catch (const std::bad_alloc&) {
    throw errors.out_of_memory("the parsed header (" + std::to_string(result.length)
                                 + " bytes of JSON)",
                               result.length);
  }
  if (!header.is_object())
    throw errors.corrupt("the header is a JSON " + std::string(header.type_name())
                         + ", not an object");

  for (const auto& [name, value] : header.items()) {
    if (name == metadata_key)
      result.metadata = parse_metadata(value, errors);
    else
      result.entries.push_back(parse_entry(name, value, errors));
  }
  // The raw text and the parsed header must agree on the checksum field.
  auto recorded = result.metadata.find(std::string(header_crc32_metadata_key));
  if (digits
      && (recorded == result.metadata.end()
          || recorded->second != header_text.substr(*digits, crc32_digits)))
    throw errors.corrupt("the header's checksum field is not the one in \"__metadata__\"");
  if (!digits && recorded != result.metadata.end())
    throw errors.corrupt("\"__metadata__\" holds " + in_quotes(header_crc32_metadata_key)
                         + " in a form lockstep does not write");
  if (recorded != result.metadata.end())
    result.metadata.erase(recorded);
  take_checksums(result, errors);
  check_layout(result.entries, file_size - result.buffer_offset(), errors);
  return result;
}

safetensors_contents decode_safetensors(std::string_view bytes, const std::string& source,
                                        const device_spec& device) {
  decode_errors errors(source);
  auto header = decode_safetensors_header(bytes, bytes.size(), source);
  auto buffer = bytes.substr(header.buffer_offset());

  safetensors_contents contents;
  for (auto& entry : header.entries) {
    const auto data = buffer.substr(entry.begin, entry.end - entry.begin);
    check_tensor_checksum(header, entry.name, crc32_of(data), errors);
  }
  for (auto& entry : header.entries) {
    auto value = allocate_tensor(entry, device, errors);
    const auto data = buffer.substr(entry.begin, entry.end - entry.begin);
    std::memcpy(value.raw_data(), data.data(), data.size());
    contents.tensors.emplace(std::move(entry.name), std::move(value));
  }
  contents.metadata = std::move(header.metadata);
  return contents;
}

// -- files --------------------------------------------------------------------

safetensors_file safetensors_file::open(const std::filesystem::path& path) {
  auto file = regular_file::open(path);
  const auto source = path.string();
  decode_errors errors(source);
  const auto size = file.size();
  std::uint64_t needed = 8;
  try {
    std::string prefix(8, '\0');
    prefix.resize(file.read_at(0, prefix.data(), prefix.size()));
    const auto length = decode_header_length(prefix, size, source);
    // length <= size - 8: the file holds the bytes about to be allocated.
    needed = 8 + length;
    prefix.resize(static_cast<std::size_t>(needed));
    if (file.read_at(8, prefix.data() + 8, static_cast<std::size_t>(length)) != length)
      throw errors.corrupt("the file shrank while its header was read (it had "
                           + std::to_string(size) + " bytes)");
    auto header = decode_safetensors_header(prefix, size, source);
    return safetensors_file{std::move(file), std::move(header)};
  } catch (const std::bad_alloc&) {
    throw errors.out_of_memory("its header", needed);
  }
}

std::map<std::string, tensor> safetensors_file::read_tensors(const device_spec& device) const {
  const auto source = path().string();
  decode_errors errors(source);
  std::map<std::string, tensor> tensors;
  for (const auto& entry : header_.entries) {
    const auto bytes = entry.end - entry.begin;
    auto value = allocate_tensor(entry, device, errors);
    auto* data = static_cast<char*>(value.raw_data());
    read_tensor_bytes(file_, header_.buffer_offset() + entry.begin, data, bytes, entry.name,
                      errors);
    check_tensor_checksum(header_, entry.name,
                          crc32_of(std::string_view(data, static_cast<std::size_t>(bytes))),
                          errors);
    try {
      tensors.emplace(entry.name, std::move(value));
    } catch (const std::bad_alloc&) {
      throw errors.out_of_memory("the map of tensors", sizeof(value) + entry.name.size());
    }
  }
  return tensors;
}

void safetensors_file::verify_tensors() const {
  constexpr std::uint64_t chunk_bytes = 1 << 20;
  const auto source = path().string();
  decode_errors errors(source);
  std::string chunk;
  for (const auto& entry : header_.entries) {
    if (!header_.checksums.contains(entry.name))
      continue;
    std::uint32_t crc = 0;
    for (auto at = entry.begin; at < entry.end;) {
      const auto count = std::min(chunk_bytes, entry.end - at);
      if (chunk.size() < count) {
        try {
          chunk.resize(static_cast<std::size_t>(count));
        } catch (const std::bad_alloc&) {
          throw errors.out_of_memory("a buffer to check tensor " + in_quotes(entry.name), count);
        }
      }
      read_tensor_bytes(file_, header_.buffer_offset() + at, chunk.data(), count, entry.name,
                        errors);
      crc = crc32_of(std::string_view(chunk.data(), static_cast<std::size_t>(count)), crc);
      at += count;
    }
    check_tensor_checksum(header_, entry.name, crc, errors);
  }
}

safetensors_contents read_safetensors(const std::filesystem::path& path,
                                      const device_spec& device) {
  auto file = safetensors_file::open(path);
  return {file.read_tensors(device), file.header().metadata};
}

} // namespace lockstep::detail
