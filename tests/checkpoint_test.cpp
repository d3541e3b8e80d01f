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
#include "log_capture.hpp"
#include "test_support.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include <nlohmann/json.hpp>


#include "io/atomic_file.hpp"
#include "runtime/log.hpp"
#include "io/safetensors.hpp"
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

// special_values<T>() less NaNs and infinities, which save refuses.
template <class T>
std::vector<T> finite_special_values() {
  auto values = special_values<T>();
  if constexpr (std::is_floating_point_v<T>)
    std::erase_if(values, [](T x) { return !std::isfinite(x); });
  return values;
}

// `count` values cycling through finite_special_values<T>() from `start`.
template <class T>
std::vector<T> cycled(std::size_t count, std::size_t start = 0) {
  const auto special = finite_special_values<T>();
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

// `bytes` with its header replaced by `edit`'s change of it, dumped again
// (compact, padded to a multiple of 8); the data buffer is kept. The header
// checksum stays as it was unless `edit` removes it.
template <class F>
std::string with_header_edited(const std::string& bytes, F&& edit) {
  auto file = parse_by_hand(bytes);
  edit(file.header);
  auto text = file.header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return little_endian_u64(text.size()) + text + file.buffer;
}

// `bytes` (format 2) as lockstep wrote checkpoints before format 2:
// format "lockstep-checkpoint-1", no header checksum.
std::string as_format_1(const std::string& bytes) {
  return with_header_edited(bytes, [](json& header) {
    header["__metadata__"].erase("lockstep.header_crc32");
    header["__metadata__"]["format"] = "lockstep-checkpoint-1";
  });
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
  const auto special = finite_special_values<T>();
  // The originals: a scalar, empty tensors, a vector of every finite
  // special value and a rank-3 tensor.
  const std::vector<tensor> saved{
    tensor::scalar<T>(special[1]),
    tensor::from<T>({}, {0}),
    tensor::from<T>({}, {2, 0, 3}),
    tensor::from<T>(special),
    tensor::from<T>(cycled<T>(24, 3), {2, 3, 4}),
    tensor::scalar<T>(special.back()),
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
  CHECK(info.metadata.at("format") == "lockstep-checkpoint-2");
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
                            std::numeric_limits<std::int64_t>::max()}) {
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
  CHECK(info.metadata.at("format") == "lockstep-checkpoint-2");
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
  const std::vector<float> f32_values{1.5f, -0.0f, std::numeric_limits<float>::denorm_min(),
                                      std::numeric_limits<float>::lowest(), 3, 4};
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
  CHECK(metadata["format"] == "lockstep-checkpoint-2");
  CHECK(metadata["step"] == "1234");
  CHECK(metadata["replicas"] == "1");
  CHECK(metadata["strategy"] == get_strategy().to_string());
  // The header carries its own checksum, and each tensor one.
  REQUIRE(metadata.contains("lockstep.header_crc32"));
  CHECK(metadata["lockstep.header_crc32"].get<std::string>().size() == 8);
  CHECK(metadata.size() == 4 + 1 + expected.size());
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

TEST_CASE("restore of a step that is not a non-negative integer is a data_loss_error") {
  sample_checkpoint sample;
  const auto variables = sample.all();
  const auto before = values_of(variables);
  const auto path = sample.path.parent_path() / "bad_step.safetensors";
  for (const std::string step : {"12abc", "", "1.5", "99999999999999999999", "-4", "-0x1"}) {
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
    const auto status = run_in_child_killed_at(stage, [&] { save(path, {w2, v2}, 1); }).status;
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
  CHECK(info->metadata.at("format") == "lockstep-checkpoint-2");
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

// -- corruption evidence ---------------------------------------------------------------

TEST_CASE("a checkpoint with any byte changed is refused, naming the file and the part") {
  temporary_directory dir{directory_prefix};
  temporary_directory corrupt_dir{directory_prefix};
  // Named by step, so the name check is part of what every read passes.
  const auto original = dir.path() / "ckpt-7.safetensors";
  const auto corrupt = corrupt_dir.path() / "ckpt-7.safetensors";
  variable x{tensor::from<float>({1.5f, -2}), {.name = "x"}};
  variable n{tensor::scalar<std::int64_t>(3), {.name = "n"}};
  save(original, {x, n}, 7);
  const auto bytes = read_file(original);
  const auto file = parse_by_hand(bytes);
  const auto data_start = 8 + file.header_length;
  // What an error about the byte at `at` must name.
  const auto part_of = [&](std::size_t at) -> std::string {
    if (at < 8)
      return "header length";
    if (at < data_start)
      return "header";
    for (const std::string name : {"x", "n"}) {
      const auto offsets = file.header[name]["data_offsets"].get<std::vector<std::uint64_t>>();
      if (at - data_start >= offsets[0] && at - data_start < offsets[1])
        return "tensor \"" + name + "\"";
    }
    FAIL("byte " << at << " belongs to no part");
    return {};
  };

  variable tx{tensor::zeros(dtype::f32, {2}), {.name = "x"}};
  variable tn{tensor::scalar<std::int64_t>(-1), {.name = "n"}};
  const std::vector<variable> targets{tx, tn};
  const auto before = values_of(targets);
  // The unchanged copy reads: the refusals below are the changes' doing.
  write_file(corrupt, bytes);
  CHECK(read_checkpoint_info(corrupt).step == 7);

  std::size_t refused = 0;
  for (unsigned mask : {0x01u, 0x80u}) {
    for (std::size_t at = 0; at < bytes.size(); ++at) {
      CAPTURE(mask);
      CAPTURE(at);
      auto changed = bytes;
      changed[at] = static_cast<char>(static_cast<unsigned char>(changed[at]) ^ mask);
      write_file(corrupt, changed);
      const auto part = part_of(at);
      CAPTURE(part);
      auto message = exact_error_of<data_loss_error>([&] { restore(corrupt, targets); });
      CAPTURE(message);
      CHECK(contains(message, corrupt.string()));
      CHECK(contains(message, part));
      message = exact_error_of<data_loss_error>([&] { read_checkpoint_info(corrupt); });
      CHECK(contains(message, corrupt.string()));
      CHECK(contains(message, part));
      ++refused;
    }
  }
  CHECK(refused == 2 * bytes.size());
  check_unchanged(targets, before);
}

TEST_CASE("format 1 checkpoints are read with a warning that they lack the header checksum") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "ckpt-4.safetensors";
  variable w{tensor::from<double>({0.5, -8}), {.name = "w"}};
  variable b{tensor::scalar<std::int32_t>(6), {.name = "b"}};
  save(path, {w, b}, 4);
  const auto format_2 = read_file(path);
  write_file(path, as_format_1(format_2));

  variable w2{tensor::zeros(dtype::f64, {2}), {.name = "w"}};
  variable b2{tensor::scalar<std::int32_t>(0), {.name = "b"}};
  {
    log_capture log;
    const auto info = restore(path, {w2, b2});
    CHECK(info.step == 4);
    CHECK(info.metadata.at("format") == "lockstep-checkpoint-1");
    CHECK(w2.value() == tensor::from<double>({0.5, -8}));
    CHECK(b2.value() == tensor::scalar<std::int32_t>(6));
    CHECK(contains(log.text(), path.string()));
    CHECK(contains(log.text(), "lockstep-checkpoint-1 checkpoint"));
    CHECK(contains(log.text(), "header (the step, the checksums) has no checksum"));
  }
  {
    log_capture log;
    CHECK(read_checkpoint_info(path).step == 4);
    CHECK(contains(log.text(), "has no checksum"));
  }
  // The checkpoints this lockstep writes do not warn.
  write_file(path, format_2);
  {
    log_capture log;
    restore(path, {w2, b2});
    CHECK(log.text().empty());
  }
}

TEST_CASE("a checkpoint missing a checksum, its format or its step is refused") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "model.safetensors";
  variable w{tensor::from<float>({1, 2}), {.name = "w"}};
  save(path, {w}, 3);
  const auto saved = read_file(path);
  const auto corrupt = dir.path() / "edited.safetensors";
  const auto drop = [](std::string key) {
    return [key](json& header) { header["__metadata__"].erase(key); };
  };
  struct edit_case {
    std::string what;
    std::string bytes;
    std::string message;
  };
  const std::vector<edit_case> cases{
    {"format 2 without the header checksum",
     with_header_edited(saved, drop("lockstep.header_crc32")),
     ": the header has no checksum (\"lockstep.header_crc32\"), which lockstep-checkpoint-2 "
     "requires"},
    // A renamed tensor checksum no longer turns the check off (format 1 has
    // no header checksum to catch the renaming).
    {"format 1 with a tensor checksum renamed",
     with_header_edited(as_format_1(saved),
                        [](json& header) {
                          auto& metadata = header["__metadata__"];
                          metadata["lockstep.crc32.v"] = metadata["lockstep.crc32.w"];
                          metadata.erase("lockstep.crc32.w");
                        }),
     ": \"__metadata__\" holds \"lockstep.crc32.v\", a checksum of a tensor the file does not "
     "hold"},
    {"format 1 without a tensor checksum",
     with_header_edited(as_format_1(saved), drop("lockstep.crc32.w")),
     ": tensor \"w\": the header records no checksum (\"lockstep.crc32.w\") for it, which "
     "lockstep-checkpoint-1 requires"},
    {"format 1 without a step", with_header_edited(as_format_1(saved), drop("step")),
     ": the metadata has no step, which lockstep-checkpoint-1 requires"},
    {"an unknown format",
     with_header_edited(as_format_1(saved),
                        [](json& header) {
                          header["__metadata__"]["format"] = "lockstep-checkpoint-9";
                        }),
     ": the metadata's format \"lockstep-checkpoint-9\" is not one this lockstep reads "
     "(lockstep-checkpoint-2, lockstep-checkpoint-1)"},
  };
  const auto before = values_of({w});
  for (const auto& [what, bytes, message] : cases) {
    CAPTURE(what);
    write_file(corrupt, bytes);
    CHECK(exact_error_of<data_loss_error>([&] { restore(corrupt, {w}); })
          == corrupt.string() + message);
    CHECK(exact_error_of<data_loss_error>([&] { read_checkpoint_info(corrupt); })
          == corrupt.string() + message);
  }
  check_unchanged({w}, before);
}

TEST_CASE("save refuses NaN and infinities, naming the variable and the element") {
  temporary_directory dir{directory_prefix};
  const auto path = dir.path() / "model.safetensors";
  variable fine{tensor::scalar<float>(1), {.name = "fine"}};
  save(path, {fine}, 1);
  const auto before = read_file(path);
  const auto check_refused = [&](const variable& bad, const std::string& value) {
    const auto message = exact_error_of<value_error>([&] { save(path, {fine, bad}, 2); });
    CHECK(contains(message, "variable '" + bad.name() + "' holds " + value + " at element 2"));
    CHECK(read_file(path) == before);
    CHECK(temporaries_in(dir.path()).empty());
  };
  check_refused(variable{tensor::from<float>({1, 2, std::numeric_limits<float>::quiet_NaN()}),
                         {.name = "f32 nan"}},
                "nan");
  check_refused(variable{tensor::from<float>({1, 2, std::numeric_limits<float>::infinity(), 3}),
                         {.name = "f32 inf"}},
                "inf");
  check_refused(variable{tensor::from<double>({0, 0, -std::numeric_limits<double>::infinity()},
                                              {3, 1}),
                         {.name = "f64 -inf"}},
                "-inf");
  check_refused(variable{tensor::from<double>({0, 1, -std::numeric_limits<double>::quiet_NaN()}),
                         {.name = "f64 -nan"}},
                "-nan");
  // Integers have no such values; the extremes save.
  variable ints{tensor::from<std::int32_t>({std::numeric_limits<std::int32_t>::min(), 0}),
                {.name = "ints"}};
  CHECK_NOTHROW(save(path, {fine, ints}, 2));
}

TEST_CASE("save refuses a negative step and a step that contradicts a ckpt-<n> name") {
  temporary_directory dir{directory_prefix};
  variable w{tensor::scalar<float>(1), {.name = "w"}};
  const auto path = dir.path() / "model.safetensors";
  for (std::int64_t step : {std::int64_t{-1}, std::numeric_limits<std::int64_t>::min()}) {
    CAPTURE(step);
    CHECK(exact_error_of<value_error>([&] { save(path, {w}, step); })
          == "save: the step must not be negative, got " + std::to_string(step));
  }
  const auto named = dir.path() / "ckpt-3.safetensors";
  CHECK(exact_error_of<value_error>([&] { save(named, {w}, 4); })
        == "save: \"" + named.string()
             + "\" is named for step 3, not the step 4 being saved");
  CHECK(fs::is_empty(dir.path()));
  save(named, {w}, 3);
  CHECK(read_checkpoint_info(named).step == 3);
}

TEST_CASE("a checkpoint whose step differs from its ckpt-<n> name is refused") {
  temporary_directory dir{directory_prefix};
  variable w{tensor::scalar<float>(1), {.name = "w"}};
  const auto three = dir.path() / "ckpt-3.safetensors";
  save(three, {w}, 3);
  const auto four = dir.path() / "ckpt-4.safetensors";
  fs::copy_file(three, four);
  const auto expected =
    four.string() + ": the metadata's step 3 differs from the step 4 in the file's name";
  CHECK(exact_error_of<data_loss_error>([&] { restore(four, {w}); }) == expected);
  CHECK(exact_error_of<data_loss_error>([&] { read_checkpoint_info(four); }) == expected);
  // Under another name, the same bytes read.
  const auto other = dir.path() / "copy.safetensors";
  fs::copy_file(three, other);
  CHECK(restore(other, {w}).step == 3);

  // "ckpt-007" is no name save gives, so no checkpoint of step 7.
  fs::copy_file(three, dir.path() / "ckpt-007.safetensors");
  checkpoint_manager manager{dir.path(), 5};
  CHECK(manager.latest() == four);
  CHECK(manager.newest_readable() == three);
  const auto message = exact_error_of<data_loss_error>([&] { manager.restore_latest({w}); });
  CHECK(contains(message, "the newest checkpoint \"" + four.string() + "\" is unreadable ("
                            + expected + ")"));
  CHECK(contains(message, "the newest readable checkpoint is \"" + three.string() + "\""));
}

TEST_CASE("restore_latest names the newest readable checkpoint when the newest is unreadable") {
  temporary_directory dir{directory_prefix};
  checkpoint_manager manager{dir.path(), 5};
  variable w{tensor::from<float>({0, 0}), {.name = "w"}};
  for (std::int64_t step = 1; step <= 3; ++step) {
    w.assign(tensor::from<float>({static_cast<float>(step), 0}));
    manager.save({w}, step);
  }
  const auto paths = manager.checkpoints();
  REQUIRE(paths.size() == 3);
  CHECK(manager.newest_readable() == paths[2]);

  variable target{tensor::from<float>({-1, -1}), {.name = "w"}};
  // The newest with its last data byte changed.
  auto newest = read_file(paths[2]);
  newest.back() = static_cast<char>(newest.back() ^ 0x40);
  write_file(paths[2], newest);
  auto message = exact_error_of<data_loss_error>([&] { manager.restore_latest({target}); });
  CHECK(message == "checkpoint_manager: the newest checkpoint \"" + paths[2].string()
                     + "\" is unreadable (" + paths[2].string()
                     + ": tensor \"w\": the crc32 of its data is "
                     + message.substr(message.find("crc32 of its data is ") + 21, 8)
                     + ", but the file records \""
                     + message.substr(message.find("the file records \"") + 18, 8)
                     + "\"); the newest readable checkpoint is \"" + paths[1].string()
                     + "\"; restore it explicitly to resume from there, or remove the "
                       "unreadable one");
  CHECK(target.value() == tensor::from<float>({-1, -1}));
  CHECK(manager.latest() == paths[2]);
  CHECK(manager.newest_readable() == paths[1]);
  // That one restores when asked for.
  CHECK(restore(paths[1], {target}).step == 2);
  CHECK(target.value() == tensor::from<float>({2, 0}));

  // An empty file and a truncated one before it: the oldest is named.
  write_file(paths[1], read_file(paths[1]).substr(0, 20));
  write_file(paths[2], "");
  message = exact_error_of<data_loss_error>([&] { manager.restore_latest({target}); });
  CHECK(contains(message, "fewer than the 8 of the header length (truncated)"));
  CHECK(contains(message, "the newest readable checkpoint is \"" + paths[0].string() + "\""));
  CHECK(manager.newest_readable() == paths[0]);

  // None readable.
  write_file(paths[0], "x");
  message = exact_error_of<data_loss_error>([&] { manager.restore_latest({target}); });
  CHECK(contains(message, "; no checkpoint in \"" + dir.path().string() + "\" is readable"));
  CHECK_FALSE(manager.newest_readable().has_value());
  CHECK(target.value() == tensor::from<float>({2, 0}));
}

TEST_CASE("restore_latest passes a mismatch with the variables through unchanged") {
  temporary_directory dir{directory_prefix};
  checkpoint_manager manager{dir.path(), 2};
  variable w{tensor::from<float>({1, 2}), {.name = "w"}};
  manager.save({w}, 1);
  variable other{tensor::scalar<float>(0), {.name = "other"}};
  CHECK(contains(exact_error_of<value_error>([&] { manager.restore_latest({other}); }),
                 "no tensor for variable 'other'"));
  variable wrong_shape{tensor::zeros(dtype::f32, {3}), {.name = "w"}};
  CHECK_THROWS_AS(manager.restore_latest({wrong_shape}), shape_error);
}
