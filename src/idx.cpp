// The IDX reader: gzip (zlib's inflate) or plain bytes, then the header
// checks. Every problem names the file and says what is wrong.

#include "lockstep/idx.hpp"

#include "lockstep/error.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <limits>
#include <memory>
#include <new>
#include <string>

namespace lockstep {

namespace {

constexpr unsigned char gzip_magic[2] = {0x1f, 0x8b};

std::string quoted(const std::filesystem::path& path) {
  return "\"" + path.string() + "\"";
}

std::string hex_byte(unsigned char b) {
  static constexpr char digits[] = "0123456789abcdef";
  return std::string{"0x"} + digits[b >> 4] + digits[b & 0xf];
}

std::string dims_string(const shape_t& dims) {
  return shape_to_string(dims);
}

data_loss_error data_loss(std::string_view source, const std::string& problem) {
  return data_loss_error(std::string(source) + ": " + problem);
}

bool starts_with_gzip_magic(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == gzip_magic[0]
         && static_cast<unsigned char>(bytes[1]) == gzip_magic[1];
}

std::string read_whole_file(const std::filesystem::path& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file{std::fopen(path.c_str(), "rb"),
                                                        &std::fclose};
  if (!file)
    throw io_error("read_idx: cannot open " + quoted(path) + ": " + std::strerror(errno));
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    const auto n = std::fread(buffer, 1, sizeof buffer, file.get());
    bytes.append(buffer, n);
    if (n < sizeof buffer) {
      if (std::ferror(file.get()))
        throw io_error("read_idx: cannot read " + quoted(path) + ": " + std::strerror(errno));
      break;
    }
  }
  return bytes;
}

/// Inflates a gzip stream (one member or several, concatenated); zlib checks
/// each member's CRC-32 and length.
std::string gunzip(std::string_view compressed, std::string_view source) {
  z_stream stream{};
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK)
    throw std::bad_alloc();
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard{&stream, &inflateEnd};
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  // IDX files are far below 4 GiB compressed; larger input is cut short,
  // which reports as a truncated stream rather than overflowing avail_in.
  stream.avail_in = static_cast<uInt>(
    std::min<std::size_t>(compressed.size(), std::numeric_limits<uInt>::max()));
  std::string out;
  out.resize(std::max<std::size_t>(compressed.size() * 2, 1 << 16));
  std::size_t produced = 0;
  for (;;) {
    if (produced == out.size())
      out.resize(out.size() * 2);
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    stream.avail_out = static_cast<uInt>(
      std::min<std::size_t>(out.size() - produced, std::numeric_limits<uInt>::max()));
    const auto before = stream.avail_out;
    const int status = inflate(&stream, Z_NO_FLUSH);
    produced += before - stream.avail_out;
    if (status == Z_STREAM_END) {
      if (stream.avail_in == 0)
        break;
      const std::string_view rest{reinterpret_cast<const char*>(stream.next_in), stream.avail_in};
      if (!starts_with_gzip_magic(rest))
        throw data_loss(source, std::to_string(rest.size())
                                  + " bytes of trailing garbage after the gzip stream");
      inflateReset(&stream); // another gzip member follows
      continue;
    }
    if (status == Z_DATA_ERROR)
      throw data_loss(source, std::string("corrupt gzip stream: ")
                                + (stream.msg ? stream.msg : "invalid compressed data"));
    if (status == Z_MEM_ERROR)
      throw std::bad_alloc();
    if (status == Z_BUF_ERROR || (status == Z_OK && stream.avail_in == 0 && stream.avail_out != 0))
      throw data_loss(source, "truncated gzip stream: the " + std::to_string(compressed.size())
                                + " compressed bytes end before the stream's end");
    if (status != Z_OK)
      throw data_loss(source, "gzip inflate failed with zlib status " + std::to_string(status));
  }
  out.resize(produced);
  return out;
}

