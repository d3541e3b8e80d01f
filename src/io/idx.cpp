// The IDX reader. The bytes come from a regular file (detail::regular_file
// refuses FIFOs, devices, sockets and directories by type, without
// blocking) or from memory; the IDX data is those bytes as they are, or
// what zlib's inflate makes of them, read a piece at a time. The header is
// read and checked first, then exactly the element bytes it declares, then
// one small read that must find the end. So memory follows the header and
// the data actually present, never a stream's whole output: a gzip bomb
// is refused after the declared elements plus one 64 KiB probe.
// Every problem names the file and says what is wrong.

#include "lockstep/idx.hpp"

#include "lockstep/error.hpp"
#include "runtime/error_text.hpp"
#include "io/regular_file.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>

namespace lockstep {

namespace {

using detail::in_quotes;

constexpr unsigned char gzip_magic[2] = {0x1f, 0x8b};

/// Compressed bytes read from the source for one refill of zlib's input.
constexpr std::size_t gzip_input_block = 256 * 1024;

/// Bytes inflated past the declared elements to tell whether more follow:
/// the stream is not inflated further.
constexpr std::size_t trailing_probe = 64 * 1024;

/// Deflate's largest possible expansion: a 258-byte match costs at least
/// two bits (a one-bit length code and a one-bit distance code), so no
/// stream of n compressed bytes inflates to more than 1032 n bytes.
constexpr std::uint64_t deflate_max_ratio = 1032;

/// The elements of a gzip file are first given a buffer of at most this
/// many times the compressed size (and at least `gzip_first_buffer_floor`),
/// which holds MNIST's and Fashion-MNIST's files (they inflate 4.7 and 1.8
/// times) in one allocation; a stream that fills it grows it by doubling,
/// never past the declared size. Memory so stays within max(that first
/// buffer, 3 x the bytes actually inflated) plus a constant, whatever the
/// header claims.
constexpr std::uint64_t gzip_first_buffer_ratio = 8;
constexpr std::uint64_t gzip_first_buffer_floor = 1024 * 1024;

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

bool is_gzip_magic(const unsigned char* bytes, std::size_t size) {
  return size >= 2 && bytes[0] == gzip_magic[0] && bytes[1] == gzip_magic[1];
}

// -- where the bytes come from ---------------------------------------------------

/// Bytes read by offset, from a file or from memory; the size is known
/// before anything is read.
class byte_source {
public:
  virtual ~byte_source() = default;
  virtual std::uint64_t size() const = 0;
  /// Up to `count` bytes at `offset`; fewer only at the end.
  virtual std::size_t read_at(std::uint64_t offset, void* into, std::size_t count) const = 0;
};

class file_source final : public byte_source {
public:
  explicit file_source(const detail::regular_file& file) : file_(file) {}
  std::uint64_t size() const override { return file_.size(); }
  std::size_t read_at(std::uint64_t offset, void* into, std::size_t count) const override {
    // The size when the file was opened is the file: bytes appended since
    // are not read.
    if (offset >= file_.size())
      return 0;
    return file_.read_at(offset, into, std::min<std::uint64_t>(count, file_.size() - offset));
  }

private:
  const detail::regular_file& file_;
};

class memory_source final : public byte_source {
public:
  explicit memory_source(std::string_view bytes) : bytes_(bytes) {}
  std::uint64_t size() const override { return bytes_.size(); }
  std::size_t read_at(std::uint64_t offset, void* into, std::size_t count) const override {
    if (offset >= bytes_.size())
      return 0;
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(count, bytes_.size() - offset));
    std::memcpy(into, bytes_.data() + offset, n);
    return n;
  }

private:
  std::string_view bytes_;
};

// -- the IDX bytes, plain or inflated --------------------------------------------

/// The IDX data read front to back, with what can be known about its
/// length before it is read.
class idx_stream {
public:
  virtual ~idx_stream() = default;

  /// Reads up to `count` bytes into `into`; fewer only at the end of the
  /// data.
  virtual std::size_t read(void* into, std::size_t count) = 0;

  /// Throws data_loss_error if `count` element bytes after a header of
  /// `header` bytes cannot be what this stream holds: for plain data the
  /// exact size is known, for gzip an upper bound.
  virtual void check_declared(std::uint64_t count, std::uint64_t header, const shape_t& dims,
                              std::string_view source) const = 0;

