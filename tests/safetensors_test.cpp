// The safetensors codec and the atomic file writer behind checkpoints:
// round trips of every dtype (special values bit for bit), bytes pinned
// against the format's specification, files from other tools, every kind of
// corrupt file, and crash safety of writes through the write seam (a child
// process killed mid-write). No actor system: suite 'unit'.

#include "io/safetensors.hpp"

#include <doctest/doctest.h>

#include "file_support.hpp"
#include "test_support.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/atomic_file.hpp"
#include "lockstep/device_spec.hpp"
#include "lockstep/error.hpp"
#include "lockstep/tensor.hpp"

using namespace lockstep;
using namespace lockstep::detail;
namespace fs = std::filesystem;

namespace {

/// The prefix of this test's temporary directories.
constexpr std::string_view directory_prefix = "lockstep_safetensors_test";

// -- building files by hand ---------------------------------------------------

// The bytes `values`, each 0..255.
std::string bytes_of(std::initializer_list<unsigned> values) {
  std::string result;
  for (auto value : values)
    result.push_back(static_cast<char>(value));
  return result;
}

// A safetensors file with `header` (unpadded) followed by `buffer`.
std::string file_with(const std::string& header, const std::string& buffer = {}) {
  return little_endian_u64(header.size()) + header + buffer;
}

// The message of the data_loss_error that decoding `file` throws.
std::string corruption_of(const std::string& file) {
  return error_of<data_loss_error>([&] { decode_safetensors(file, "test.safetensors"); });
}

std::string sample_file(float first, std::int64_t step) {
  return encode_safetensors({{"w", tensor::from<float>({first, 2, 3})},
                             {"step", tensor::scalar<std::int64_t>(step)}},
                            {{"format", "lockstep"}});
}

} // namespace

// -- round trips --------------------------------------------------------------

TEST_CASE_TEMPLATE("every dtype round-trips bit for bit", T, float, double, std::int32_t,
                   std::int64_t) {
  auto values = special_values<T>();
  const auto count = static_cast<std::int64_t>(values.size());
  std::vector<named_tensor> tensors{
    {"special", tensor::from<T>(values, {count})},
    {"scalar", tensor::scalar<T>(T(42))},
    {"empty", tensor::from<T>({}, {0})},
    {"matrix", tensor::from<T>({1, 2, 3, 4, 5, 6}, {2, 3})},
    {"empty matrix", tensor::zeros(dtype_of_v<T>, {3, 0})},
    {"layer/0/kernel:0", tensor::from<T>({T(-7)}, {1, 1, 1})},
  };
  const std::map<std::string, std::string> metadata{{"step", "12"}, {"format", "lockstep"},
                                                    {"empty", ""}};

  auto file = encode_safetensors(tensors, metadata);
  auto contents = decode_safetensors(file, "round_trip.safetensors", cpu_device(2));

  CHECK(contents.metadata == metadata);
  REQUIRE(contents.tensors.size() == tensors.size());
  for (const auto& [name, original] : tensors) {
    CAPTURE(name);
    REQUIRE(contents.tensors.count(name) == 1);
    const auto& decoded = contents.tensors.at(name);
    CHECK(decoded.dtype() == dtype_of_v<T>);
    CHECK(decoded.shape() == original.shape());
    CHECK(raw_bytes(decoded) == raw_bytes(original));
    CHECK(decoded.device() == cpu_device(2));
  }
  CHECK(contents.tensors.at("matrix") == tensor::from<T>({1, 2, 3, 4, 5, 6}, {2, 3}));
}

TEST_CASE("decoded tensors default to the current device") {
  auto file = encode_safetensors({{"x", tensor::from<double>({0.25})}}, {});
  CHECK(decode_safetensors(file, "f").tensors.at("x").device() == cpu_device(0));
  device_scope scope(cpu_device(3));
  CHECK(decode_safetensors(file, "f").tensors.at("x").device() == cpu_device(3));
}

TEST_CASE("a file without tensors or metadata") {
  // Only the header's checksum, 0xdc9f1c2f: zlib's crc32 of the 8 length
  // bytes and this header with its digits written as 00000000 (computed
  // independently with Python's zlib.crc32); padded to 56 bytes.
  auto file = encode_safetensors({}, {});
  CHECK(file == bytes_of({56, 0, 0, 0, 0, 0, 0, 0})
                  + R"({"__metadata__":{"lockstep.header_crc32":"dc9f1c2f"}})" + "   ");
  auto contents = decode_safetensors(file, "empty.safetensors");
  CHECK(contents.tensors.empty());
  CHECK(contents.metadata.empty());
  // A header without a checksum (another tool's) decodes too.
  CHECK(decode_safetensors(file_with("{}"), "empty.safetensors").tensors.empty());
}

