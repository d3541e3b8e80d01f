#include "transport/shm/shared_segment.hpp"

#include "io/file_descriptor.hpp"
#include "lockstep/error.hpp"
#include "runtime/random_bytes.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace lockstep::detail {

namespace {

std::string system_error_text(int error) {
  return std::strerror(error);
}

std::byte* map(int fd, std::size_t bytes) {
  void* at = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return at == MAP_FAILED ? nullptr : static_cast<std::byte*>(at);
}

} // namespace

shared_segment::shared_segment(std::string name, std::byte* data, std::size_t size,
                               bool owner) noexcept
  : name_(std::move(name)), data_(data), size_(size), linked_(owner) {}

shared_segment shared_segment::create(const std::string& name, std::size_t bytes) {
  file_descriptor fd{::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  if (fd.get() == -1)
    throw io_error("shared memory '" + name + "': cannot create it: "
                   + system_error_text(errno));
  // posix_fallocate reserves the pages now: a /dev/shm too small fails
  // here, not with SIGBUS at the first write.
  const int reserved = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes));
  std::byte* data = reserved == 0 ? map(fd.get(), bytes) : nullptr;
  if (data == nullptr) {
    const int error = reserved != 0 ? reserved : errno;
    ::shm_unlink(name.c_str());
    const auto text = "shared memory '" + name + "': cannot reserve " + std::to_string(bytes)
                      + " bytes: " + system_error_text(error);
    if (error == ENOSPC || error == ENOMEM)
      throw resource_error(text);
    throw io_error(text);
  }
  return shared_segment{name, data, bytes, true};
}

std::optional<shared_segment> shared_segment::open(const std::string& name, std::size_t bytes) {
  file_descriptor fd{::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0)};
  struct stat status {};
  if (fd.get() == -1 || ::fstat(fd.get(), &status) != 0
      || static_cast<std::size_t>(status.st_size) != bytes)
    return std::nullopt;
  std::byte* data = map(fd.get(), bytes);
  if (data == nullptr)
    return std::nullopt;
  return shared_segment{name, data, bytes, false};
}

shared_segment::shared_segment(shared_segment&& other) noexcept
  : name_(std::move(other.name_)),
    data_(std::exchange(other.data_, nullptr)),
    size_(std::exchange(other.size_, 0)),
    linked_(std::exchange(other.linked_, false)) {}

shared_segment& shared_segment::operator=(shared_segment&& other) noexcept {
  if (this != &other) {
    this->~shared_segment();
    new (this) shared_segment(std::move(other));
  }
  return *this;
}

shared_segment::~shared_segment() {
  unlink();
  if (data_ != nullptr)
    ::munmap(data_, size_);
}

void shared_segment::unlink() noexcept {
  if (linked_)
    ::shm_unlink(name_.c_str());
  linked_ = false;
}

void remove_segment_name(const std::string& name) noexcept {
  ::shm_unlink(name.c_str());
}

std::string new_segment_name(const std::string& prefix) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string name = "/lockstep-" + prefix + "-";
  for (const auto b : random_bytes(8)) {
    name += digits[b >> 4];
    name += digits[b & 15];
  }
  return name;
}

} // namespace lockstep::detail
