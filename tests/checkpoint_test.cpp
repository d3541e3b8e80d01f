// Checkpoints of single-copy variables (the default strategy and
// one_device_strategy): round trips of every dtype bit for bit, the file
// parsed by hand as the safetensors specification describes it, every
// mismatch and corruption that restore must reject without touching any
// variable, crash safety of a save killed mid-write (a forked child killed
// through the write seam), and checkpoint_manager's directory of
// ckpt-<step>.safetensors files. No actor system (mirrored variables are in
// checkpoint_mirrored_test.cpp), so this also runs under ThreadSanitizer:
// suite 'unit'.

#include "lockstep/checkpoint.hpp"

#include <doctest/doctest.h>

#include "file_support.hpp"
#include "test_support.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include <nlohmann/json.hpp>

#include "atomic_file.hpp"
#include "safetensors.hpp"
#include "lockstep/context.hpp"
#include "lockstep/error.hpp"
#include "lockstep/one_device_strategy.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/variable.hpp"

using namespace lockstep;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

/// The prefix of this test's temporary directories.
constexpr std::string_view directory_prefix = "lockstep_checkpoint_test";

// -- errors -------------------------------------------------------------------

// The message of the exception `f` throws, which must be exactly an E (not
// a subclass: a missing variable is a value_error, not a shape_error).
template <class E, class F>
std::string exact_error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    CHECK_MESSAGE(typeid(e) == typeid(E), "threw a subclass: ", typeid(e).name());
    return e.what();
  }
  FAIL("no exception was thrown");
  return {};
}

// -- values -------------------------------------------------------------------

// Same dtype, shape and bits.
bool identical(const tensor& a, const tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && raw_bytes(a) == raw_bytes(b);
}

// `values` as the format stores them: each element little-endian, written
// byte by byte here rather than copied, so the test does not share the
// library's assumption about the host.
template <class T>
std::string little_endian_bytes(const std::vector<T>& values) {
  using bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  std::string out;
  for (T value : values) {
    const auto word = std::bit_cast<bits>(value);
    for (std::size_t i = 0; i < sizeof(T); ++i)
      out.push_back(static_cast<char>((word >> (8 * i)) & 0xff));
  }
  return out;
}

// `count` values cycling through special_values<T>() from `start`.
template <class T>
std::vector<T> cycled(std::size_t count, std::size_t start = 0) {
  const auto special = special_values<T>();
  std::vector<T> out;
  for (std::size_t i = 0; i < count; ++i)
    out.push_back(special[(start + i) % special.size()]);
  return out;
}

// Snapshots of the variables' values (later writes do not change them).
std::vector<tensor> values_of(const std::vector<variable>& variables) {
  std::vector<tensor> out;
  for (const auto& v : variables)
    out.push_back(v.value());
  return out;
}

// Every variable still holds, bit for bit, the value it held in `before`.
void check_unchanged(const std::vector<variable>& variables, const std::vector<tensor>& before) {
  REQUIRE(variables.size() == before.size());
  for (std::size_t i = 0; i < variables.size(); ++i) {
    CAPTURE(variables[i].name());
    CHECK(identical(variables[i].value(), before[i]));
  }
}

// -- the file by hand -----------------------------------------------------------

// A safetensors file split as the specification describes it.
struct parsed_file {
  std::uint64_t header_length = 0;
  json header;
  std::string buffer;
};

parsed_file parse_by_hand(const std::string& bytes) {
  REQUIRE(bytes.size() >= 8);
  parsed_file file;
  for (int i = 7; i >= 0; --i)
    file.header_length = (file.header_length << 8) | static_cast<unsigned char>(bytes[i]);
  REQUIRE(file.header_length <= bytes.size() - 8);
  file.header = json::parse(bytes.substr(8, file.header_length));
  file.buffer = bytes.substr(8 + file.header_length);
  return file;
}

// -- the file that the failure tests corrupt ------------------------------------

// A checkpoint of a (f32 [3]), b (f64 [2, 2]) and c (i64 scalar) at step 7,
// and variables of the same names, dtypes and shapes holding other values.
struct sample_checkpoint {
  temporary_directory dir{directory_prefix};
  fs::path path = dir.path() / "sample.safetensors";
  std::string bytes;
  variable a{tensor::from<float>({-1, -2, -3}), {.name = "a"}};
  variable b{tensor::from<double>({-4, -5, -6, -7}, {2, 2}), {.name = "b"}};
  variable c{tensor::scalar<std::int64_t>(-8), {.name = "c"}};

  sample_checkpoint() {
    variable sa{tensor::from<float>({1, 2, 3}), {.name = "a"}};
    variable sb{tensor::from<double>({4, 5, 6, 7}, {2, 2}), {.name = "b"}};
    variable sc{tensor::scalar<std::int64_t>(8), {.name = "c"}};
    save(path, {sa, sb, sc}, 7);
    bytes = read_file(path);
  }