// -- the format, pinned -------------------------------------------------------

TEST_CASE("the encoder writes exactly the bytes the format specifies") {
  // Given out of name order: the buffer holds them in name order all the same.
  std::vector<named_tensor> tensors{{"b", tensor::scalar<std::int64_t>(7)},
                                    {"a", tensor::from<float>({1, 2})}};
  // The checksums are zlib's crc32 (computed independently with Python's
  // zlib.crc32): a's 8 data bytes give 2e3fa576, b's 8 bytes 6fe7d670, and
  // the 8 length bytes with the padded header, its own digits written as
  // 00000000, give 7e11bfd8.
  const std::string header =
    R"({"__metadata__":{"lockstep.crc32.a":"2e3fa576","lockstep.crc32.b":"6fe7d670",)"
    R"("lockstep.header_crc32":"7e11bfd8","step":"3"},)"
    R"("a":{"data_offsets":[0,8],"dtype":"F32","shape":[2]},)"
    R"("b":{"data_offsets":[8,16],"dtype":"I64","shape":[]}})";
  REQUIRE(header.size() == 230);
  // 8 + 230 rounds up to 240: two spaces pad the header to N = 232 = 0xe8.
  const std::string expected = bytes_of({0xe8, 0, 0, 0, 0, 0, 0, 0}) + header + "  "
                               + bytes_of({0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40})
                               + bytes_of({0x07, 0, 0, 0, 0, 0, 0, 0});
  CHECK(encode_safetensors(tensors, {{"step", "3"}}) == expected);

  auto contents = decode_safetensors(expected, "golden.safetensors");
  CHECK(contents.metadata == std::map<std::string, std::string>{{"step", "3"}});
  CHECK(contents.tensors.at("a") == tensor::from<float>({1, 2}));
  CHECK(contents.tensors.at("b") == tensor::scalar<std::int64_t>(7));
}

TEST_CASE("a file written by another tool decodes") {
  // Python's key order, no checksums, no padding, and "b" stored before "a".
  const std::string header =
    R"({"__metadata__": {"format": "numpy"}, )"
    R"("a": {"dtype": "F64", "shape": [1, 2], "data_offsets": [8, 24]}, )"
    R"("b": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})";
  REQUIRE(header.size() % 8 != 0);
  const std::string buffer = bytes_of({0xfe, 0xff, 0xff, 0xff, 0x05, 0, 0, 0})    // -2, 5
                             + bytes_of({0, 0, 0, 0, 0, 0, 0xf8, 0x3f})           // 1.5
                             + bytes_of({0, 0, 0, 0, 0, 0, 0x10, 0xc0});          // -4.0
  auto contents = decode_safetensors(file_with(header, buffer), "other_tool.safetensors");
  CHECK(contents.metadata == std::map<std::string, std::string>{{"format", "numpy"}});
  CHECK(contents.tensors.at("a") == tensor::from<double>({1.5, -4.0}, {1, 2}));
  CHECK(contents.tensors.at("b") == tensor::from<std::int32_t>({-2, 5}));
}

TEST_CASE("F16 and BF16 tensors written by another tool decode") {
  const std::string header =
    R"({"h": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}, )"
    R"("b": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 8]}})";
  const std::string buffer = bytes_of({0x00, 0x3c, 0x00, 0xc0})   // 1, -2
                             + bytes_of({0xc0, 0x3f, 0x80, 0xbf}); // 1.5, -1
  auto contents = decode_safetensors(file_with(header, buffer), "half.safetensors");
  CHECK(contents.tensors.at("h") == tensor::from<float16_t>({float16_t(1.0f), float16_t(-2.0f)}));
  CHECK(contents.tensors.at("b")
        == tensor::from<bfloat16_t>({bfloat16_t(1.5f), bfloat16_t(-1.0f)}));
}

// -- encoder errors -----------------------------------------------------------

