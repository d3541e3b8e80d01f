// Error text from user and file input: bytes that are not valid UTF-8 are
// escaped, and long lists (devices, dimensions) are cut.

#include "runtime/error_text.hpp"

#include "lockstep/device_spec.hpp"
#include "lockstep/error.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/text.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace lockstep;
using detail::joined_list;

TEST_CASE("valid UTF-8 comes back unchanged") {
  CHECK(escape_invalid_utf8("") == "");
  CHECK(escape_invalid_utf8("plain /cpu:0") == "plain /cpu:0");
  CHECK(escape_invalid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(escape_invalid_utf8("back\\slash") == "back\\slash");
}

TEST_CASE("bytes that are not UTF-8 become \\xNN, and the valid bytes around them stay") {
  CHECK(escape_invalid_utf8("a\xff" "b") == "a\\xffb");
  CHECK(escape_invalid_utf8("\x80") == "\\x80");                   // stray continuation byte
  CHECK(escape_invalid_utf8("\xc3") == "\\xc3");                   // truncated sequence
  CHECK(escape_invalid_utf8("\xc3(") == "\\xc3(");                 // bad continuation
  CHECK(escape_invalid_utf8("\xc0\xaf") == "\\xc0\\xaf");          // overlong '/'
  CHECK(escape_invalid_utf8("\xed\xa0\x80") == "\\xed\\xa0\\x80"); // a surrogate
  CHECK(escape_invalid_utf8("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80"); // above U+10FFFF
  CHECK(escape_invalid_utf8(std::string("a\0b", 3)) == std::string("a\0b", 3));
}

TEST_CASE("joined_list shows the first items, then how many more") {
  CHECK(joined_list({}) == "");
  CHECK(joined_list({"a"}) == "a");
  CHECK(joined_list({"a", "b", "c"}, 2) == "a, b, c"); // never "and 1 more"
  CHECK(joined_list({"a", "b", "c", "d"}, 2) == "a, b, ... and 2 more");
  CHECK(joined_list({"a", "b", "c"}, 2, 5000) == "a, b, ... and 4998 more"); // only the first made
  std::vector<std::string> many(4095, "x");
  const auto text = joined_list(many);
  CHECK(text.size() < 100);
  CHECK(text.ends_with(", ... and 4087 more"));
}

TEST_CASE("a shape with thousands of dimensions prints as one short line") {
  CHECK(shape_to_string({2, 3}) == "[2, 3]");
  CHECK(shape_to_string({}) == "[]");
  const auto text = shape_to_string(shape_t(5000, 1));
  CHECK(text.size() < 120);
  CHECK(text.ends_with("... and 4984 more]"));
}

TEST_CASE("every lockstep error's message is valid UTF-8") {
  CHECK(std::string(io_error("cannot open \"/tmp/a\xff\xfe\"").what())
        == "cannot open \"/tmp/a\\xff\\xfe\"");
  CHECK(std::string(data_loss_error(std::string("caf\xc3\xa9\xc3")).what())
        == "caf\xc3\xa9\\xc3");
  CHECK(std::string(resource_error("plain").what()) == "plain");
}

TEST_CASE("a malformed device string's error escapes bytes that are not UTF-8") {
  try {
    (void) device_spec::parse("/job:w\xff" "rk/task:x");
    FAIL("parsed");
  } catch (const value_error& e) {
    const std::string what = e.what();
    CHECK(what.find("\\xff") != std::string::npos);
    CHECK(escape_invalid_utf8(what) == what); // the whole message is valid UTF-8
  }
}