  std::vector<variable> all() const { return {a, b, c}; }
};

// -- checkpoint_manager -------------------------------------------------------

std::vector<std::string> file_names(const std::vector<fs::path>& paths) {
  std::vector<std::string> names;
  for (const auto& p : paths)
    names.push_back(p.filename().string());
  return names;
}

} // namespace

// -- round trips --------------------------------------------------------------

TEST_CASE_TEMPLATE("save and restore round-trip every value bit for bit", T, float, double,
                   std::int32_t, std::int64_t) {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "model.safetensors";
  const auto n = special_values<T>().size();
  // The originals: a scalar, empty tensors, a vector of every special value
  // and a rank-3 tensor.
  const std::vector<tensor> saved{
    tensor::scalar<T>(special_values<T>()[1]),
    tensor::from<T>({}, {0}),
    tensor::from<T>({}, {2, 0, 3}),
    tensor::from<T>(special_values<T>()),
    tensor::from<T>(cycled<T>(24, 3), {2, 3, 4}),
    tensor::scalar<T>(special_values<T>()[n - 1]),
  };
  const std::vector<std::string> names{"scalar", "empty", "empty/rank3", "special",
                                       "layer/kernel:0", "last scalar"};
  std::vector<variable> originals;
  std::vector<variable> targets;
  for (std::size_t i = 0; i < saved.size(); ++i) {
    originals.emplace_back(saved[i], variable_options{.name = names[i]});
    targets.emplace_back(tensor::zeros(saved[i].dtype(), saved[i].shape()),
                         variable_options{.name = names[i]});
  }
  save(path, originals, 42);

  const auto info = restore(path, targets);
  for (std::size_t i = 0; i < saved.size(); ++i) {
    CAPTURE(names[i]);
    CHECK(identical(targets[i].value(), saved[i]));
  }
  REQUIRE(info.step.has_value());
  CHECK(*info.step == 42);
  CHECK(info.metadata.at("step") == "42");
  CHECK(info.metadata.at("format") == "lockstep-checkpoint-1");
  CHECK(info.metadata.at("strategy") == get_strategy().to_string());
  CHECK(info.metadata.at("replicas") == "1");
  // The checksums are the file's business, not the caller's.
  CHECK(info.metadata.size() == 4);

  const auto again = read_checkpoint_info(path);
  CHECK(again.step == info.step);
  CHECK(again.metadata == info.metadata);
  // Saving does not change the originals.
  for (std::size_t i = 0; i < saved.size(); ++i)
    CHECK(identical(originals[i].value(), saved[i]));
}

TEST_CASE("restore reads the variables it is given and ignores the others in the file") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "model.safetensors";
  variable w{tensor::from<float>({1, 2}), {.name = "w"}};
  variable bias{tensor::scalar<std::int32_t>(-3), {.name = "bias"}};
  save(path, {w, bias}, 1);

  variable only_bias{tensor::scalar<std::int32_t>(0), {.name = "bias"}};
  restore(path, {only_bias});
  CHECK(only_bias.value() == tensor::scalar<std::int32_t>(-3));
  // Restoring nothing is allowed and still returns the file's info.
  CHECK(restore(path, {}).step == 1);
  // And restoring the same variable twice gives the same result.
  restore(path, {only_bias});
  CHECK(only_bias.value() == tensor::scalar<std::int32_t>(-3));
}

TEST_CASE("the step comes back exactly, extremes included") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "model.safetensors";
  variable w{tensor::scalar<float>(1), {.name = "w"}};
  for (std::int64_t step : {std::int64_t{0}, std::int64_t{9}, std::int64_t{10},
                            std::numeric_limits<std::int64_t>::max(),
                            std::numeric_limits<std::int64_t>::min()}) {
    CAPTURE(step);
    save(path, {w}, step);
    const auto info = read_checkpoint_info(path);
    REQUIRE(info.step.has_value());
    CHECK(*info.step == step);
    CHECK(info.metadata.at("step") == std::to_string(step));
    CHECK(restore(path, {w}).step == step);
  }
}

TEST_CASE("a safetensors file without metadata restores, with no step") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "foreign.safetensors";
  write_file(path, detail::encode_safetensors({{"w", tensor::from<double>({0.25, -0.5})}}, {}));
  variable w{tensor::from<double>({0, 0}), {.name = "w"}};
  const auto info = restore(path, {w});
  CHECK_FALSE(info.step.has_value());
  CHECK(info.metadata.empty());
  CHECK(w.value() == tensor::from<double>({0.25, -0.5}));
  CHECK_FALSE(read_checkpoint_info(path).step.has_value());
}

