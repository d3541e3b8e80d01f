// The IDX reader: plain and gzip files written by the test itself, every
// kind of damage, special files in place of data files, files that claim
// or inflate to gigabytes (measured by a counting operator new, and under
// an address-space limit), the MNIST directory loader, and the real
// Fashion-MNIST files when the dataset-fashion-mnist package is installed.
// No actor system: suite 'unit'.

#include "lockstep/idx.hpp"

#include <doctest/doctest.h>

#include "allocation_counter.hpp" // this binary's operator new counts bytes
#include "file_support.hpp"
#include "special_files.hpp"
#include "test_support.hpp"

#include <sys/resource.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
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

/// A gzip stream (one member) of `head` followed by `mebibytes` MiB of
/// zeros, built in milliseconds however large: the deflate output for one
/// MiB of zeros that follows zeros refers only to zeros in the window, so
/// it is made once and repeated, and the CRC-32 is combined, not computed
/// over the data. About 1 KiB of stream per MiB (deflate's 1032:1 limit).
std::string zeros_bomb(const std::string& head, std::size_t mebibytes) {
  REQUIRE(mebibytes >= 1);
  constexpr std::size_t mib = std::size_t{1} << 20;
  const std::string zeros(mib, '\0');
  z_stream stream{};
  REQUIRE(deflateInit2(&stream, Z_BEST_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 9, Z_DEFAULT_STRATEGY)
          == Z_OK);
  const auto compress = [&](const std::string& in, int flush) {
    std::string out;
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    stream.avail_in = static_cast<uInt>(in.size());
    char buffer[1 << 16];
    do {
      stream.next_out = reinterpret_cast<Bytef*>(buffer);
      stream.avail_out = sizeof buffer;
      const int status = deflate(&stream, flush);
      REQUIRE((status == Z_OK || status == Z_STREAM_END));
      out.append(buffer, sizeof buffer - stream.avail_out);
    } while (stream.avail_out == 0);
    return out;
  };
  std::string out{"\x1f\x8b\x08\0\0\0\0\0\0\x03", 10}; // gzip header: deflate, no name, Unix
  out += compress(head + zeros, Z_SYNC_FLUSH); // byte-aligned: the next part starts a block
  const auto next_mib = compress(zeros, Z_SYNC_FLUSH);
  for (std::size_t i = 1; i < mebibytes; ++i)
    out += next_mib;
  out += compress("", Z_FINISH);
  deflateEnd(&stream);
  auto crc = crc32(0, reinterpret_cast<const Bytef*>(head.data()), static_cast<uInt>(head.size()));
  const auto zeros_crc = crc32(0, reinterpret_cast<const Bytef*>(zeros.data()), mib);
  for (std::size_t i = 0; i < mebibytes; ++i)
    crc = crc32_combine(crc, zeros_crc, mib);
  const std::uint64_t length = head.size() + mebibytes * mib;
  for (std::uint64_t field : {std::uint64_t{crc}, length}) // little-endian, length mod 2^32
    for (int shift : {0, 8, 16, 24})
      out.push_back(static_cast<char>((field >> shift) & 0xff));
  return out;
}

/// `n` bytes that deflate cannot shrink (xorshift64).
std::string incompressible_bytes(std::size_t n) {
  std::string out(n, '\0');
  std::uint64_t x = 0x9e3779b97f4a7c15;
  for (auto& c : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x >> 56);
  }
  return out;
}

/// A file of `size` bytes that starts with `head` and holds no data blocks
/// for the rest (a sparse file: zeros when read).
void write_sparse_file(const fs::path& path, const std::string& head, std::uintmax_t size) {
  write_file(path, head);
  fs::resize_file(path, size);
}

/// The bytes allocated at most at once while `action` ran, beyond those
/// live before it.
template <class F>
std::size_t peak_allocation_of(F&& action) {
  const auto baseline = allocation_counter::current.load();
  allocation_counter::reset_peak();
  action();
  return allocation_counter::peak_since(baseline);
}

/// Why an address-space limit cannot be used in this build, or empty: the
/// sanitizers reserve terabytes of shadow memory up front.
std::string address_space_limit_unusable() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return "a sanitizer reserves its shadow memory as address space";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) \
  || __has_feature(memory_sanitizer)
  return "a sanitizer reserves its shadow memory as address space";