  /// How many bytes to allocate first for `count` declared element bytes.
  virtual std::uint64_t first_buffer(std::uint64_t count) const = 0;
};

std::string truncated_elements(const shape_t& dims, std::uint64_t count, std::uint64_t present) {
  return "truncated: the dimensions " + dims_string(dims) + " need " + std::to_string(count)
         + " bytes of elements, but only " + std::to_string(present) + " follow the header";
}

class plain_stream final : public idx_stream {
public:
  explicit plain_stream(const byte_source& bytes) : bytes_(bytes) {}

  std::size_t read(void* into, std::size_t count) override {
    const auto n = bytes_.read_at(position_, into, count);
    position_ += n;
    return n;
  }

  void check_declared(std::uint64_t count, std::uint64_t header, const shape_t& dims,
                      std::string_view source) const override {
    const auto payload = bytes_.size() - header;
    if (payload < count)
      throw data_loss(source, truncated_elements(dims, count, payload));
    if (payload > count)
      throw data_loss(source, std::to_string(payload - count) + " trailing bytes after the "
                                + std::to_string(count) + " bytes of elements of dimensions "
                                + dims_string(dims));
  }

  std::uint64_t first_buffer(std::uint64_t count) const override { return count; }

private:
  const byte_source& bytes_;
  std::uint64_t position_ = 0;
};

/// Inflates a gzip stream (one member or several, concatenated) a piece at
/// a time; zlib checks each member's CRC-32 and length at its end.
class gzip_stream final : public idx_stream {
public:
  gzip_stream(const byte_source& bytes, std::string_view source)
    : bytes_(bytes), source_(source), input_(new unsigned char[gzip_input_block]) {
    if (inflateInit2(&stream_, 16 + MAX_WBITS) != Z_OK)
      throw resource_error(std::string(source_) + ": zlib could not allocate its inflate state");
  }
  gzip_stream(const gzip_stream&) = delete;
  gzip_stream& operator=(const gzip_stream&) = delete;
  ~gzip_stream() override { inflateEnd(&stream_); }

  std::size_t read(void* into, std::size_t count) override {
    auto* out = static_cast<unsigned char*>(into);
    std::size_t produced = 0;
    while (produced < count && !finished_) {
      if (stream_.avail_in == 0)
        refill();
      const auto room =
        static_cast<uInt>(std::min<std::size_t>(count - produced, std::numeric_limits<uInt>::max()));
      stream_.next_out = out + produced;
      stream_.avail_out = room;
      const int status = inflate(&stream_, Z_NO_FLUSH);
      produced += room - stream_.avail_out;
      switch (status) {
        case Z_OK:
          break;
        case Z_STREAM_END:
          end_of_member();
          break;
        case Z_DATA_ERROR:
          throw data_loss(source_, std::string("corrupt gzip stream: ")
                                     + (stream_.msg ? stream_.msg : "invalid compressed data"));
        case Z_MEM_ERROR:
          throw resource_error(std::string(source_)
                               + ": zlib ran out of memory inflating the gzip stream");
        case Z_BUF_ERROR: // no progress possible: the input ran out
          throw truncated();
        default:
          throw data_loss(source_, "gzip inflate failed with zlib status " + std::to_string(status));
      }
    }
    return produced;
  }

  void check_declared(std::uint64_t count, std::uint64_t header, const shape_t& dims,
                      std::string_view source) const override {
    std::uint64_t most = 0;
    if (__builtin_mul_overflow(bytes_.size(), deflate_max_ratio, &most))
      return;
    if (most < header || count > most - header)
      throw data_loss(source, "the dimensions " + dims_string(dims) + " need "
                                + std::to_string(count) + " bytes of elements, more than a gzip "
                                + "stream of " + std::to_string(bytes_.size())
                                + " bytes can hold (deflate inflates at most "
                                + std::to_string(deflate_max_ratio)
                                + " bytes per compressed byte)");
  }

  std::uint64_t first_buffer(std::uint64_t count) const override {
    // No overflow: check_declared bounds bytes_.size() * 1032.
    return std::min(count, std::max(gzip_first_buffer_floor, gzip_first_buffer_ratio * bytes_.size()));
  }

private:
  data_loss_error truncated() const {
    return data_loss(source_, "truncated gzip stream: the " + std::to_string(bytes_.size())
                                + " compressed bytes end before the stream's end");
  }