TEST_CASE("one_device_strategy variables round-trip and the metadata names the strategy") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "model.safetensors";
  one_device_strategy s{"/cpu:0"};
  auto scope = s.scope();
  variable w{tensor::from<float>({1.5f, -2.5f, 0.125f, 8}, {2, 2}), {.name = "dense/kernel"}};
  variable steps{tensor::scalar<std::int64_t>(std::numeric_limits<std::int64_t>::max()),
                 {.name = "steps"}};
  save(path, {w, steps}, 3);

  variable w2{tensor::zeros(dtype::f32, {2, 2}), {.name = "dense/kernel"}};
  variable steps2{tensor::scalar<std::int64_t>(0), {.name = "steps"}};
  const auto info = restore(path, {steps2, w2}); // any order
  CHECK(w2.value() == tensor::from<float>({1.5f, -2.5f, 0.125f, 8}, {2, 2}));
  CHECK(steps2.value() == tensor::scalar<std::int64_t>(std::numeric_limits<std::int64_t>::max()));
  CHECK(info.step == 3);
  CHECK(info.metadata.at("strategy") == s.to_string());
  CHECK(info.metadata.at("replicas") == "1");
  CHECK(info.metadata.at("format") == "lockstep-checkpoint-1");
}

TEST_CASE("save and restore inside a replica function are context errors") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "model.safetensors";
  one_device_strategy s{"/cpu:0"};
  auto scope = s.scope();
  variable w{tensor::from<float>({1, 2}), {.name = "w"}};
  save(path, {w}, 1);
  const auto before = read_file(path);
  w.assign(tensor::from<float>({3, 4}));

  CHECK_THROWS_AS(s.run([&] { save(path, {w}, 2); }), context_error);
  CHECK(read_file(path) == before);
  CHECK_THROWS_AS(s.run([&] { restore(path, {w}); }), context_error);
  CHECK(w.value() == tensor::from<float>({3, 4}));
  CHECK(temporaries_in(dir.path()).empty());
}

// -- the file format -------------------------------------------------------------

TEST_CASE("a checkpoint is a standard safetensors file") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "model.safetensors";
  const std::vector<float> f32_values{1.5f, -0.0f, std::numeric_limits<float>::quiet_NaN(),
                                      -std::numeric_limits<float>::infinity(), 3, 4};
  const std::vector<double> f64_values{0.1, -1e300};
  const std::vector<std::int32_t> i32_values{std::numeric_limits<std::int32_t>::min(), 7,
                                             std::numeric_limits<std::int32_t>::max()};
  const std::vector<std::int64_t> i64_values{std::numeric_limits<std::int64_t>::min()};
  std::vector<variable> variables{
    variable{tensor::from<float>(f32_values, {2, 3}), {.name = "w"}},
    variable{tensor::from<double>(f64_values), {.name = "b"}},
    variable{tensor::from<std::int32_t>(i32_values, {3, 1}), {.name = "counts"}},
    variable{tensor::scalar<std::int64_t>(i64_values[0]), {.name = "step_var"}},
    variable{tensor::from<float>({}, {0, 4}), {.name = "empty"}},
  };
  struct expected_entry {
    std::string dtype;
    shape_t shape;
    std::string bytes;
  };
  const std::map<std::string, expected_entry> expected{
    {"w", {"F32", {2, 3}, little_endian_bytes(f32_values)}},
    {"b", {"F64", {2}, little_endian_bytes(f64_values)}},
    {"counts", {"I32", {3, 1}, little_endian_bytes(i32_values)}},
    {"step_var", {"I64", {}, little_endian_bytes(i64_values)}},
    {"empty", {"F32", {0, 4}, ""}},
  };
  save(path, variables, 1234);
  const auto bytes = read_file(path);
  const auto file = parse_by_hand(bytes);

  // The buffer starts at a multiple of 8.
  CHECK(file.header_length % 8 == 0);
  REQUIRE(file.header.is_object());
  CHECK(file.header.size() == expected.size() + 1); // the tensors and __metadata__

  // __metadata__ maps strings to strings.
  REQUIRE(file.header.contains("__metadata__"));
  const auto& metadata = file.header["__metadata__"];
  REQUIRE(metadata.is_object());
  for (const auto& [key, value] : metadata.items()) {
    CAPTURE(key);
    CHECK(value.is_string());
  }
  CHECK(metadata["format"] == "lockstep-checkpoint-1");
  CHECK(metadata["step"] == "1234");
  CHECK(metadata["replicas"] == "1");
  CHECK(metadata["strategy"] == get_strategy().to_string());
  for (const auto& [name, entry] : expected) {
    // Each tensor carries a checksum: 8 lowercase hex digits.
    const auto key = "lockstep.crc32." + name;
    REQUIRE(metadata.contains(key));
    const auto crc = metadata[key].get<std::string>();
    CHECK(crc.size() == 8);
    CHECK(std::all_of(crc.begin(), crc.end(),
                      [](char ch) { return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'); }));
  }

  // Each tensor: its dtype's name, its shape and its bytes, little-endian,
  // at data_offsets that tile the buffer from 0 without gaps.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [name, entry] : expected) {
    CAPTURE(name);
    REQUIRE(file.header.contains(name));
    const auto& header_entry = file.header[name];
    CHECK(header_entry["dtype"] == entry.dtype);
    CHECK(header_entry["shape"].get<shape_t>() == entry.shape);
    const auto offsets = header_entry["data_offsets"].get<std::vector<std::uint64_t>>();
    REQUIRE(offsets.size() == 2);
    REQUIRE(offsets[0] <= offsets[1]);
    REQUIRE(offsets[1] <= file.buffer.size());
    CHECK(file.buffer.substr(offsets[0], offsets[1] - offsets[0]) == entry.bytes);
    ranges.emplace_back(offsets[0], offsets[1]);
  }
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    CHECK(begin == covered);
    covered = end;
  }
  CHECK(covered == file.buffer.size());
}