#endif
#endif
  return {};
}

/// This process's address space in bytes (VmSize).
std::uint64_t address_space_in_use() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t pages = 0;
  statm >> pages;
  REQUIRE(statm);
  return pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

/// Room left in the address space of a limited child: enough for the
/// library's constant buffers, far below the gigabytes the files claim.
constexpr std::uint64_t address_space_headroom = 512ull << 20;

/// Runs `action` in a forked child whose address space may grow by only
/// `address_space_headroom`; what it reports as run_in_bounded_child does.
template <class F>
bounded_child_result run_with_address_space_limit(F&& action) {
  const auto limit = address_space_in_use() + address_space_headroom;
  return run_in_bounded_child(120, [&] {
    const rlimit bound{limit, limit};
    if (::setrlimit(RLIMIT_AS, &bound) != 0)
      return std::string("setrlimit failed: ") + std::strerror(errno);
    return action();
  });
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

/// How `read` ended, as a child reports it: "data loss: ..." or
/// "resource: ..." with the error's text, or "no exception".
template <class F>
std::string error_report(F&& read) {
  try {
    read();
  } catch (const data_loss_error& e) {
    return std::string("data loss: ") + e.what();
  } catch (const resource_error& e) {
    return std::string("resource: ") + e.what();
  }
  return "no exception";
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
        == "stat failed on \"" + path.string() + "\": No such file or directory");
}