std::string_view type_name(unsigned char code) {
  switch (code) {
    case 0x09:
      return "signed byte";
    case 0x0b:
      return "int16";
    case 0x0c:
      return "int32";
    case 0x0d:
      return "float32";
    case 0x0e:
      return "float64";
    default:
      return {};
  }
}

idx_array parse_plain(std::string_view bytes, std::string_view source) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  if (bytes.size() < 4)
    throw data_loss(source, "truncated: " + std::to_string(bytes.size())
                              + " bytes, shorter than the 4-byte IDX magic");
  if (byte(0) != 0 || byte(1) != 0)
    throw data_loss(source, "bad IDX magic: the data starts with " + hex_byte(byte(0)) + " "
                              + hex_byte(byte(1)) + ", not 0x00 0x00");
  const unsigned char type = byte(2);
  if (type != 0x08) {
    const auto name = type_name(type);
    if (name.empty())
      throw data_loss(source, "unknown IDX element type code " + hex_byte(type));
    throw value_error(std::string(source) + ": IDX elements of type " + std::string(name) + " ("
                      + hex_byte(type)
                      + ") are not supported; lockstep reads unsigned bytes (0x08) only");
  }
  const std::size_t rank = byte(3);
  if (rank == 0)
    throw data_loss(source, "the IDX header declares 0 dimensions");
  const std::size_t header = 4 + 4 * rank;
  if (bytes.size() < header)
    throw data_loss(source, "truncated header: " + std::to_string(rank)
                              + " dimensions need a header of " + std::to_string(header)
                              + " bytes, but the data ends after " + std::to_string(bytes.size()));
  idx_array out;
  std::uint64_t count = 1;
  bool overflow = false;
  for (std::size_t d = 0; d < rank; ++d) {
    const std::size_t at = 4 + 4 * d;
    const std::uint64_t size = (std::uint64_t{byte(at)} << 24) | (std::uint64_t{byte(at + 1)} << 16)
                               | (std::uint64_t{byte(at + 2)} << 8) | std::uint64_t{byte(at + 3)};
    out.dims.push_back(static_cast<std::int64_t>(size));
    overflow = overflow || __builtin_mul_overflow(count, size, &count);
  }
  const std::size_t payload = bytes.size() - header;
  if (overflow || count > std::numeric_limits<std::size_t>::max())
    throw data_loss(source, "the dimensions " + dims_string(out.dims)
                              + " describe more elements than fit in memory");
  if (payload < count)
    throw data_loss(source, "truncated: the dimensions " + dims_string(out.dims) + " need "
                              + std::to_string(count) + " bytes of elements, but only "
                              + std::to_string(payload) + " follow the header");
  if (payload > count)
    throw data_loss(source, std::to_string(payload - count) + " trailing bytes after the "
                              + std::to_string(count) + " bytes of elements of dimensions "
                              + dims_string(out.dims));
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return out;
}

/// `base`.gz if it exists, else `base`; io_error naming both if neither does.
std::filesystem::path find_idx_file(const std::filesystem::path& directory, const char* base) {
  const auto compressed = directory / (std::string(base) + ".gz");
  const auto plain = directory / base;
  std::error_code ec;
  if (std::filesystem::exists(compressed, ec))
    return compressed;
  if (std::filesystem::exists(plain, ec))
    return plain;
  throw io_error("load_mnist: neither " + quoted(compressed) + " nor " + quoted(plain)
                 + " exists");
}

struct loaded_split {
  mnist_split split;
  std::int64_t rows;
  std::int64_t cols;
};