// -- duplicate names ----------------------------------------------------------------

TEST_CASE("two variables with the same name are a value_error naming it") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "model.safetensors";
  variable first{tensor::scalar<float>(1), {.name = "dense/bias"}};
  variable other{tensor::scalar<float>(2), {.name = "other"}};
  variable second{tensor::scalar<float>(3), {.name = "dense/bias"}};

  auto message = exact_error_of<value_error>([&] { save(path, {first, other, second}, 1); });
  CHECK(contains(message, "'dense/bias'"));
  CHECK(contains(message, "unique"));
  CHECK_FALSE(fs::exists(path));
  CHECK(temporaries_in(dir.path()).empty());
  // The same handle twice is a duplicate too.
  CHECK_THROWS_AS(save(path, {other, other}, 1), value_error);
  CHECK_FALSE(fs::exists(path));

  variable saved{tensor::scalar<float>(9), {.name = "dense/bias"}};
  save(path, {saved, other}, 1);
  const auto before = values_of({first, other, second});
  message = exact_error_of<value_error>([&] { restore(path, {first, other, second}); });
  CHECK(contains(message, "'dense/bias'"));
  check_unchanged({first, other, second}, before);
}

// -- failures of restore ------------------------------------------------------------

TEST_CASE("restore of a variable missing from the file is a value_error; nothing changes") {
  sample_checkpoint sample;
  variable d{tensor::scalar<float>(5), {.name = "d"}};
  const std::vector<variable> variables{sample.a, sample.b, sample.c, d};
  const auto before = values_of(variables);
  const auto message = exact_error_of<value_error>([&] { restore(sample.path, variables); });
  CHECK(contains(message, sample.path.string()));
  CHECK(contains(message, "'d'"));
  CHECK(contains(message, "no tensor"));
  check_unchanged(variables, before);
}

TEST_CASE("restore with a dtype that differs from the file's is a dtype_error; nothing changes") {
  sample_checkpoint sample;
  variable c32{tensor::scalar<std::int32_t>(-8), {.name = "c"}};
  const std::vector<variable> variables{sample.a, sample.b, c32};
  const auto before = values_of(variables);
  const auto message = exact_error_of<dtype_error>([&] { restore(sample.path, variables); });
  CHECK(contains(message, sample.path.string()));
  CHECK(contains(message, "'c'"));
  CHECK(contains(message, "int32"));
  CHECK(contains(message, "int64"));
  check_unchanged(variables, before);

  // float64 where the file has float32, first in the list.
  variable a64{tensor::from<double>({0, 0, 0}), {.name = "a"}};
  const std::vector<variable> more{a64, sample.b, sample.c};
  const auto more_before = values_of(more);
  const auto other = exact_error_of<dtype_error>([&] { restore(sample.path, more); });
  CHECK(contains(other, "'a'"));
  CHECK(contains(other, "float64"));
  CHECK(contains(other, "float32"));
  check_unchanged(more, more_before);
}

TEST_CASE("restore with a shape that differs from the file's is a shape_error; nothing changes") {
  sample_checkpoint sample;
  // As many elements as the file's [2, 2], in another shape.
  variable b4{tensor::from<double>({0, 0, 0, 0}), {.name = "b"}};
  const std::vector<variable> variables{sample.a, sample.c, b4};
  const auto before = values_of(variables);
  auto message = exact_error_of<shape_error>([&] { restore(sample.path, variables); });
  CHECK(contains(message, sample.path.string()));
  CHECK(contains(message, "'b'"));
  CHECK(contains(message, "[4]"));
  CHECK(contains(message, "[2, 2]"));
  check_unchanged(variables, before);

  // A vector of one where the file has a scalar.
  variable c1{tensor::from<std::int64_t>({0}), {.name = "c"}};
  const std::vector<variable> more{sample.a, sample.b, c1};
  const auto more_before = values_of(more);
  message = exact_error_of<shape_error>([&] { restore(sample.path, more); });
  CHECK(contains(message, "'c'"));
  CHECK(contains(message, "[1]"));
  CHECK(contains(message, "[]"));
  check_unchanged(more, more_before);
}