TEST_CASE("the encoder rejects names and metadata it cannot write") {
  auto x = tensor::from<float>({1});
  CHECK(error_of<value_error>([&] { encode_safetensors({{"w", x}, {"v", x}, {"w", x}}, {}); })
        == "encode_safetensors: tensor name \"w\" appears twice");
  CHECK(error_of<value_error>([&] { encode_safetensors({{"", x}}, {}); })
        == "encode_safetensors: a tensor name is empty");
  CHECK(error_of<value_error>([&] { encode_safetensors({{"__metadata__", x}}, {}); })
        == "encode_safetensors: \"__metadata__\" names the header's metadata, not a tensor");
  CHECK(error_of<value_error>([&] { encode_safetensors({}, {{"lockstep.crc32.w", "0"}}); })
        == "encode_safetensors: metadata key \"lockstep.crc32.w\" starts with "
           "\"lockstep.crc32.\", which is reserved for checksums");
  CHECK(error_of<value_error>([&] { encode_safetensors({}, {{"lockstep.header_crc32", "0"}}); })
        == "encode_safetensors: metadata key \"lockstep.header_crc32\" is reserved for the "
           "header's checksum");
  CHECK(contains(error_of<value_error>([&] { encode_safetensors({{"bad\xff", x}}, {}); }),
                 "must be valid UTF-8"));
  CHECK_THROWS_AS(encode_safetensors({}, {{"key", "bad\xc3"}}), value_error);
  // A key that merely contains the prefix is the caller's.
  CHECK_NOTHROW(encode_safetensors({}, {{"my.lockstep.crc32.w", "0"}}));
}

// -- corrupt files ------------------------------------------------------------

TEST_CASE("files too short for their header") {
  CHECK(corruption_of("")
        == "test.safetensors: the file has 0 bytes, fewer than the 8 of the header length "
           "(truncated)");
  CHECK(contains(corruption_of(std::string("\x02\0\0", 3)), "the file has 3 bytes"));
  CHECK(corruption_of(little_endian_u64(100'000'001) + "{}")
        == "test.safetensors: the header length 100000001 exceeds the limit of 100000000 bytes");
  CHECK(contains(corruption_of(little_endian_u64(std::numeric_limits<std::uint64_t>::max())),
                 "exceeds the limit"));
  CHECK(corruption_of(little_endian_u64(10) + "{}")
        == "test.safetensors: the header length 10 exceeds the 2 bytes after it (truncated)");
}

TEST_CASE("headers that are not a JSON object") {
  auto not_json = corruption_of(file_with("{\"a\": "));
  CHECK(contains(not_json, "test.safetensors: the header is not valid JSON (the header length "
                           "gives it 6 bytes): "));
  CHECK(contains(not_json, "parse error"));
  CHECK(corruption_of(file_with(std::string("{}\0\0", 4)))
        == "test.safetensors: the header is not valid JSON (the header length gives it 4 bytes): "
           "it holds a NUL byte at offset 2");
  CHECK(contains(corruption_of(file_with(std::string("{\"a\": \"\0\"}", 10))), "NUL byte"));
  CHECK(contains(corruption_of(file_with("{\"a\": \"\xff\"}")), "not valid JSON"));
  CHECK(corruption_of(file_with("[1, 2]"))
        == "test.safetensors: the header is a JSON array, not an object");
  CHECK(corruption_of(file_with("\"text\""))
        == "test.safetensors: the header is a JSON string, not an object");
}