loaded_split load_split(const std::filesystem::path& directory, const char* images_base,
                        const char* labels_base) {
  const auto images_path = find_idx_file(directory, images_base);
  const auto labels_path = find_idx_file(directory, labels_base);
  const auto images = read_idx(images_path);
  const auto labels = read_idx(labels_path);
  if (images.dims.size() != 3)
    throw data_loss_error(quoted(images_path) + ": images need 3 dimensions [n, rows, cols], not "
                          + dims_string(images.dims));
  if (labels.dims.size() != 1)
    throw data_loss_error(quoted(labels_path) + ": labels need 1 dimension [n], not "
                          + dims_string(labels.dims));
  if (images.dims[0] != labels.dims[0])
    throw data_loss_error("load_mnist: " + quoted(images_path) + " has "
                          + std::to_string(images.dims[0]) + " images but " + quoted(labels_path)
                          + " has " + std::to_string(labels.dims[0]) + " labels");
  return {{idx_images_to_tensor(images), idx_labels_to_tensor(labels)},
          images.dims[1],
          images.dims[2]};
}

} // namespace

idx_array parse_idx(std::string_view bytes, std::string_view source) {
  if (starts_with_gzip_magic(bytes))
    return parse_plain(gunzip(bytes, source), source);
  return parse_plain(bytes, source);
}

idx_array read_idx(const std::filesystem::path& path) {
  const auto bytes = read_whole_file(path);
  const auto source = quoted(path);
  if (path.extension() == ".gz" && !starts_with_gzip_magic(bytes)) {
    if (bytes.size() < 2)
      throw data_loss(source, "truncated gzip stream: " + std::to_string(bytes.size())
                                + " bytes, shorter than gzip's 2-byte magic");
    throw data_loss(source, "not gzip-compressed: it starts with "
                              + hex_byte(static_cast<unsigned char>(bytes[0])) + " "
                              + hex_byte(static_cast<unsigned char>(bytes[1]))
                              + ", not gzip's 0x1f 0x8b");
  }
  return parse_idx(bytes, source);
}

namespace {

/// Throws value_error unless `x` holds as many elements as its dimensions say.
void check_element_count(const idx_array& x, const char* function) {
  std::uint64_t count = 1;
  for (auto d : x.dims)
    if (d < 0 || __builtin_mul_overflow(count, static_cast<std::uint64_t>(d), &count))
      throw value_error(std::string(function) + ": invalid dimensions " + dims_string(x.dims));
  if (count != x.data.size())
    throw value_error(std::string(function) + ": dimensions " + dims_string(x.dims) + " need "
                      + std::to_string(count) + " elements, but the array holds "
                      + std::to_string(x.data.size()));
}

} // namespace

tensor idx_images_to_tensor(const idx_array& images) {
  if (images.dims.size() != 3)
    throw value_error("idx_images_to_tensor: images need 3 dimensions [n, rows, cols], not "
                      + dims_string(images.dims));
  check_element_count(images, "idx_images_to_tensor");
  auto out = tensor::uninitialized(dtype::f32, {images.dims[0], images.dims[1] * images.dims[2]});
  auto values = out.data<float>();
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(images.data[i]) / 255.0f;
  return out;
}

tensor idx_labels_to_tensor(const idx_array& labels) {
  if (labels.dims.size() != 1)
    throw value_error("idx_labels_to_tensor: labels need 1 dimension [n], not "
                      + dims_string(labels.dims));
  check_element_count(labels, "idx_labels_to_tensor");
  auto out = tensor::uninitialized(dtype::i64, {labels.dims[0]});
  auto values = out.data<std::int64_t>();
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = labels.data[i];
  return out;
}

mnist_dataset load_mnist(const std::filesystem::path& directory) {
  auto train = load_split(directory, "train-images-idx3-ubyte", "train-labels-idx1-ubyte");
  auto test = load_split(directory, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte");
  if (train.rows != test.rows || train.cols != test.cols)
    throw data_loss_error("load_mnist: the training images in " + quoted(directory) + " are "
                          + std::to_string(train.rows) + "x" + std::to_string(train.cols)
                          + " but the test images are " + std::to_string(test.rows) + "x"
                          + std::to_string(test.cols));
  return {std::move(train.split), std::move(test.split), train.rows, train.cols};
}

} // namespace lockstep