TEST_CASE("restore of a truncated file is a data_loss_error at every length; nothing changes") {
  sample_checkpoint sample;
  const auto variables = sample.all();
  const auto before = values_of(variables);
  const auto truncated = sample.path.parent_path() / "truncated.safetensors";
  for (std::size_t length = 0; length < sample.bytes.size(); ++length) {
    CAPTURE(length);
    write_file(truncated, sample.bytes.substr(0, length));
    const auto message = exact_error_of<data_loss_error>([&] { restore(truncated, variables); });
    CHECK(contains(message, truncated.string()));
    CHECK(contains(message, "truncated"));
    check_unchanged(variables, before);
    CHECK_THROWS_AS(read_checkpoint_info(truncated), data_loss_error);
  }
  // The whole file restores.
  restore(sample.path, variables);
  CHECK(sample.a.value() == tensor::from<float>({1, 2, 3}));
}

TEST_CASE("restore of a file with a flipped data byte is a data_loss_error naming the tensor") {
  sample_checkpoint sample;
  const auto variables = sample.all();
  const auto before = values_of(variables);
  const auto file = parse_by_hand(sample.bytes);
  const auto data_start = 8 + file.header_length;
  const auto corrupt = sample.path.parent_path() / "corrupt.safetensors";
  // Every byte of every tensor's data, one at a time.
  for (const std::string name : {"a", "b", "c"}) {
    const auto offsets = file.header[name]["data_offsets"].get<std::vector<std::uint64_t>>();
    for (auto at = offsets[0]; at < offsets[1]; ++at) {
      CAPTURE(name);
      CAPTURE(at);
      auto bytes = sample.bytes;
      bytes[data_start + at] = static_cast<char>(bytes[data_start + at] ^ 0x10);
      write_file(corrupt, bytes);
      const auto message = exact_error_of<data_loss_error>([&] { restore(corrupt, variables); });
      CHECK(contains(message, corrupt.string()));
      CHECK(contains(message, "\"" + name + "\""));
      CHECK(contains(message, "crc32"));
      check_unchanged(variables, before);
    }
  }
}

TEST_CASE("restore of a file with a corrupted header is a data_loss_error; nothing changes") {
  sample_checkpoint sample;
  const auto variables = sample.all();
  const auto before = values_of(variables);
  const auto file = parse_by_hand(sample.bytes);
  const auto header_end = 8 + file.header_length;
  const auto body = sample.bytes.substr(8);
  const auto corrupt = sample.path.parent_path() / "corrupt.safetensors";

  std::map<std::string, std::string> corruptions;
  {
    auto bytes = sample.bytes;
    bytes[8] = 'x'; // the opening brace
    corruptions["not JSON"] = bytes;
  }
  {
    auto bytes = sample.bytes;
    const auto brace = bytes.rfind('}', header_end - 1);
    REQUIRE(brace != std::string::npos);
    bytes[brace] = ' ';
    corruptions["unterminated object"] = bytes;
  }
  {
    auto bytes = sample.bytes;
    bytes[header_end - 1] = '\0'; // a padding space
    corruptions["NUL in the header"] = bytes;
  }
  corruptions["header length into the data"] = little_endian_u64(file.header_length + 8) + body;
  corruptions["header length zero"] = little_endian_u64(0) + body;
  corruptions["huge header length"] = little_endian_u64(std::uint64_t{1} << 62) + body;
  {
    auto bytes = sample.bytes;
    const auto key = bytes.find("\"shape\"");
    REQUIRE(key != std::string::npos);
    bytes.replace(key, 7, "\"shapf\""); // an entry without a shape
    corruptions["entry without shape"] = bytes;
  }
  {
    auto bytes = sample.bytes;
    const auto crc = bytes.find("lockstep.crc32.a\":\"");
    REQUIRE(crc != std::string::npos);
    auto& digit = bytes[crc + 19];
    digit = digit == '0' ? '1' : '0';
    corruptions["wrong checksum"] = bytes;
  }

  for (const auto& [what, bytes] : corruptions) {
    CAPTURE(what);
    write_file(corrupt, bytes);
    const auto message = exact_error_of<data_loss_error>([&] { restore(corrupt, variables); });
    CHECK(contains(message, corrupt.string()));
    check_unchanged(variables, before);
    CHECK_THROWS_AS(read_checkpoint_info(corrupt), data_loss_error);
  }
}