TEST_CASE("malformed tensor entries name the tensor and the problem") {
  auto entry_error = [](const std::string& entry, const std::string& buffer = "") {
    return corruption_of(file_with(R"({"w": )" + entry + "}", buffer));
  };
  const std::string prefix = "test.safetensors: tensor \"w\": ";
  CHECK(entry_error("3") == prefix + "the entry is a JSON number, not an object");
  CHECK(entry_error("[]") == prefix + "the entry is a JSON array, not an object");
  CHECK(entry_error(R"({"shape": [], "data_offsets": [0, 4]})")
        == prefix + "the entry has no \"dtype\"");
  CHECK(entry_error(R"({"dtype": 1, "shape": [], "data_offsets": [0, 4]})")
        == prefix + "\"dtype\" is a JSON number, not a string");
  CHECK(entry_error(R"({"dtype": "F32", "data_offsets": [0, 4]})")
        == prefix + "the entry has no \"shape\"");
  CHECK(entry_error(R"({"dtype": "F32", "shape": 2, "data_offsets": [0, 8]})")
        == prefix + "\"shape\" is a JSON number, not an array");
  CHECK(entry_error(R"({"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 0]})")
        == prefix + "shape [2,-1] has a negative dimension");
  CHECK(entry_error(R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})")
        == prefix + "shape [1.5] has a dimension that is not an integer");
  CHECK(entry_error(R"({"dtype": "F32", "shape": ["2"], "data_offsets": [0, 8]})")
        == prefix + "shape [\"2\"] has a dimension that is not an integer");
  CHECK(entry_error(R"({"dtype": "F32", "shape": [1]})")
        == prefix + "the entry has no \"data_offsets\"");
  for (std::string offsets : {"4", "[0]", "[0,4,8]", "[-4,0]", "[0,4.0]", "[8,4]", "[\"0\",4]"})
    CHECK(entry_error(R"({"dtype": "F32", "shape": [1], "data_offsets": )" + offsets + "}")
          == prefix + "data_offsets " + offsets
               + " is not [begin, end] with integers 0 <= begin <= end");
  CHECK(entry_error(R"({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]})", "01234567")
        == prefix + "data_offsets [0,8] span 8 bytes, but F32 [3] needs 12");
  CHECK(entry_error(R"({"dtype": "I64", "shape": [], "data_offsets": [0, 4]})", "0123")
        == prefix + "data_offsets [0,4] span 4 bytes, but I64 [] needs 8");
}

TEST_CASE("errors about huge shapes and offsets quote their first items only") {
  std::string dims = "[1";
  for (int i = 0; i < 100000; ++i)
    dims += ",-1";
  dims += "]";
  const auto message = corruption_of(
    file_with(R"({"w": {"dtype": "F32", "shape": )" + dims + R"(, "data_offsets": [0, 4]}})"));
  CHECK(message
        == "test.safetensors: tensor \"w\": shape [1,-1,-1,-1,-1,-1,-1,-1,... and 99993 more] "
           "has a negative dimension");
  const auto offsets = corruption_of(file_with(
    R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": )" + dims + "}}"));
  CHECK(offsets.size() < 200);
  CHECK(offsets.find("... and 99993 more]") != std::string::npos);
}

