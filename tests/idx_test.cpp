// The IDX reader: plain and gzip files written by the test itself, every
// kind of damage, the MNIST directory loader, and the real Fashion-MNIST
// files when the dataset-fashion-mnist package is installed. No actor
// system: suite 'unit'.

#include "lockstep/idx.hpp"

#include <doctest/doctest.h>

#include "file_support.hpp"
#include "test_support.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "lockstep/error.hpp"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

/// An IDX file: the magic with `type` and the rank, big-endian dims, then
/// `payload` as is.
std::string idx_bytes(unsigned char type, const std::vector<std::uint32_t>& dims,
                      const std::string& payload) {
  std::string out{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (auto d : dims)
    for (int shift : {24, 16, 8, 0})
      out.push_back(static_cast<char>((d >> shift) & 0xff));
  return out + payload;
}

/// `n` bytes 0, 1, 2, ... (mod 256).
std::string counting_bytes(std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(static_cast<char>(i & 0xff));
  return out;
}

/// `bytes` as one gzip member, compressed by zlib.
std::string gzip(const std::string& bytes) {
  z_stream stream{};
  REQUIRE(deflateInit2(&stream, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                       Z_DEFAULT_STRATEGY)
          == Z_OK);
  std::string out(deflateBound(&stream, bytes.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&stream, Z_FINISH) == Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

/// A small image file: 2 images of 3x2 pixels.
std::string small_images() {
  return idx_bytes(0x08, {2, 3, 2}, std::string{0, 51, 102, static_cast<char>(153),
                                                static_cast<char>(204), static_cast<char>(255),
                                                1, 2, 3, 4, 5, 6});
}

/// The message of the data_loss_error that reading `path` throws.
std::string data_loss_of(const fs::path& path) {
  return error_of<data_loss_error>([&] { read_idx(path); });
}

/// Writes the four files of an MNIST-style directory: `train` and `test`
/// images of 2x2 pixels, with `train_labels` / `test_labels` labels.
void write_mnist(const fs::path& dir, std::uint32_t train, std::uint32_t train_labels,
                 std::uint32_t test, std::uint32_t test_labels) {
  write_file(dir / "train-images-idx3-ubyte.gz",
             gzip(idx_bytes(0x08, {train, 2, 2}, counting_bytes(4 * train))));
  write_file(dir / "train-labels-idx1-ubyte.gz",
             gzip(idx_bytes(0x08, {train_labels}, counting_bytes(train_labels))));
  // Plain files are found too.
  write_file(dir / "t10k-images-idx3-ubyte", idx_bytes(0x08, {test, 2, 2}, counting_bytes(4 * test)));
  write_file(dir / "t10k-labels-idx1-ubyte", idx_bytes(0x08, {test_labels}, counting_bytes(test_labels)));
}

} // namespace

// -- reading ----------------------------------------------------------------------

TEST_CASE("read_idx reads plain and gzip files to the same dims and bytes") {
  temporary_directory dir{"idx_test"};
  const auto bytes = small_images();
  write_file(dir.path() / "images-idx3-ubyte", bytes);
  write_file(dir.path() / "images-idx3-ubyte.gz", gzip(bytes));
  write_file(dir.path() / "sniffed.bin", gzip(bytes)); // gzip found by its magic
  for (const char* name : {"images-idx3-ubyte", "images-idx3-ubyte.gz", "sniffed.bin"}) {
    CAPTURE(name);
    auto x = read_idx(dir.path() / name);
    CHECK(x.dims == shape_t{2, 3, 2});
    CHECK(x.data == std::vector<std::uint8_t>{0, 51, 102, 153, 204, 255, 1, 2, 3, 4, 5, 6});
  }
  // Large dimensions are big-endian 32-bit numbers.
  write_file(dir.path() / "wide", idx_bytes(0x08, {1, 70000}, counting_bytes(70000)));
  auto wide = read_idx(dir.path() / "wide");
  CHECK(wide.dims == shape_t{1, 70000});
  CHECK(wide.data.size() == 70000);
  CHECK(wide.data[69999] == 69999 % 256);
  // No elements at all is a valid file.
  write_file(dir.path() / "empty.gz", gzip(idx_bytes(0x08, {0, 28, 28}, "")));
  auto empty = read_idx(dir.path() / "empty.gz");
  CHECK(empty.dims == shape_t{0, 28, 28});
  CHECK(empty.data.empty());
  // gzip members may be concatenated (as `cat a.gz b.gz` makes them).
  write_file(dir.path() / "members.gz", gzip(bytes.substr(0, 7)) + gzip(bytes.substr(7)));
  CHECK(read_idx(dir.path() / "members.gz").data == read_idx(dir.path() / "images-idx3-ubyte").data);
}

TEST_CASE("parse_idx reads bytes in memory") {
  auto x = parse_idx(gzip(idx_bytes(0x08, {3}, std::string{7, 8, 9})), "memory");
  CHECK(x.dims == shape_t{3});
  CHECK(x.data == std::vector<std::uint8_t>{7, 8, 9});
  CHECK(error_of<data_loss_error>([] { parse_idx(std::string{1, 0, 8, 1}, "memory"); })
        == "memory: bad IDX magic: the data starts with 0x01 0x00, not 0x00 0x00");
}

TEST_CASE("images become float32 [n, rows * cols] in [0, 1], labels int64 [n]") {
  auto images = idx_images_to_tensor(parse_idx(small_images(), "images"));
  CHECK(images.dtype() == dtype::f32);
  CHECK(images.shape() == shape_t{2, 6});
  CHECK(images == tensor::from<float>({0.0f, 0.2f, 0.4f, 0.6f, 0.8f, 1.0f, 1 / 255.0f,
                                       2 / 255.0f, 3 / 255.0f, 4 / 255.0f, 5 / 255.0f, 6 / 255.0f},
                                      {2, 6}));
  auto labels = idx_labels_to_tensor(parse_idx(idx_bytes(0x08, {4}, std::string{9, 0, 3, 9}), "l"));
  CHECK(labels == tensor::from<std::int64_t>({9, 0, 3, 9}));

  CHECK(error_of<value_error>([] { idx_images_to_tensor(idx_array{{4}, {1, 2, 3, 4}}); })
        == "idx_images_to_tensor: images need 3 dimensions [n, rows, cols], not [4]");
  CHECK(error_of<value_error>([] { idx_labels_to_tensor(idx_array{{2, 2}, {1, 2, 3, 4}}); })
        == "idx_labels_to_tensor: labels need 1 dimension [n], not [2, 2]");
  CHECK(error_of<value_error>([] { idx_labels_to_tensor(idx_array{{5}, {1, 2, 3, 4}}); })
        == "idx_labels_to_tensor: dimensions [5] need 5 elements, but the array holds 4");
}

// -- damage -------------------------------------------------------------------------

TEST_CASE("a missing file is an io_error naming it") {
  temporary_directory dir{"idx_test"};
  const auto path = dir.path() / "absent-idx1-ubyte.gz";
  CHECK(error_of<io_error>([&] { read_idx(path); })
        == "read_idx: cannot open \"" + path.string() + "\": No such file or directory");
}

TEST_CASE("a bad magic, an unknown type and no dimensions are data loss") {
  temporary_directory dir{"idx_test"};
  const auto path = dir.path() / "bad";
  const auto named = "\"" + path.string() + "\": ";
  write_file(path, std::string{0, 1, 8, 1, 0, 0, 0, 0});
  CHECK(data_loss_of(path) == named + "bad IDX magic: the data starts with 0x00 0x01, not 0x00 0x00");
  write_file(path, std::string{0, 0, 7, 1, 0, 0, 0, 0});
  CHECK(data_loss_of(path) == named + "unknown IDX element type code 0x07");
  write_file(path, std::string{0, 0, 8, 0});
  CHECK(data_loss_of(path) == named + "the IDX header declares 0 dimensions");
  // The checks apply inside a gzip stream too.
  write_file(dir.path() / "bad.gz", gzip(std::string{0, 1, 8, 1, 0, 0, 0, 0}));
  CHECK(contains(data_loss_of(dir.path() / "bad.gz"), "bad IDX magic"));
}

TEST_CASE("IDX element types other than unsigned bytes are rejected by name") {
  temporary_directory dir{"idx_test"};
  const auto path = dir.path() / "floats";
  const std::array<std::pair<unsigned char, const char*>, 5> types{
    {{0x09, "signed byte (0x09)"}, {0x0b, "int16 (0x0b)"}, {0x0c, "int32 (0x0c)"},
     {0x0d, "float32 (0x0d)"}, {0x0e, "float64 (0x0e)"}}};
  for (auto [code, name] : types) {
    CAPTURE(name);
    write_file(path, idx_bytes(code, {1}, std::string(8, '\0')));
    CHECK(error_of<value_error>([&] { read_idx(path); })
          == "\"" + path.string() + "\": IDX elements of type " + name
               + " are not supported; lockstep reads unsigned bytes (0x08) only");
  }
}

TEST_CASE("a file truncated anywhere is data loss naming the file") {
  temporary_directory dir{"idx_test"};
  const auto whole = small_images(); // 4 + 12 header bytes, 12 elements
  REQUIRE(whole.size() == 28);
  const auto path = dir.path() / "images-idx3-ubyte";
  const auto named = "\"" + path.string() + "\": ";
  for (std::size_t length = 0; length < whole.size(); ++length) {
    CAPTURE(length);
    write_file(path, whole.substr(0, length));
    const auto message = data_loss_of(path);
    CHECK(message.rfind(named + "truncated", 0) == 0);
  }
  write_file(path, whole.substr(0, 3));
  CHECK(data_loss_of(path) == named + "truncated: 3 bytes, shorter than the 4-byte IDX magic");
  write_file(path, whole.substr(0, 9));
  CHECK(data_loss_of(path)
        == named + "truncated header: 3 dimensions need a header of 16 bytes, but the data ends "
                   "after 9");
  write_file(path, whole.substr(0, 20));
  CHECK(data_loss_of(path)
        == named + "truncated: the dimensions [2, 3, 2] need 12 bytes of elements, but only 4 "
                   "follow the header");
}

TEST_CASE("a gzip stream truncated anywhere is data loss naming the file") {
  temporary_directory dir{"idx_test"};
  const auto compressed = gzip(small_images());
  const auto path = dir.path() / "images-idx3-ubyte.gz";
  const auto named = "\"" + path.string() + "\": ";
  for (std::size_t length = 0; length < compressed.size(); ++length) {
    CAPTURE(length);
    write_file(path, compressed.substr(0, length));
    const auto message = data_loss_of(path);
    CHECK(message.rfind(named + "truncated gzip stream", 0) == 0);
  }
  write_file(path, compressed.substr(0, compressed.size() - 3)); // in the length trailer
  CHECK(data_loss_of(path)
        == named + "truncated gzip stream: the " + std::to_string(compressed.size() - 3)
             + " compressed bytes end before the stream's end");
  write_file(path, compressed.substr(0, 1));
  CHECK(data_loss_of(path)
        == named + "truncated gzip stream: 1 bytes, shorter than gzip's 2-byte magic");
  // A complete stream of a truncated file is the IDX check's to report.
  write_file(path, gzip(small_images().substr(0, 20)));
  CHECK(contains(data_loss_of(path), "need 12 bytes of elements, but only 4 follow the header"));
}

TEST_CASE("bytes after the elements are data loss, in plain and gzip files") {
  temporary_directory dir{"idx_test"};
  const auto path = dir.path() / "labels-idx1-ubyte";
  const auto named = "\"" + path.string() + "\": ";
  write_file(path, idx_bytes(0x08, {2}, "abXYZ"));
  CHECK(data_loss_of(path) == named + "3 trailing bytes after the 2 bytes of elements of dimensions [2]");
  const auto gz = dir.path() / "labels-idx1-ubyte.gz";
  const auto gz_named = "\"" + gz.string() + "\": ";
  write_file(gz, gzip(idx_bytes(0x08, {2}, "abX")));
  CHECK(data_loss_of(gz) == gz_named + "1 trailing bytes after the 2 bytes of elements of dimensions [2]");
  // Garbage after the compressed stream, rather than inside it.
  write_file(gz, gzip(idx_bytes(0x08, {2}, "ab")) + "junk");
  CHECK(data_loss_of(gz) == gz_named + "4 bytes of trailing garbage after the gzip stream");
}

TEST_CASE("a corrupt gzip stream is data loss naming the file") {
  temporary_directory dir{"idx_test"};
  const auto path = dir.path() / "images-idx3-ubyte.gz";
  const auto named = "\"" + path.string() + "\": ";
  // Long enough that the deflate body spans many bytes.
  const auto original = gzip(idx_bytes(0x08, {100, 28, 28}, counting_bytes(78400)));
  // A flipped byte in the CRC-32 trailer.
  auto bad_crc = original;
  bad_crc[bad_crc.size() - 6] ^= 0x5a;
  write_file(path, bad_crc);
  CHECK(data_loss_of(path) == named + "corrupt gzip stream: incorrect data check");
  // A wrong length in the trailer.
  auto bad_length = original;
  bad_length[bad_length.size() - 2] ^= 0x01;
  write_file(path, bad_length);
  CHECK(data_loss_of(path) == named + "corrupt gzip stream: incorrect length check");
  // Damage in the header's method byte and in the compressed body.
  auto bad_method = original;
  bad_method[2] = 7;
  write_file(path, bad_method);
  CHECK(data_loss_of(path) == named + "corrupt gzip stream: unknown compression method");
  for (std::size_t at : {std::size_t{12}, original.size() / 2, original.size() - 12}) {
    CAPTURE(at);
    auto damaged = original;
    damaged[at] = static_cast<char>(damaged[at] ^ 0xff);
    write_file(path, damaged);
    CHECK(data_loss_of(path).rfind(named + "corrupt gzip stream: ", 0) == 0);
  }
  // A .gz name on bytes that are not gzip at all.
  write_file(path, small_images());
  CHECK(data_loss_of(path) == named + "not gzip-compressed: it starts with 0x00 0x00, not gzip's 0x1f 0x8b");
}

// -- MNIST directories ---------------------------------------------------------------

TEST_CASE("load_mnist loads both splits of a directory") {
  temporary_directory dir{"idx_test"};
  write_mnist(dir.path(), 3, 3, 2, 2);
  auto data = load_mnist(dir.path());
  CHECK(data.rows == 2);
  CHECK(data.cols == 2);
  CHECK(data.train.images.shape() == shape_t{3, 4});
  CHECK(data.train.labels == tensor::from<std::int64_t>({0, 1, 2}));
  CHECK(data.test.images.shape() == shape_t{2, 4});
  CHECK(data.test.images.at<float>(7) == doctest::Approx(7 / 255.0f));
  CHECK(data.test.labels == tensor::from<std::int64_t>({0, 1}));
}

TEST_CASE("load_mnist names the files whose counts disagree, and a missing file") {
  temporary_directory dir{"idx_test"};
  write_mnist(dir.path(), 3, 2, 2, 2);
  CHECK(error_of<data_loss_error>([&] { load_mnist(dir.path()); })
        == "load_mnist: \"" + (dir.path() / "train-images-idx3-ubyte.gz").string()
             + "\" has 3 images but \"" + (dir.path() / "train-labels-idx1-ubyte.gz").string()
             + "\" has 2 labels");
  write_mnist(dir.path(), 3, 3, 2, 4);
  CHECK(contains(error_of<data_loss_error>([&] { load_mnist(dir.path()); }),
                 "has 2 images but \"" + (dir.path() / "t10k-labels-idx1-ubyte").string()
                   + "\" has 4 labels"));
  write_mnist(dir.path(), 3, 3, 2, 2);
  write_file(dir.path() / "t10k-images-idx3-ubyte", idx_bytes(0x08, {2, 3, 1}, counting_bytes(6)));
  CHECK(contains(error_of<data_loss_error>([&] { load_mnist(dir.path()); }),
                 "are 2x2 but the test images are 3x1"));
  write_file(dir.path() / "t10k-images-idx3-ubyte", idx_bytes(0x08, {2, 4}, counting_bytes(8)));
  CHECK(contains(error_of<data_loss_error>([&] { load_mnist(dir.path()); }),
                 "images need 3 dimensions [n, rows, cols], not [2, 4]"));
  fs::remove(dir.path() / "t10k-images-idx3-ubyte");
  CHECK(error_of<io_error>([&] { load_mnist(dir.path()); })
        == "load_mnist: neither \"" + (dir.path() / "t10k-images-idx3-ubyte.gz").string()
             + "\" nor \"" + (dir.path() / "t10k-images-idx3-ubyte").string() + "\" exists");
}

TEST_CASE("the real Fashion-MNIST files have 60000 and 10000 images of 28x28") {
  const fs::path dir{fashion_mnist_directory};
  if (!fs::exists(dir / "train-images-idx3-ubyte.gz")) {
    MESSAGE("skipped: " << dir.string()
                        << " is absent (apt-get install dataset-fashion-mnist installs it)");
    return;
  }
  auto data = load_mnist(dir);
  CHECK(data.rows == 28);
  CHECK(data.cols == 28);
  CHECK(data.train.images.shape() == shape_t{60000, 784});
  CHECK(data.train.labels.shape() == shape_t{60000});
  CHECK(data.test.images.shape() == shape_t{10000, 784});
  CHECK(data.test.labels.shape() == shape_t{10000});
  // Ten balanced classes: 6000 of each in training, 1000 in the test split.
  for (const auto* split : {&data.train, &data.test}) {
    std::array<std::int64_t, 10> per_class{};
    std::int64_t out_of_range = 0;
    for (auto label : split->labels.data<std::int64_t>()) {
      if (label < 0 || label >= 10)
        ++out_of_range;
      else
        ++per_class[static_cast<std::size_t>(label)];
    }
    CHECK(out_of_range == 0);
    const auto expected = split->labels.shape()[0] / 10;
    CHECK(per_class == std::array<std::int64_t, 10>{expected, expected, expected, expected,
                                                    expected, expected, expected, expected,
                                                    expected, expected});
  }
  float lowest = 1;
  float highest = 0;
  for (auto x : data.test.images.data<float>()) {
    lowest = std::min(lowest, x);
    highest = std::max(highest, x);
  }
  CHECK(lowest == 0.0f);
  CHECK(highest == 1.0f);
}
