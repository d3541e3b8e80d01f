#include "output_files.hpp"

#include "printable.hpp"

#include "lockstep/error.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace fashion_mnist {

void check_output_writable(const std::filesystem::path& path, std::string_view what) {
  const auto fail = [&](int error) {
    throw lockstep::io_error("cannot write the " + std::string(what) + " to '"
                             + printable(path.native()) + "': " + std::strerror(error));
  };
  if (path.empty())
    throw lockstep::io_error("the " + std::string(what) + " path is empty");
  // Creating it first tells "absent" from "present" without a race: only
  // a file this call created is removed again.
  constexpr int common = O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  int fd = ::open(path.c_str(), common | O_CREAT | O_EXCL, 0666);
  if (fd >= 0) {
    ::close(fd);
    if (::unlink(path.c_str()) != 0)
      fail(errno);
    return;
  }
  if (errno != EEXIST)
    fail(errno);
  fd = ::open(path.c_str(), common | O_APPEND);
  if (fd < 0)
    fail(errno);
  ::close(fd);
}

} // namespace fashion_mnist