TEST_CASE("a header nested deeper than the format, or with more keys and values than lockstep "
          "parses, is refused before it is parsed") {
  const std::string limit = "test.safetensors: the header's JSON nests deeper than the 3 levels "
                            "of the format (the header object, a tensor's entry, its \"shape\" or "
                            "\"data_offsets\" array): level 4 opens at byte ";
  CHECK(corruption_of(file_with(R"({"w": {"dtype": "F32", "shape": [[1]], "data_offsets": [0, 4]}})",
                                "0123"))
        == limit + "33");
  CHECK(corruption_of(file_with(R"({"__metadata__": {"a": {"b": {}}}})")) == limit + "29");
  // A million levels: refused at the fourth, whatever follows.
  CHECK(corruption_of(file_with(std::string(1'000'000, '[') + std::string(1'000'000, ']')))
        == limit + "3");
  // Brackets inside strings, escaped quotes among them, are text.
  const auto file = file_with(R"({"__metadata__": {"k": "[[[[{{{{\"[[[[", "[[[[": "}}}}"}})");
  const auto decoded = decode_safetensors(file, "test.safetensors");
  CHECK(decoded.metadata == std::map<std::string, std::string>{{"k", "[[[[{{{{\"[[[["},
                                                               {"[[[[", "}}}}"}});

  // At most 2^20 keys and values: metadata of n pairs holds 2n + 2.
  const auto metadata = [](std::size_t pairs) {
    std::string text = R"({"__metadata__":{)";
    for (std::size_t i = 0; i < pairs; ++i)
      text += (i == 0 ? "\"" : ",\"") + std::to_string(i) + "\":\"\"";
    return text + "}}";
  };
  CHECK(decode_safetensors(file_with(metadata(500'000)), "test.safetensors").metadata.size()
        == 500'000);
  CHECK(contains(corruption_of(file_with(metadata(600'000))),
                 "test.safetensors: the header's JSON holds more than 1048576 keys and values "
                 "(some 70,000 tensors), the most lockstep parses: the limit is passed at byte "));
}

TEST_CASE("unsupported dtypes throw dtype_error naming the dtype") {
  auto message = error_of<dtype_error>([] {
    decode_safetensors(file_with(R"({"w": {"dtype": "U16", "shape": [1], "data_offsets": [0, 2]}})",
                                 "01"),
                       "test.safetensors");
  });
  CHECK(message == "test.safetensors: tensor \"w\": dtype U16 is not supported; lockstep reads "
                   "F32, F64, I32, I64, F16, BF16");
  for (auto name : {"U8", "BOOL", "f32", "f16", "bf16", ""})
    CHECK_THROWS_AS(decode_safetensors(file_with(R"({"w": {"dtype": ")" + std::string(name)
                                                 + R"(", "shape": [], "data_offsets": [0, 4]}})",
                                                 "0123"),
                                       "test.safetensors"),
                    dtype_error);
}

TEST_CASE("hostile sizes are rejected without overflow") {
  auto entry_error = [](const std::string& entry) {
    return corruption_of(file_with(R"({"w": )" + entry + "}"));
  };
  const std::string prefix = "test.safetensors: tensor \"w\": ";
  // 2^32 * 2^32 * 2^32 elements overflows any 64-bit product.
  CHECK(entry_error(R"({"dtype": "F64", "shape": [4294967296, 4294967296, 4294967296],
                        "data_offsets": [0, 0]})")
        == prefix + "shape [4294967296, 4294967296, 4294967296] has too many elements");
  // 2^61 elements of 8 bytes would be 2^64 bytes.
  CHECK(entry_error(R"({"dtype": "F64", "shape": [2305843009213693952], "data_offsets": [0, 0]})")
        == prefix + "shape [2305843009213693952] has too many elements");
  CHECK(entry_error(R"({"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 0]})")
        == prefix + "shape [18446744073709551615] has too many elements");
  CHECK(contains(entry_error(R"({"dtype": "F32", "shape": [1e30], "data_offsets": [0, 4]})"),
                 "not an integer"));
  CHECK(entry_error(R"({"dtype": "F32", "shape": [1],
                        "data_offsets": [18446744073709551611, 18446744073709551615]})")
        == prefix + "its data ends at byte 18446744073709551615 of the data buffer, which has "
                    "only 0 bytes (truncated)");
  CHECK(entry_error(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 18446744073709551615]})")
        == prefix + "data_offsets [0,18446744073709551615] span 18446744073709551615 bytes, but "
                    "F32 [1] needs 4");
}

TEST_CASE("data offsets must tile the buffer exactly") {
  auto layout_error = [](const std::string& entries, const std::string& buffer) {
    return corruption_of(file_with("{" + entries + "}", buffer));
  };
  auto f32 = [](const std::string& name, int begin) {
    return "\"" + name + R"(": {"dtype": "F32", "shape": [1], "data_offsets": [)"
           + std::to_string(begin) + ", " + std::to_string(begin + 4) + "]}";
  };
  const std::string twelve = "0123456789ab";
  CHECK(layout_error(f32("a", 0) + ", " + f32("b", 2), "012345")
        == "test.safetensors: tensor \"b\": its bytes [2, 6) overlap tensor \"a\"'s");
  CHECK(layout_error(f32("a", 0) + ", " + f32("b", 8), twelve)
        == "test.safetensors: bytes [4, 8) of the data buffer, before tensor \"b\", belong to "
           "no tensor (a hole)");
  CHECK(layout_error(f32("a", 4), "01234567")
        == "test.safetensors: bytes [0, 4) of the data buffer, before tensor \"a\", belong to "
           "no tensor (a hole)");
  CHECK(layout_error(f32("a", 0), "01234567")
        == "test.safetensors: the data buffer has 4 bytes after the last tensor's data");
  CHECK(layout_error("", "0")
        == "test.safetensors: the data buffer has 1 bytes after the last tensor's data");
  CHECK(layout_error(f32("a", 0) + ", " + f32("b", 4), "0123456")
        == "test.safetensors: tensor \"b\": its data ends at byte 8 of the data buffer, which "
           "has only 7 bytes (truncated)");
  // Two names for one range: the second overlaps the first.
  CHECK(contains(layout_error(f32("a", 0) + ", " + f32("b", 0), "0123"), "overlap"));
  // An empty tensor inside another tensor's bytes overlaps it too.
  CHECK(contains(layout_error(f32("a", 0) + R"(, "e": {"dtype": "F32", "shape": [0],
                                                      "data_offsets": [2, 2]})",
                              "0123"),
                 "tensor \"e\": its bytes [2, 2) overlap tensor \"a\"'s"));
  // Empty tensors between or after others are fine.
  CHECK_NOTHROW(decode_safetensors(
    file_with("{" + f32("a", 0) + R"(, "e": {"dtype": "I64", "shape": [0, 5],
                                             "data_offsets": [4, 4]}, )"
              + f32("z", 4) + "}",
              "01234567"),
    "test.safetensors"));
}