TEST_CASE("restore of a step that is not an integer is a data_loss_error; nothing changes") {
  sample_checkpoint sample;
  const auto variables = sample.all();
  const auto before = values_of(variables);
  const auto path = sample.path.parent_path() / "bad_step.safetensors";
  for (const std::string step : {"12abc", "", "1.5", "99999999999999999999"}) {
    CAPTURE(step);
    write_file(path, detail::encode_safetensors({{"a", tensor::from<float>({1, 2, 3})},
                                                 {"b", tensor::from<double>({4, 5, 6, 7}, {2, 2})},
                                                 {"c", tensor::scalar<std::int64_t>(8)}},
                                                {{"step", step}}));
    auto message = exact_error_of<data_loss_error>([&] { restore(path, variables); });
    CHECK(contains(message, path.string()));
    CHECK(contains(message, "step"));
    check_unchanged(variables, before);
    message = exact_error_of<data_loss_error>([&] { read_checkpoint_info(path); });
    CHECK(contains(message, "step"));
  }
}

TEST_CASE("restore of a file that does not exist is an io_error; nothing changes") {
  sample_checkpoint sample;
  const auto variables = sample.all();
  const auto before = values_of(variables);
  const auto missing = sample.path.parent_path() / "missing.safetensors";
  auto message = exact_error_of<io_error>([&] { restore(missing, variables); });
  CHECK(contains(message, missing.string()));
  check_unchanged(variables, before);
  message = exact_error_of<io_error>([&] { read_checkpoint_info(missing); });
  CHECK(contains(message, missing.string()));
}

TEST_CASE("save into a directory that does not exist is an io_error") {
  temporary_directory dir{directory_prefix};
  variable w{tensor::scalar<float>(1), {.name = "w"}};
  const auto path = dir.path() / "no" / "such" / "model.safetensors";
  CHECK(contains(exact_error_of<io_error>([&] { save(path, {w}, 1); }), "no"));
  CHECK_FALSE(fs::exists(path));
}

// -- crash safety -------------------------------------------------------------------

TEST_CASE("a save killed at any stage leaves the previous checkpoint; the manager cleans up") {
  temporary_directory dir{directory_prefix};
  hook_guard guard;
  const auto path = dir.path() / "ckpt-1.safetensors";
  variable w{tensor::from<float>({1, 1, 1}), {.name = "w"}};
  variable v{tensor::from<double>({1, 1}, {1, 2}), {.name = "v"}};
  save(path, {w, v}, 1);
  const auto checkpoint_a = read_file(path);

  variable w2{tensor::from<float>({2, 2, 2}), {.name = "w"}};
  variable v2{tensor::from<double>({2, 2}, {1, 2}), {.name = "v"}};
  std::size_t killed = 0;
  for (auto stage : {detail::atomic_write_stage::partial_write,
                     detail::atomic_write_stage::before_rename}) {
    CAPTURE(static_cast<int>(stage));
    const auto status = run_in_child_killed_at(stage, [&] { save(path, {w2, v2}, 2); }).status;
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    ++killed;

    CHECK(read_file(path) == checkpoint_a);
    variable rw{tensor::zeros(dtype::f32, {3}), {.name = "w"}};
    variable rv{tensor::zeros(dtype::f64, {1, 2}), {.name = "v"}};
    const auto info = restore(path, {rw, rv});
    CHECK(info.step == 1);
    CHECK(rw.value() == tensor::from<float>({1, 1, 1}));
    CHECK(rv.value() == tensor::from<double>({1, 1}, {1, 2}));
    // The dead writer's temporary is left behind, one per kill.
    CHECK(temporaries_in(dir.path()).size() == killed);
  }

  variable other{tensor::scalar<float>(0), {.name = "other"}};
  write_file(dir.path() / "notes.txt", "kept");
  checkpoint_manager manager{dir.path(), 3};
  CHECK(temporaries_in(dir.path()).empty());
  CHECK(read_file(path) == checkpoint_a);
  CHECK(read_file(dir.path() / "notes.txt") == "kept");
  CHECK(manager.checkpoints() == std::vector<fs::path>{path});
}

TEST_CASE("a save whose write fails leaves the previous checkpoint and no temporary") {
  temporary_directory dir{directory_prefix};
  hook_guard guard;
  const auto path = dir.path() / "model.safetensors";
  variable w{tensor::from<float>({1, 1}), {.name = "w"}};
  save(path, {w}, 1);
  const auto before = read_file(path);
  w.assign(tensor::from<float>({2, 2}));
  for (auto failing : {detail::atomic_write_stage::partial_write,
                       detail::atomic_write_stage::before_rename}) {
    CAPTURE(static_cast<int>(failing));
    detail::set_atomic_write_hook([failing](detail::atomic_write_stage stage) {
      if (stage == failing)
        throw io_error("injected");
    });
    CHECK(exact_error_of<io_error>([&] { save(path, {w}, 2); }) == "injected");
    CHECK(read_file(path) == before);
    CHECK(temporaries_in(dir.path()).empty());
  }
}