  void refill() {
    const auto n = bytes_.read_at(consumed_, input_.get(), gzip_input_block);
    if (n == 0)
      throw truncated();
    consumed_ += n;
    stream_.next_in = input_.get();
    stream_.avail_in = static_cast<uInt>(n);
  }

  /// At the end of a member: the end of the data, another member, or
  /// garbage.
  void end_of_member() {
    const auto position = consumed_ - stream_.avail_in;
    if (position >= bytes_.size()) {
      finished_ = true;
      return;
    }
    unsigned char magic[2];
    const auto n = bytes_.read_at(position, magic, sizeof magic);
    if (!is_gzip_magic(magic, n))
      throw data_loss(source_, std::to_string(bytes_.size() - position)
                                 + " bytes of trailing garbage after the gzip stream");
    inflateReset(&stream_); // another member follows, as `cat a.gz b.gz` makes them
  }

  const byte_source& bytes_;
  std::string_view source_;
  std::unique_ptr<unsigned char[]> input_;
  z_stream stream_{};
  std::uint64_t consumed_ = 0; // source bytes handed to zlib
  bool finished_ = false;
};

// -- the IDX format --------------------------------------------------------------

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

/// Makes `data` hold `size` bytes, the first `kept` of them kept; exactly
/// `size` bytes are allocated. resource_error naming the file and the
/// bytes the elements need when memory runs out.
void grow_elements(std::vector<std::uint8_t>& data, std::uint64_t size, std::uint64_t count,
                   const shape_t& dims, std::string_view source) {
  try {
    if (size > data.max_size())
      throw std::bad_alloc();
    data.reserve(static_cast<std::size_t>(size)); // exactly: resize alone may double
    data.resize(static_cast<std::size_t>(size));
  } catch (const std::bad_alloc&) {
    throw resource_error(std::string(source) + ": out of memory: the elements of dimensions "
                         + dims_string(dims) + " need " + std::to_string(count)
                         + " bytes, and allocating " + std::to_string(size)
                         + " bytes for them failed");
  }
}

/// What an IDX header declares, checked against what its bytes can hold.
struct idx_declared {
  shape_t dims;
  std::uint64_t count = 0; // element bytes: the product of `dims`
};

/// Reads and checks the header at the start of `in`: the magic, the type,
/// the dimensions, and (by `check_declared`) that the bytes after it can
/// hold the elements it declares. Nothing is allocated for the elements.
idx_declared parse_header(idx_stream& in, std::string_view source) {
  unsigned char magic[4];
  const auto got = in.read(magic, sizeof magic);
  if (got < sizeof magic)
    throw data_loss(source, "truncated: " + std::to_string(got)
                              + " bytes, shorter than the 4-byte IDX magic");
  if (magic[0] != 0 || magic[1] != 0)
    throw data_loss(source, "bad IDX magic: the data starts with " + hex_byte(magic[0]) + " "
                              + hex_byte(magic[1]) + ", not 0x00 0x00");
  const unsigned char type = magic[2];
  if (type != 0x08) {
    const auto name = type_name(type);
    if (name.empty())
      throw data_loss(source, "unknown IDX element type code " + hex_byte(type));
    throw value_error(std::string(source) + ": IDX elements of type " + std::string(name) + " ("
                      + hex_byte(type)
                      + ") are not supported; lockstep reads unsigned bytes (0x08) only");
  }
  const std::size_t rank = magic[3];
  if (rank == 0)
    throw data_loss(source, "the IDX header declares 0 dimensions");
  const std::size_t header = 4 + 4 * rank;
  unsigned char sizes[4 * 255];
  const auto got_sizes = in.read(sizes, 4 * rank);
  if (got_sizes < 4 * rank)
    throw data_loss(source, "truncated header: " + std::to_string(rank)
                              + " dimensions need a header of " + std::to_string(header)
                              + " bytes, but the data ends after "
                              + std::to_string(sizeof magic + got_sizes));
  idx_declared out;
  std::uint64_t count = 1;
  bool overflow = false;
  for (std::size_t d = 0; d < rank; ++d) {
    const auto* at = sizes + 4 * d;
    const std::uint64_t size = (std::uint64_t{at[0]} << 24) | (std::uint64_t{at[1]} << 16)
                               | (std::uint64_t{at[2]} << 8) | std::uint64_t{at[3]};
    out.dims.push_back(static_cast<std::int64_t>(size));
    overflow = overflow || __builtin_mul_overflow(count, size, &count);
  }
  if (overflow || count > std::numeric_limits<std::size_t>::max())
    throw data_loss(source, "the dimensions " + dims_string(out.dims)
                              + " describe more elements than fit in memory");
  // Nothing is allocated for the elements before the declared size is
  // checked against what the bytes can hold.
  in.check_declared(count, header, out.dims, source);
  out.count = count;
  return out;
}

idx_array parse(idx_stream& in, std::string_view source) {
  const auto declared = parse_header(in, source);
  const auto count = declared.count;
  idx_array out;
  out.dims = declared.dims;
  std::uint64_t filled = 0;
  std::uint64_t capacity = in.first_buffer(count);
  for (;;) {
    grow_elements(out.data, capacity, count, out.dims, source);
    filled += in.read(out.data.data() + filled, static_cast<std::size_t>(capacity - filled));
    if (filled < capacity)
      throw data_loss(source, truncated_elements(out.dims, count, filled));
    if (capacity == count)
      break;
    capacity = std::min(count, 2 * capacity);
  }
  // One bounded read past the elements: whatever it finds is an error, and
  // the rest of the stream is never inflated.
  const std::unique_ptr<unsigned char[]> probe{new unsigned char[trailing_probe]};
  const auto extra = in.read(probe.get(), trailing_probe);
  if (extra == trailing_probe)
    throw data_loss(source, "at least " + std::to_string(extra)
                              + " trailing bytes after the " + std::to_string(count)
                              + " bytes of elements of dimensions " + dims_string(out.dims)
                              + " (the rest was not inflated)");
  if (extra > 0)
    throw data_loss(source, std::to_string(extra) + " trailing bytes after the "
                              + std::to_string(count) + " bytes of elements of dimensions "
                              + dims_string(out.dims));
  return out;
}

/// Runs `action` on the IDX stream of `bytes`: inflated if they start with
/// gzip's magic (required when `gzip_name`), else plain. A std::bad_alloc
/// not already reported with the bytes it needed becomes a resource_error
/// naming `source`.
template <class Action>
auto with_stream(const byte_source& bytes, std::string_view source, bool gzip_name,
                 Action action) {
  try {
    unsigned char first[2];
    const auto n = bytes.read_at(0, first, sizeof first);
    const bool gzip = is_gzip_magic(first, n);
    if (gzip_name && !gzip) {
      if (n < 2)
        throw data_loss(source, "truncated gzip stream: " + std::to_string(n)
                                  + " bytes, shorter than gzip's 2-byte magic");
      throw data_loss(source, "not gzip-compressed: it starts with " + hex_byte(first[0]) + " "
                                + hex_byte(first[1]) + ", not gzip's 0x1f 0x8b");
    }
    if (gzip) {
      gzip_stream in{bytes, source};
      return action(in);
    }
    plain_stream in{bytes};
    return action(in);
  } catch (const std::bad_alloc&) {
    throw resource_error(std::string(source) + ": out of memory while reading it");
  }
}

/// Parses the IDX data in `bytes` (see with_stream).
idx_array parse_bytes(const byte_source& bytes, std::string_view source, bool gzip_name) {
  return with_stream(bytes, source, gzip_name, [&](idx_stream& in) { return parse(in, source); });
}

/// The dimensions that the IDX file at `path` declares, checked as
/// read_idx checks them before it allocates anything for the elements
/// (against the file's size, or what its gzip stream can hold); only the
/// header is read, or inflated.
shape_t declared_dims(const std::filesystem::path& path) {
  const auto file = detail::regular_file::open(path);
  const file_source bytes{file};
  const auto source = in_quotes(path);
  return with_stream(bytes, source, path.extension() == ".gz",
                     [&](idx_stream& in) { return parse_header(in, source).dims; });
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
  throw io_error("load_mnist: neither " + in_quotes(compressed) + " nor " + in_quotes(plain)
                 + " exists");
}

/// `convert(x)`, with running out of memory reported as a resource_error
/// naming `path` and the bytes the tensor needs.
template <class Convert>
tensor converted(const idx_array& x, const std::filesystem::path& path, std::size_t element_size,
                 const char* what, Convert convert) {
  try {
    return convert(x);
  } catch (const std::bad_alloc&) {
    throw resource_error(in_quotes(path) + ": out of memory: its " + std::to_string(x.data.size())
                         + " bytes become " + what + " of "
                         + std::to_string(x.data.size() * element_size) + " bytes");
  }
}

/// The two files of one split, what their headers declare checked against
/// each other.
struct split_files {
  std::filesystem::path images;
  std::filesystem::path labels;
  shape_t image_dims; // [n, rows, cols]
};

/// Finds the files of one split and checks their headers before anything
/// is inflated past them: images [n, rows, cols] and labels [n] with the
/// same n, each no more than its file can hold. So a header that promises
/// a gigabyte of images costs nothing when the labels disagree with it.
split_files check_split(const std::filesystem::path& directory, const char* images_base,
                        const char* labels_base) {
  split_files files{find_idx_file(directory, images_base), find_idx_file(directory, labels_base),
                    {}};
  files.image_dims = declared_dims(files.images);
  if (files.image_dims.size() != 3)
    throw data_loss_error(in_quotes(files.images) + ": images need 3 dimensions [n, rows, cols], not "
                          + dims_string(files.image_dims));
  const auto label_dims = declared_dims(files.labels);
  if (label_dims.size() != 1)
    throw data_loss_error(in_quotes(files.labels) + ": labels need 1 dimension [n], not "
                          + dims_string(label_dims));
  if (files.image_dims[0] != label_dims[0])
    throw data_loss_error("load_mnist: " + in_quotes(files.images) + " has "
                          + std::to_string(files.image_dims[0]) + " images but "
                          + in_quotes(files.labels) + " has " + std::to_string(label_dims[0])
                          + " labels");
  return files;
}

/// Reads the files of a split that check_split accepted.
mnist_split read_split(const split_files& files) {
  const auto images = read_idx(files.images);
  const auto labels = read_idx(files.labels);
  // A file replaced since its header was checked.
  const auto check_unchanged = [](const std::filesystem::path& path, const shape_t& checked,
                                  const shape_t& read) {
    if (read != checked)
      throw data_loss_error("load_mnist: " + in_quotes(path) + " declared the dimensions "
                            + dims_string(checked) + " when it was checked but "
                            + dims_string(read) + " when it was read: it changed meanwhile");
  };
  check_unchanged(files.images, files.image_dims, images.dims);
  check_unchanged(files.labels, shape_t{files.image_dims[0]}, labels.dims);
  return {converted(images, files.images, sizeof(float), "float32 pixels", idx_images_to_tensor),
          converted(labels, files.labels, sizeof(std::int64_t), "int64 labels",
                    idx_labels_to_tensor)};
}

} // namespace

idx_array parse_idx(std::string_view bytes, std::string_view source) {
  const memory_source in{bytes};
  return parse_bytes(in, source, false);
}

idx_array read_idx(const std::filesystem::path& path) {
  // Refuses anything but a regular file by its type, without blocking.
  const auto file = detail::regular_file::open(path);
  const file_source in{file};
  return parse_bytes(in, in_quotes(path), path.extension() == ".gz");
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
  // Every header of the four files is checked, alone and against the
  // others, before any file is read in full.
  const auto train = check_split(directory, "train-images-idx3-ubyte", "train-labels-idx1-ubyte");
  const auto test = check_split(directory, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte");
  const auto rows = train.image_dims[1];
  const auto cols = train.image_dims[2];
  if (rows != test.image_dims[1] || cols != test.image_dims[2])
    throw data_loss_error("load_mnist: the training images in " + in_quotes(directory) + " are "
                          + std::to_string(rows) + "x" + std::to_string(cols)
                          + " but the test images are " + std::to_string(test.image_dims[1]) + "x"
                          + std::to_string(test.image_dims[2]));
  auto train_split = read_split(train);
  auto test_split = read_split(test);
  return {std::move(train_split), std::move(test_split), rows, cols};
}

} // namespace lockstep