TEST_CASE("metadata must be an object of strings") {
  CHECK(corruption_of(file_with(R"({"__metadata__": [1]})"))
        == "test.safetensors: \"__metadata__\" is a JSON array, not an object of strings");
  CHECK(corruption_of(file_with(R"({"__metadata__": {"ok": "1", "step": 3}})"))
        == "test.safetensors: \"__metadata__\" maps \"step\" to a JSON number, not a string");
  CHECK(corruption_of(file_with(R"({"__metadata__": {"nested": {}}})"))
        == "test.safetensors: \"__metadata__\" maps \"nested\" to a JSON object, not a string");
}

TEST_CASE("checksums catch corrupted data") {
  auto file = encode_safetensors({{"a", tensor::from<float>({1, 2})},
                                  {"b", tensor::from<std::int32_t>({3, 4, 5})}},
                                 {});
  // b's data is the last 12 bytes; flip one bit of its first element.
  auto flipped = file;
  flipped[flipped.size() - 12] ^= 0x01;
  auto message = corruption_of(flipped);
  CHECK(contains(message, "test.safetensors: tensor \"b\": the crc32 of its data is "));
  CHECK(contains(message, ", but the file records \""));

  // A checksum with no tensor: the header of a file without "b" that still
  // records one.
  const std::string header =
    R"({"__metadata__": {"lockstep.crc32.b": "00000000"},)"
    R"("a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})";
  CHECK(corruption_of(file_with(header))
        == "test.safetensors: \"__metadata__\" holds \"lockstep.crc32.b\", a checksum of a "
           "tensor the file does not hold");
  // The crc32 of no bytes is 00000000; any other spelling is a mismatch.
  CHECK_NOTHROW(decode_safetensors(
    file_with(R"({"__metadata__": {"lockstep.crc32.a": "00000000"},)"
              R"("a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})"),
    "test.safetensors"));
  CHECK(contains(corruption_of(file_with(
                   R"({"__metadata__": {"lockstep.crc32.a": "0"},)"
                   R"("a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})")),
                 "tensor \"a\": the crc32 of its data is 00000000, but the file records \"0\""));
}

TEST_CASE("every truncation of a valid file is data loss, and so is an extra byte") {
  auto file = encode_safetensors({{"a", tensor::from<float>({1, 2})},
                                  {"b", tensor::scalar<std::int64_t>(-1)}},
                                 {{"step", "3"}});
  REQUIRE_NOTHROW(decode_safetensors(file, "test.safetensors"));
  for (std::size_t length = 0; length < file.size(); ++length) {
    CAPTURE(length);
    CHECK_THROWS_AS(decode_safetensors(file.substr(0, length), "test.safetensors"),
                    data_loss_error);
  }
  CHECK(contains(corruption_of(file + "x"), "1 bytes after the last tensor's data"));
}

// -- files --------------------------------------------------------------------

TEST_CASE("read_safetensors reads a file, or throws io_error naming it") {
  temporary_directory dir{directory_prefix};
  auto path = dir.path() / "model.safetensors";
  write_file(path, sample_file(1, 10));
  auto contents = read_safetensors(path, cpu_device(1));
  CHECK(contents.tensors.at("step") == tensor::scalar<std::int64_t>(10));
  CHECK(contents.tensors.at("w").device() == cpu_device(1));
  CHECK(contents.metadata == std::map<std::string, std::string>{{"format", "lockstep"}});

  auto missing = dir.path() / "missing.safetensors";
  auto message = error_of<io_error>([&] { read_safetensors(missing); });
  CHECK(contains(message, "\"" + missing.string() + "\""));
  CHECK(contains(message, "No such file or directory"));
  CHECK(error_of<io_error>([&] { read_safetensors(dir.path()); })
        == "\"" + dir.path().string() + "\" is a directory, not a regular file; lockstep reads "
                                        "data and checkpoints only from regular files");

  write_file(path, "not a safetensors file");
  CHECK(contains(error_of<data_loss_error>([&] { read_safetensors(path); }),
                 path.string() + ": the header length "));
}