// -- checkpoint_manager ---------------------------------------------------------------

TEST_CASE("checkpoint_manager names files by step and orders them numerically") {
  temporary_directory dir{directory_prefix};
  const auto ckpt = dir.path() / "ckpts"; // created by the manager
  checkpoint_manager manager{ckpt, 10};
  CHECK(manager.directory() == ckpt);
  CHECK(fs::is_directory(ckpt));
  CHECK(manager.checkpoints().empty());
  CHECK_FALSE(manager.latest().has_value());

  variable w{tensor::scalar<float>(0), {.name = "w"}};
  for (std::int64_t step : {9, 10, 2, 100, 0}) {
    w.assign(tensor::scalar<float>(static_cast<float>(step)));
    const auto written = manager.save({w}, step);
    REQUIRE(written.has_value());
    CHECK(*written == ckpt / ("ckpt-" + std::to_string(step) + ".safetensors"));
    CHECK(fs::exists(*written));
  }
  CHECK(file_names(manager.checkpoints())
        == std::vector<std::string>{"ckpt-0.safetensors", "ckpt-2.safetensors",
                                    "ckpt-9.safetensors", "ckpt-10.safetensors",
                                    "ckpt-100.safetensors"});
  REQUIRE(manager.latest().has_value());
  CHECK(*manager.latest() == ckpt / "ckpt-100.safetensors");
  CHECK(read_checkpoint_info(ckpt / "ckpt-10.safetensors").step == 10);

  // A second manager on the same directory sees the same checkpoints.
  checkpoint_manager again{ckpt, 10};
  CHECK(again.checkpoints() == manager.checkpoints());
}

TEST_CASE("checkpoint_manager keeps the newest max_to_keep checkpoints") {
  temporary_directory dir{directory_prefix};
  checkpoint_manager manager{dir.path(), 2};
  variable w{tensor::scalar<std::int32_t>(0), {.name = "w"}};
  for (std::int64_t step = 1; step <= 5; ++step) {
    w.assign(tensor::scalar<std::int32_t>(static_cast<std::int32_t>(step * 11)));
    manager.save({w}, step);
  }
  CHECK(file_names(manager.checkpoints())
        == std::vector<std::string>{"ckpt-4.safetensors", "ckpt-5.safetensors"});
  for (int step = 1; step <= 3; ++step)
    CHECK_FALSE(fs::exists(dir.path() / ("ckpt-" + std::to_string(step) + ".safetensors")));

  // Across a step that gains a digit, the oldest is still the smallest step.
  checkpoint_manager one{dir.path() / "one", 1};
  one.save({w}, 9);
  one.save({w}, 10);
  CHECK(file_names(one.checkpoints()) == std::vector<std::string>{"ckpt-10.safetensors"});

  // A rerun from an earlier step keeps what it just saved, as TF keeps its
  // latest save; the larger, older step goes.
  const auto rerun = one.save({w}, 5);
  REQUIRE(rerun.has_value());
  CHECK(fs::exists(*rerun));
  CHECK(file_names(one.checkpoints()) == std::vector<std::string>{"ckpt-5.safetensors"});
  CHECK(one.latest() == rerun);
}

TEST_CASE("checkpoint_manager saving the same step twice replaces the checkpoint") {
  temporary_directory dir{directory_prefix};
  checkpoint_manager manager{dir.path(), 3};
  variable w{tensor::from<float>({1, 2}), {.name = "w"}};
  manager.save({w}, 5);
  w.assign(tensor::from<float>({3, 4}));
  manager.save({w}, 5);
  REQUIRE(manager.checkpoints().size() == 1);

  variable target{tensor::zeros(dtype::f32, {2}), {.name = "w"}};
  const auto info = manager.restore_latest({target});
  REQUIRE(info.has_value());
  CHECK(info->step == 5);
  CHECK(target.value() == tensor::from<float>({3, 4}));
  CHECK(temporaries_in(dir.path()).empty());
}

TEST_CASE("checkpoint_manager restore_latest restores the newest checkpoint") {
  temporary_directory dir{directory_prefix};
  checkpoint_manager manager{dir.path(), 5};
  variable w{tensor::from<double>({0, 0}), {.name = "w"}};
  variable b{tensor::scalar<std::int64_t>(0), {.name = "b"}};
  for (std::int64_t step : {10, 30, 20}) {
    w.assign(tensor::from<double>({static_cast<double>(step), -static_cast<double>(step)}));
    b.assign(tensor::scalar<std::int64_t>(step * 1000));
    manager.save({w, b}, step);
  }
  variable w2{tensor::from<double>({-1, -1}), {.name = "w"}};
  variable b2{tensor::scalar<std::int64_t>(-1), {.name = "b"}};
  const auto info = manager.restore_latest({w2, b2});
  REQUIRE(info.has_value());
  CHECK(info->step == 30);
  CHECK(info->metadata.at("step") == "30");
  CHECK(info->metadata.at("format") == "lockstep-checkpoint-1");
  CHECK(w2.value() == tensor::from<double>({30, -30}));
  CHECK(b2.value() == tensor::scalar<std::int64_t>(30000));
}

