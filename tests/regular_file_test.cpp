// detail::regular_file, through which lockstep reads its input files (IDX
// data, checkpoints): regular files are read by offset with their size
// known first; FIFOs, links to them, devices, sockets and directories are
// refused by type in a child under an alarm, so a blocking open fails the
// test instead of hanging it. No actor system: suite 'unit'.

#include "io/regular_file.hpp"

#include <doctest/doctest.h>

#include "file_support.hpp"
#include "special_files.hpp"
#include "test_support.hpp"

#include <filesystem>
#include <string>
#include <utility>

#include "lockstep/error.hpp"

using lockstep::detail::regular_file;
namespace fs = std::filesystem;

namespace {

/// `count` bytes read at `offset` of `file`, as many as it returned.
std::string read_part(const regular_file& file, std::uint64_t offset, std::size_t count) {
  std::string out(count, '\0');
  out.resize(file.read_at(offset, out.data(), count));
  return out;
}

} // namespace

TEST_CASE("a regular file opens with its size and reads by offset, short only at its end") {
  temporary_directory dir{"regular_file_test"};
  const auto path = dir.path() / "ten";
  write_file(path, "0123456789");
  const auto file = regular_file::open(path);
  CHECK(file.size() == 10);
  CHECK(file.path() == path);
  CHECK(read_part(file, 0, 4) == "0123");
  CHECK(read_part(file, 3, 4) == "3456");
  CHECK(read_part(file, 8, 4) == "89");
  CHECK(read_part(file, 10, 4).empty());
  CHECK(read_part(file, 1000, 4).empty());
  CHECK(file.read_all() == "0123456789");
  // A symbolic link to a regular file is followed.
  const auto link = dir.path() / "link";
  fs::create_symlink(path, link);
  CHECK(regular_file::open(link).read_all() == "0123456789");
  // An empty file is a regular file of size 0.
  write_file(dir.path() / "empty", "");
  const auto empty = regular_file::open(dir.path() / "empty");
  CHECK(empty.size() == 0);
  CHECK(empty.read_all().empty());
}

TEST_CASE("a moved regular_file keeps reading the same file") {
  temporary_directory dir{"regular_file_test"};
  write_file(dir.path() / "a", "first");
  write_file(dir.path() / "b", "second");
  auto a = regular_file::open(dir.path() / "a");
  auto moved = std::move(a);
  CHECK(moved.read_all() == "first");
  auto b = regular_file::open(dir.path() / "b");
  moved = std::move(b);
  CHECK(moved.size() == 6);
  CHECK(moved.path() == dir.path() / "b");
  CHECK(moved.read_all() == "second");
}

TEST_CASE("a file that shrank after it was opened is data loss naming it") {
  temporary_directory dir{"regular_file_test"};
  const auto path = dir.path() / "shrinking";
  write_file(path, std::string(100, 'x'));
  const auto file = regular_file::open(path);
  fs::resize_file(path, 40);
  CHECK(error_of<lockstep::data_loss_error>([&] { file.read_all(); })
        == "\"" + path.string() + "\": the file shrank while it was read (from 100 bytes)");
  CHECK(read_part(file, 0, 100).size() == 40);
}

TEST_CASE("a missing path or a dangling link is an io_error naming the call and the path") {
  temporary_directory dir{"regular_file_test"};
  const auto absent = dir.path() / "absent";
  CHECK(error_of<lockstep::io_error>([&] { regular_file::open(absent); })
        == "stat failed on \"" + absent.string() + "\": No such file or directory");
  const auto dangling = dir.path() / "dangling";
  fs::create_symlink(absent, dangling);
  CHECK(error_of<lockstep::io_error>([&] { regular_file::open(dangling); })
        == "stat failed on \"" + dangling.string() + "\": No such file or directory");
}

TEST_CASE("anything but a regular file is refused by its type, without blocking") {
  // Each open runs in a child under a 5 s alarm: opening a FIFO for
  // reading waits for a writer, and /dev/zero never ends.
  temporary_directory dir{"regular_file_test"};
  const special_files specials{dir.path()};
  for (const auto& special : specials.all()) {
    CAPTURE(special.path.string());
    const auto result = run_in_bounded_child(5, [&] {
      return message_of<lockstep::io_error>([&] { regular_file::open(special.path); });
    });
    INFO("the child " << describe_end(result));
    REQUIRE(exited_with(result, 0));
    CHECK(result.report
          == "\"" + special.path.string() + "\" is " + special.type
               + ", not a regular file; lockstep reads data and checkpoints only from regular "
                 "files");
  }
  CHECK(lockstep::detail::describe_file_type(S_IFBLK) == "a block device");
  CHECK(lockstep::detail::describe_file_type(S_IFREG) == "a regular file");
}