TEST_CASE("a file is refused by its size before any tensor byte is read") {
  temporary_directory dir{directory_prefix};
  auto path = dir.path() / "model.safetensors";
  const auto whole = sample_file(1, 10);
  write_file(path, whole);
  const auto header = safetensors_file::open(path).header();
  CHECK(header.file_size() == whole.size());
  CHECK(header.has_header_checksum);
  CHECK(header.checksums.size() == 2);
  CHECK(header.metadata == std::map<std::string, std::string>{{"format", "lockstep"}});

  // One byte short or one byte more: refused by open, which reads only the
  // header, naming the file and the tensor or the extra bytes.
  write_file(path, whole.substr(0, whole.size() - 1));
  CHECK(error_of<data_loss_error>([&] { safetensors_file::open(path); })
        == path.string() + ": tensor \"w\": its data ends at byte 20 of the data buffer, which "
                           "has only 19 bytes (truncated)");
  write_file(path, whole + "x");
  CHECK(error_of<data_loss_error>([&] { safetensors_file::open(path); })
        == path.string() + ": the data buffer has 1 bytes after the last tensor's data");
}

TEST_CASE("the header checksum covers the header length and every header byte") {
  const auto file = sample_file(1, 10);
  const auto header_length = decode_header_length(file, file.size(), "test.safetensors");
  const auto header = decode_safetensors_header(file, file.size(), "test.safetensors");
  REQUIRE(header.has_header_checksum);
  // Any change of a header byte that leaves valid JSON is a checksum
  // mismatch: here the metadata key "format", and its value.
  for (const std::string_view from : {"\"format\"", "\"lockstep\""}) {
    CAPTURE(from);
    auto changed = file;
    const auto at = changed.find(from);
    REQUIRE(at != std::string::npos);
    REQUIRE(at < 8 + header_length);
    changed[at + 1] = static_cast<char>(changed[at + 1] ^ 0x01);
    CHECK(contains(corruption_of(changed), "test.safetensors: the crc32 of the header length and "
                                           "the header is "));
  }
  // The checksum's own digits.
  auto changed = file;
  const auto digits = changed.find("\"lockstep.header_crc32\":\"") + 25;
  changed[digits] = changed[digits] == '0' ? '1' : '0';
  CHECK(contains(corruption_of(changed), ", but the header records \""));
  // Text like the field inside a JSON string is escaped, so it is not the
  // field: the one field is found, and its digits do not match.
  auto message = corruption_of(file_with(
    R"({"__metadata__":{"lockstep.header_crc32":"00000000","x":"\"lockstep.header_crc32\":\""}})"));
  CHECK(contains(message, "test.safetensors: the crc32 of the header length and the header is "));
  CHECK(contains(message, ", but the header records \"00000000\" (the header length or the "
                          "header is corrupt)"));
  // The field twice, or cut short.
  CHECK(corruption_of(file_with(R"({"a":1,"lockstep.header_crc32":"1"})"))
        == "test.safetensors: the header's checksum field \"lockstep.header_crc32\" does not "
           "hold 8 characters before the header ends (after the 35 bytes the header length "
           "gives)");
  CHECK(corruption_of(file_with(R"({"__metadata__":{"lockstep.header_crc32":"00000000"},)"
                                R"("w":{"lockstep.header_crc32":"00000000"}})"))
        == "test.safetensors: the header holds its checksum field \"lockstep.header_crc32\" twice");
  // Written by hand with a space, the field is not lockstep's.
  CHECK(corruption_of(file_with(R"({"__metadata__":{"lockstep.header_crc32": "00000000"}})"))
        == "test.safetensors: \"__metadata__\" holds \"lockstep.header_crc32\" in a form "
           "lockstep does not write");
}

TEST_CASE("is_atomic_write_temporary recognises the temporaries' names") {
  CHECK(is_atomic_write_temporary("model.safetensors.tmp.1234.0"));
  CHECK(is_atomic_write_temporary("/some/dir/ckpt-7.index.tmp.1.99"));
  CHECK(is_atomic_write_temporary("x.tmp.1.2"));
  CHECK_FALSE(is_atomic_write_temporary("model.safetensors"));
  CHECK_FALSE(is_atomic_write_temporary("model.tmp"));
  CHECK_FALSE(is_atomic_write_temporary(".tmp.1.2"));
  CHECK_FALSE(is_atomic_write_temporary("x.tmp.1."));
  CHECK_FALSE(is_atomic_write_temporary("x.tmp..2"));
  CHECK_FALSE(is_atomic_write_temporary("x.tmp.pid.2"));
  CHECK_FALSE(is_atomic_write_temporary("x.tmp.1.2x"));
  CHECK_FALSE(is_atomic_write_temporary("x.tmp.1.2.safetensors"));
  CHECK_FALSE(is_atomic_write_temporary("x.tmpl.1.2"));
  CHECK_FALSE(is_atomic_write_temporary("/dir.tmp.1.2/model"));
}