TEST_CASE("checkpoint_manager restore_latest on an empty directory changes nothing") {
  temporary_directory dir{directory_prefix};
  checkpoint_manager manager{dir.path(), 1};
  variable w{tensor::from<float>({7, 8}), {.name = "w"}};
  CHECK_FALSE(manager.restore_latest({w}).has_value());
  // A file that is not a checkpoint does not count.
  write_file(dir.path() / "ckpt-x.safetensors", "not a checkpoint");
  CHECK_FALSE(manager.restore_latest({w}).has_value());
  CHECK(w.value() == tensor::from<float>({7, 8}));
  CHECK_FALSE(manager.latest().has_value());
}

TEST_CASE("checkpoint_manager rejects max_to_keep 0 and negative steps") {
  temporary_directory dir{directory_prefix};
  const auto message = exact_error_of<value_error>([&] { checkpoint_manager(dir.path(), 0); });
  CHECK(contains(message, "max_to_keep"));

  checkpoint_manager manager{dir.path(), 2};
  variable w{tensor::scalar<float>(1), {.name = "w"}};
  for (std::int64_t step : {std::int64_t{-1}, std::numeric_limits<std::int64_t>::min()}) {
    CAPTURE(step);
    const auto negative = exact_error_of<value_error>([&] { manager.save({w}, step); });
    CHECK(contains(negative, std::to_string(step)));
  }
  CHECK(fs::is_empty(dir.path()));
}

TEST_CASE("checkpoint_manager saves optimizer slots with the model") {
  temporary_directory dir{directory_prefix};
  one_device_strategy s{"/cpu:0"};
  auto scope = s.scope();
  checkpoint_manager manager{dir.path(), 2, s};
  // A model variable and its momentum slot, colocated as optimizers do.
  variable kernel{tensor::from<float>({0.5f, -1.5f, 2.5f, 3}, {2, 2}), {.name = "dense/kernel"}};
  auto make_slot = [&](const std::string& name) {
    auto colocated = s.extended().colocate_vars_with(kernel);
    return variable{tensor::zeros(dtype::f32, {2, 2}), {.name = name, .trainable = false}};
  };
  auto momentum = make_slot("dense/kernel/momentum");
  momentum.assign(tensor::from<float>({0.25f, 0.125f, -0.0f, 1e-30f}, {2, 2}));
  variable iterations{tensor::scalar<std::int64_t>(17), {.name = "optimizer/iterations"}};
  const auto written = manager.save({kernel, momentum, iterations}, 17);
  REQUIRE(written.has_value());

  variable kernel2{tensor::zeros(dtype::f32, {2, 2}), {.name = "dense/kernel"}};
  auto momentum2 = make_slot("dense/kernel/momentum");
  variable iterations2{tensor::scalar<std::int64_t>(0), {.name = "optimizer/iterations"}};
  const auto info = manager.restore_latest({kernel2, momentum2, iterations2});
  REQUIRE(info.has_value());
  CHECK(info->step == 17);
  CHECK(identical(kernel2.value(), kernel.value()));
  CHECK(identical(momentum2.value(), momentum.value()));
  CHECK(iterations2.value() == tensor::scalar<std::int64_t>(17));
  CHECK_FALSE(momentum2.trainable());
}

TEST_CASE("checkpoint_manager leaves files that are not its checkpoints alone") {
  temporary_directory dir{directory_prefix};
  const std::vector<std::string> others{
    "notes.txt",           "ckpt-abc.safetensors", "ckpt-5.safetensors.bak",
    "ckpt-7.json",         "model-3.safetensors",  "ckpt--1.safetensors",
    "ckpt-1.safetensorsx", "xckpt-2.safetensors",  "ckpt-99999999999999999999.safetensors",
    "ckpt-.safetensors"};
  for (const auto& name : others)
    write_file(dir.path() / name, "other: " + name);

  checkpoint_manager manager{dir.path(), 1};
  variable w{tensor::scalar<float>(1), {.name = "w"}};
  for (std::int64_t step = 1; step <= 3; ++step)
    manager.save({w}, step);
  CHECK(file_names(manager.checkpoints()) == std::vector<std::string>{"ckpt-3.safetensors"});
  for (const auto& name : others) {
    CAPTURE(name);
    REQUIRE(fs::exists(dir.path() / name));
    CHECK(read_file(dir.path() / name) == "other: " + name);
  }
}