TEST_CASE("special files are refused by their type, without blocking") {
  // Each read runs in a child under a 5 s alarm: a reader that opened the
  // FIFO would wait for a writer forever, and one that read /dev/zero
  // would never reach its end.
  temporary_directory dir{"idx_test"};
  const special_files specials{dir.path()};
  for (const auto& special : specials.all()) {
    CAPTURE(special.path.string());
    const auto result = run_in_bounded_child(5, [&] {
      return message_of<io_error>([&] { read_idx(special.path); });
    });
    INFO("the child " << describe_end(result));
    REQUIRE(exited_with(result, 0));
    CHECK(result.report
          == "\"" + special.path.string() + "\" is " + special.type
               + ", not a regular file; lockstep reads data and checkpoints only from regular "
                 "files");
  }
  // load_mnist finds a FIFO by its name and refuses it the same way.
  write_mnist(dir.path(), 3, 3, 2, 2);
  const auto images = dir.path() / "train-images-idx3-ubyte.gz";
  fs::remove(images);
  REQUIRE(::mkfifo(images.c_str(), 0600) == 0);
  const auto result = run_in_bounded_child(5, [&] {
    return message_of<io_error>([&] { load_mnist(dir.path()); });
  });
  INFO("the child " << describe_end(result));
  REQUIRE(exited_with(result, 0));
  CHECK(result.report == "\"" + images.string() + "\" is a FIFO (named pipe), not a regular file; "
                         "lockstep reads data and checkpoints only from regular files");
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
  // In a later member too.
  write_file(gz, gzip(idx_bytes(0x08, {2}, "ab")) + gzip("XY"));
  CHECK(data_loss_of(gz) == gz_named + "2 trailing bytes after the 2 bytes of elements of dimensions [2]");
  // Past one probe of 64 KiB the rest is not inflated, and not counted.
  write_file(gz, gzip(idx_bytes(0x08, {2}, "ab" + std::string(100000, 'x'))));
  CHECK(data_loss_of(gz)
        == gz_named + "at least 65536 trailing bytes after the 2 bytes of elements of dimensions "
                      "[2] (the rest was not inflated)");
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

// -- memory bounded by the header ----------------------------------------------------

TEST_CASE("the test's gzip bomb builder makes a valid stream, read through a growing buffer") {
  temporary_directory dir{"idx_test"};
  const auto path = dir.path() / "zeros-idx2-ubyte.gz";
  // 3 MiB of elements from about 3 KiB: more than the first buffer
  // (1 MiB), so it grows to 2 MiB and then to exactly 3 MiB.
  write_file(path, zeros_bomb(idx_bytes(0x08, {3, 1 << 20}, ""), 3));
  const auto x = read_idx(path);
  CHECK(x.dims == shape_t{3, 1 << 20});
  REQUIRE(x.data.size() == std::size_t{3} << 20);
  CHECK(std::all_of(x.data.begin(), x.data.end(), [](std::uint8_t b) { return b == 0; }));
  if (allocation_counter::active()) {
    const auto peak = peak_allocation_of([&] { read_idx(path); });
    // While it grows from 2 MiB to 3, both buffers; plus a constant.
    CHECK(peak <= (std::size_t{5} << 20) + (std::size_t{1} << 20));
  }
}

TEST_CASE("files that claim or inflate to gigabytes allocate only what their header and data hold") {
  if (!allocation_counter::active()) {
    MESSAGE("skipped: the counting operator new is not in use in this build (a sanitizer's wins)");
    return;
  }
  temporary_directory dir{"idx_test"};
  const auto named = [](const fs::path& path) { return "\"" + path.string() + "\": "; };
  // A constant for the reader's own buffers (256 KiB of compressed input,
  // a 64 KiB probe, messages), far below what any of the files claim.
  constexpr std::size_t constant = std::size_t{1} << 20;

  // A plain file's size settles its claim before anything is allocated:
  // 2^64 - 2^33 + 1 elements in a 12-byte file ...
  const auto huge = dir.path() / "huge-idx2-ubyte";
  write_file(huge, idx_bytes(0x08, {0xffffffff, 0xffffffff}, ""));
  std::size_t peak = peak_allocation_of([&] {
    CHECK(data_loss_of(huge)
          == named(huge) + "truncated: the dimensions [4294967295, 4294967295] need "
                           "18446744065119617025 bytes of elements, but only 0 follow the header");
  });
  CHECK(peak < constant);
  // ... a product past 2^64 ...
  write_file(huge, idx_bytes(0x08, {0xffffffff, 0xffffffff, 0xffffffff}, ""));
  CHECK(data_loss_of(huge)
        == named(huge) + "the dimensions [4294967295, 4294967295, 4294967295] describe more "
                         "elements than fit in memory");
  // ... and 2 GiB of (sparse) bytes after 16 declared elements are not read.
  const auto sparse = dir.path() / "sparse-idx1-ubyte";
  write_sparse_file(sparse, idx_bytes(0x08, {16}, ""), 8 + 16 + (std::uintmax_t{2} << 30));
  peak = peak_allocation_of([&] {
    CHECK(data_loss_of(sparse)
          == named(sparse) + "2147483648 trailing bytes after the 16 bytes of elements of "
                             "dimensions [16]");
  });
  CHECK(peak < constant);

  // A gzip stream that declares 2 GiB in a few bytes is refused at once by
  // deflate's 1032:1 limit.
  const auto tiny = dir.path() / "tiny-idx2-ubyte.gz";
  const auto tiny_bytes = gzip(idx_bytes(0x08, {2, 1u << 30}, std::string(100, 'x')));
  write_file(tiny, tiny_bytes);
  peak = peak_allocation_of([&] {
    CHECK(data_loss_of(tiny)
          == named(tiny) + "the dimensions [2, 1073741824] need 2147483648 bytes of elements, "
                           "more than a gzip stream of " + std::to_string(tiny_bytes.size())
               + " bytes can hold (deflate inflates at most 1032 bytes per compressed byte)");
  });
  CHECK(peak < constant);

  // One that could hold 2 GiB by that limit but holds 2.2 MB: the buffer
  // follows the compressed size (8 times it) and what was inflated, not
  // the claim.
  const auto short_gz = dir.path() / "short-idx2-ubyte.gz";
  const auto short_bytes = gzip(idx_bytes(0x08, {2, 1u << 30}, incompressible_bytes(2200000)));
  REQUIRE(short_bytes.size() * 1032 > (std::uint64_t{2} << 30) + 12);
  write_file(short_gz, short_bytes);
  peak = peak_allocation_of([&] {
    CHECK(data_loss_of(short_gz)
          == named(short_gz) + "truncated: the dimensions [2, 1073741824] need 2147483648 bytes "
                               "of elements, but only 2200000 follow the header");
  });
  CHECK(peak < 8 * short_bytes.size() + constant);

  // A gzip bomb: 2 GiB of zeros in 2 MB behind a header that declares
  // 1024 elements. Inflated no further than the elements and one probe.
  const auto bomb = dir.path() / "bomb-idx1-ubyte.gz";
  const auto bomb_bytes = zeros_bomb(idx_bytes(0x08, {1024}, ""), 2048);
  CHECK(bomb_bytes.size() < (std::size_t{3} << 20));
  write_file(bomb, bomb_bytes);
  peak = peak_allocation_of([&] {
    CHECK(data_loss_of(bomb)
          == named(bomb) + "at least 65536 trailing bytes after the 1024 bytes of elements of "
                           "dimensions [1024] (the rest was not inflated)");
  });
  CHECK(peak < constant);
}

TEST_CASE("under an address-space limit, gigabyte claims are refused and real needs reported") {
  const auto unusable = address_space_limit_unusable();
  if (!unusable.empty()) {
    MESSAGE("skipped: " << unusable);
    return;
  }
  // Each read runs in a child whose address space may grow by 512 MiB;
  // every file below claims or inflates to 2 GiB or more.
  temporary_directory dir{"idx_test"};
  const auto named = [](const fs::path& path) { return "\"" + path.string() + "\": "; };
  struct limited_case {
    fs::path path;
    std::string expected; // "data loss: ..." or "resource: ..."
  };
  std::vector<limited_case> cases;

  const auto bomb = dir.path() / "bomb-idx1-ubyte.gz";
  write_file(bomb, zeros_bomb(idx_bytes(0x08, {1024}, ""), 2048));
  cases.push_back({bomb, "data loss: " + named(bomb)
                           + "at least 65536 trailing bytes after the 1024 bytes of elements of "
                             "dimensions [1024] (the rest was not inflated)"});
  const auto short_gz = dir.path() / "short-idx2-ubyte.gz";
  write_file(short_gz, gzip(idx_bytes(0x08, {2, 1u << 30}, incompressible_bytes(2200000))));
  cases.push_back({short_gz, "data loss: " + named(short_gz)
                               + "truncated: the dimensions [2, 1073741824] need 2147483648 bytes "
                                 "of elements, but only 2200000 follow the header"});
  const auto trailing = dir.path() / "trailing-idx1-ubyte";
  write_sparse_file(trailing, idx_bytes(0x08, {16}, ""), 8 + 16 + (std::uintmax_t{3} << 30));
  cases.push_back({trailing, "data loss: " + named(trailing)
                               + "3221225472 trailing bytes after the 16 bytes of elements of "
                                 "dimensions [16]"});
  // Valid files whose elements do not fit: the error names the file and
  // the bytes they need, instead of a bare std::bad_alloc.
  const auto valid_gz = dir.path() / "valid-idx2-ubyte.gz";
  write_file(valid_gz, zeros_bomb(idx_bytes(0x08, {2, 1u << 30}, ""), 2048));
  cases.push_back({valid_gz, "resource: " + named(valid_gz)
                               + "out of memory: the elements of dimensions [2, 1073741824] need "
                                 "2147483648 bytes"});
  const auto valid_plain = dir.path() / "valid-idx2-ubyte";
  write_sparse_file(valid_plain, idx_bytes(0x08, {3, 1u << 30}, ""), (std::uintmax_t{3} << 30) + 12);
  cases.push_back({valid_plain, "resource: " + named(valid_plain)
                                  + "out of memory: the elements of dimensions [3, 1073741824] "
                                    "need 3221225472 bytes, and allocating 3221225472 bytes for "
                                    "them failed"});

  for (const auto& c : cases) {
    CAPTURE(c.path.string());
    const auto result =
      run_with_address_space_limit([&] { return error_report([&] { read_idx(c.path); }); });
    INFO("the child " << describe_end(result));
    CHECK(exited_with(result, 0));
    CHECK(result.report.rfind(c.expected, 0) == 0);
  }
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

TEST_CASE("load_mnist checks the four headers against each other before inflating any file") {
  if (!allocation_counter::active()) {
    MESSAGE("skipped: the counting operator new is not in use in this build (a sanitizer's wins)");
    return;
  }
  temporary_directory dir{"idx_test"};
  const auto quoted = [&](const char* name) { return "\"" + (dir.path() / name).string() + "\""; };
  // What reading the headers may cost: the reader's input buffer and the
  // messages, far below the 64 MiB of images each case below holds.
  constexpr std::size_t constant = std::size_t{1} << 20;
  const auto big_images = zeros_bomb(idx_bytes(0x08, {65536, 32, 32}, ""), 64);
  const auto peak_and_error = [&] {
    std::string message;
    const auto peak = peak_allocation_of(
      [&] { message = error_of<data_loss_error>([&] { load_mnist(dir.path()); }); });
    return std::pair{peak, message};
  };

  // 64 MiB of valid images whose labels file declares fewer labels.
  write_mnist(dir.path(), 2, 2, 2, 2);
  write_file(dir.path() / "train-images-idx3-ubyte.gz", big_images);
  write_file(dir.path() / "train-labels-idx1-ubyte.gz",
             gzip(idx_bytes(0x08, {60000}, counting_bytes(60000))));
  auto [peak, message] = peak_and_error();
  CHECK(message == "load_mnist: " + quoted("train-images-idx3-ubyte.gz")
                     + " has 65536 images but " + quoted("train-labels-idx1-ubyte.gz")
                     + " has 60000 labels");
  CHECK(peak < constant);

  // A labels header that promises more than its 30-odd compressed bytes
  // can hold: refused by its own size, before the images are inflated.
  const auto empty_labels = gzip(idx_bytes(0x08, {65536}, ""));
  write_file(dir.path() / "train-labels-idx1-ubyte.gz", empty_labels);
  std::tie(peak, message) = peak_and_error();
  CHECK(message == quoted("train-labels-idx1-ubyte.gz")
                     + ": the dimensions [65536] need 65536 bytes of elements, more than a gzip "
                       "stream of " + std::to_string(empty_labels.size())
                     + " bytes can hold (deflate inflates at most 1032 bytes per compressed byte)");
  CHECK(peak < constant);

  // A valid training split of 64 MiB, and test labels that disagree with
  // the test images: the training files are not read either.
  write_file(dir.path() / "train-labels-idx1-ubyte.gz",
             gzip(idx_bytes(0x08, {65536}, counting_bytes(65536))));
  write_file(dir.path() / "t10k-labels-idx1-ubyte", idx_bytes(0x08, {3}, counting_bytes(3)));
  std::tie(peak, message) = peak_and_error();
  CHECK(message == "load_mnist: " + quoted("t10k-images-idx3-ubyte") + " has 2 images but "
                     + quoted("t10k-labels-idx1-ubyte") + " has 3 labels");
  CHECK(peak < constant);

  // Test images of another size than the training images: the same.
  write_file(dir.path() / "t10k-labels-idx1-ubyte", idx_bytes(0x08, {2}, counting_bytes(2)));
  std::tie(peak, message) = peak_and_error();
  CHECK(contains(message, "are 32x32 but the test images are 2x2"));
  CHECK(peak < constant);
}

TEST_CASE("under an address-space limit, a gigabyte of images whose labels disagree is refused "
          "by the count") {
  const auto unusable = address_space_limit_unusable();
  if (!unusable.empty()) {
    MESSAGE("skipped: " << unusable);
    return;
  }
  // The case, at 1 GiB: images that inflate in full (1 MB of
  // gzip), and a labels file that declares another count. Reading the
  // images first ran out of the child's 512 MiB of room.
  temporary_directory dir{"idx_test"};
  write_mnist(dir.path(), 2, 2, 2, 2);
  const auto images = dir.path() / "train-images-idx3-ubyte.gz";
  const auto labels = dir.path() / "train-labels-idx1-ubyte.gz";
  write_file(images, zeros_bomb(idx_bytes(0x08, {1u << 20, 32, 32}, ""), 1024));
  write_file(labels, gzip(idx_bytes(0x08, {60000}, counting_bytes(60000))));
  const auto result =
    run_with_address_space_limit([&] { return error_report([&] { load_mnist(dir.path()); }); });
  INFO("the child " << describe_end(result));
  CHECK(exited_with(result, 0));
  CHECK(result.report
        == "data loss: load_mnist: \"" + images.string() + "\" has 1048576 images but \""
             + labels.string() + "\" has 60000 labels");
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