TEST_CASE("write_file_atomically creates and replaces files") {
  temporary_directory dir{directory_prefix};
  auto path = dir.path() / "model.safetensors";
  write_file_atomically(path, sample_file(1, 1));
  CHECK(read_file(path) == sample_file(1, 1));
  write_file_atomically(path, sample_file(2, 2));
  CHECK(read_file(path) == sample_file(2, 2));
  CHECK(read_safetensors(path).tensors.at("w").at<float>(0) == 2);
  write_file_atomically(path, "");
  CHECK(read_file(path).empty());
  CHECK(temporaries_in(dir.path()).empty());
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 1);

  // A bare file name is relative to the working directory.
  auto previous = fs::current_path();
  fs::current_path(dir.path());
  write_file_atomically("relative", "here");
  fs::current_path(previous);
  CHECK(read_file(dir.path() / "relative") == "here");
}

TEST_CASE("write_file_atomically throws io_error naming the path and cleans up") {
  temporary_directory dir{directory_prefix};
  auto unreachable = dir.path() / "no such directory" / "model.safetensors";
  auto message = error_of<io_error>([&] { write_file_atomically(unreachable, "bytes"); });
  CHECK(contains(message, "open("));
  CHECK(contains(message, "failed on \"" + unreachable.string() + ".tmp."));
  CHECK(contains(message, "No such file or directory"));

  // rename fails onto a non-empty directory; the temporary goes away.
  auto occupied = dir.path() / "occupied";
  fs::create_directories(occupied / "inside");
  message = error_of<io_error>([&] { write_file_atomically(occupied, "bytes"); });
  CHECK(contains(message, "rename("));
  CHECK(contains(message, "failed on \"" + occupied.string() + "\""));
  CHECK(temporaries_in(dir.path()).empty());

  // A hook that throws fails the write the same way and leaves the old file.
  hook_guard guard;
  auto path = dir.path() / "model.safetensors";
  write_file_atomically(path, "old");
  for (auto failing : {atomic_write_stage::partial_write, atomic_write_stage::before_rename}) {
    set_atomic_write_hook([failing](atomic_write_stage stage) {
      if (stage == failing)
        throw io_error("injected");
    });
    CHECK(error_of<io_error>([&] { write_file_atomically(path, "new bytes"); }) == "injected");
    CHECK(read_file(path) == "old");
    CHECK(temporaries_in(dir.path()).empty());
  }
}

TEST_CASE("a writer killed at any stage leaves the old file whole") {
  temporary_directory dir{directory_prefix};
  auto path = dir.path() / "model.safetensors";
  const auto old_bytes = sample_file(1, 100);
  const auto new_bytes = sample_file(2, 200);
  write_file_atomically(path, old_bytes);

  for (auto stage : {atomic_write_stage::partial_write, atomic_write_stage::before_rename}) {
    CAPTURE(static_cast<int>(stage));
    auto [pid, status] =
      run_in_child_killed_at(stage, [&] { write_file_atomically(path, new_bytes); });
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);

    CHECK(read_file(path) == old_bytes);
    CHECK(read_safetensors(path).tensors.at("step") == tensor::scalar<std::int64_t>(100));

    // The dead writer's temporary is left behind, recognisably, holding what
    // it had written by then.
    auto leftovers = temporaries_in(dir.path());
    REQUIRE(leftovers.size() == 1);
    CHECK(leftovers[0].filename().string().starts_with("model.safetensors.tmp."
                                                        + std::to_string(pid) + "."));
    auto written = read_file(leftovers[0]);
    if (stage == atomic_write_stage::partial_write)
      CHECK(written == new_bytes.substr(0, new_bytes.size() / 2));
    else
      CHECK(written == new_bytes);
    fs::remove(leftovers[0]);
  }

  // Without a hook, the next write goes through.
  write_file_atomically(path, new_bytes);
  CHECK(read_safetensors(path).tensors.at("step") == tensor::scalar<std::int64_t>(200));
}
