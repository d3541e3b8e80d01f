#include "lockstep/device_spec.hpp"

#include <algorithm>
#include <charconv>
#include <ostream>

#include "devices/local_task.hpp"
#include "lockstep/error.hpp"

namespace lockstep {

namespace {

bool is_ascii_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool is_ascii_alnum_or_underscore(char c) {
  return is_ascii_alpha(c) || (c >= '0' && c <= '9') || c == '_';
}

std::string to_upper(std::string_view text) {
  std::string result(text);
  for (char& c : result)
    if (c >= 'a' && c <= 'z')
      c = static_cast<char>(c - 'a' + 'A');
  return result;
}

// The pieces of `text` between separators; "" gives one empty piece.
std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (;;) {
    auto end = text.find(separator);
    parts.push_back(text.substr(0, end));
    if (end == std::string_view::npos)
      return parts;
    text.remove_prefix(end + 1);
  }
}

// Every parse error quotes the whole device string `text`.
[[noreturn]] void fail(std::string_view text, const std::string& reason) {
  throw value_error("Malformed device string '" + std::string(text) + "': " + reason);
}

// TF's DeviceNameUtils rule: a letter, then letters, digits or '_'.
std::string parse_job_name(std::string_view name, std::string_view text) {
  if (name.empty() || !is_ascii_alpha(name.front())
      || !std::all_of(name.begin(), name.end(), is_ascii_alnum_or_underscore))
    fail(text, "job name '" + std::string(name)
                 + "' must be a letter followed by letters, digits or '_'");
  return std::string(name);
}

std::string parse_device_type(std::string_view type, std::string_view text) {
  if (type.empty() || !std::all_of(type.begin(), type.end(), is_ascii_alnum_or_underscore))
    fail(text, "device type '" + std::string(type) + "' is not a name");
  return to_upper(type);
}

int parse_index(std::string_view digits, std::string_view what, std::string_view text) {
  int value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  // from_chars accepts a leading '-'; indices are digits only.
  if (digits.empty() || digits.front() == '-' || ec != std::errc{}
      || end != digits.data() + digits.size())
    fail(text, std::string(what) + " index '" + std::string(digits)
                 + "' is not a non-negative integer");
  return value;
}

template <class T>
void set_once(std::optional<T>& field, T value, std::string_view what, std::string_view text) {
  if (field)
    fail(text, "the " + std::string(what) + " is given twice");
  field = std::move(value);
}

void expect_parts(const std::vector<std::string_view>& parts, std::size_t count,
                  std::string_view form, std::string_view component, std::string_view text) {
  if (parts.size() != count)
    fail(text, "component '" + std::string(component) + "' is not of the form "
                 + std::string(form));
}

// The types TF accepts without the "device:" prefix ("/gpu:0").
bool is_short_device_type(std::string_view name) {
  auto type = to_upper(name);
  return type == "CPU" || type == "GPU" || type == "TPU";
}

// The device of this thread's innermost device_scope; null outside any.
thread_local const device_spec* innermost_scope_device = nullptr;

} // namespace

// -- device_spec --------------------------------------------------------------

device_spec device_spec::parse(std::string_view text) {
  device_spec result;
  auto set_device = [&](std::string_view type, std::string_view index) {
    if (result.device_type_)
      fail(text, "the device is given twice");
    result.device_type_ = parse_device_type(type, text);
    if (index != "*")
      result.device_index_ = parse_index(index, "device", text);
  };
  for (auto component : split(text, '/')) {
    if (component.empty())
      continue;
    auto parts = split(component, ':');
    auto name = parts[0];
    if (name == "job") {
      expect_parts(parts, 2, "job:<name>", component, text);
      set_once(result.job_, parse_job_name(parts[1], text), "job", text);
    } else if (name == "replica") {
      expect_parts(parts, 2, "replica:<index>", component, text);
      set_once(result.replica_, parse_index(parts[1], "replica", text), "replica", text);
    } else if (name == "task") {
      expect_parts(parts, 2, "task:<index>", component, text);
      set_once(result.task_, parse_index(parts[1], "task", text), "task", text);
    } else if (name == "device") {
      expect_parts(parts, 3, "device:<type>:<index>", component, text);
      set_device(parts[1], parts[2]);
    } else if (is_short_device_type(name) && parts.size() <= 2) {
      set_device(name, parts.size() == 2 ? parts[1] : "*");
    } else {
      throw value_error("Unknown attribute: '" + std::string(name) + "' in '"
                        + std::string(text) + "'");
    }
  }
  return result;
}

device_spec::device_spec(const char* text) : device_spec(parse(text)) {
}

device_spec::device_spec(const std::string& text) : device_spec(parse(text)) {
}

device_spec device_spec::canonical() const {
  // As TF's device_util.canonicalize: the job and task of this process's
  // devices fill in what is unset, and "localhost" (its task 0) is this
  // process.
  const auto& here = detail::local_task();
  const bool localhost = job_ == "localhost" && replica_.value_or(0) == 0 && task_.value_or(0) == 0;
  device_spec result;
  result.job_ = job_ && !localhost ? *job_ : here.job;
  result.replica_ = replica_.value_or(0);
  result.task_ = localhost ? here.task : task_.value_or(here.task);
  result.device_type_ = device_type_.value_or("CPU");
  result.device_index_ = device_index_.value_or(0);
  return result;
}

std::string device_spec::to_string() const {
  std::string result;
  if (job_)
    result += "/job:" + *job_;
  if (replica_)
    result += "/replica:" + std::to_string(*replica_);
  if (task_)
    result += "/task:" + std::to_string(*task_);
  if (device_type_)
    result += "/device:" + *device_type_ + ":"
              + (device_index_ ? std::to_string(*device_index_) : "*");
  return result;
}

bool device_spec::is_local() const {
  if (!job_ || *job_ == "localhost")
    return true;
  const auto& here = detail::local_task();
  return *job_ == here.job && task_ == here.task && replica_.value_or(0) == 0;
}

bool device_spec::is_gpu() const {
  return device_type_ == "GPU";
}

bool device_spec::is_cpu() const {
  return !device_type_ || *device_type_ == "CPU";
}

std::ostream& operator<<(std::ostream& out, const device_spec& spec) {
  return out << spec.to_string();
}

device_spec cpu_device(int index) {
  if (index < 0)
    throw value_error("cpu_device: index " + std::to_string(index) + " is negative");
  return device_spec::parse("/device:CPU:" + std::to_string(index)).canonical();
}

std::vector<device_spec> cpu_devices(int count) {
  if (count < 0)
    throw value_error("cpu_devices: count " + std::to_string(count) + " is negative");
  std::vector<device_spec> result;
  result.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i)
    result.push_back(cpu_device(i));
  return result;
}

// -- the current device -------------------------------------------------------

const device_spec& current_device() {
  if (innermost_scope_device)
    return *innermost_scope_device;
  // cpu_device(0), made again when this process's devices are renamed.
  thread_local const detail::task_name* named_for = nullptr;
  thread_local device_spec default_device;
  const auto* here = &detail::local_task();
  if (named_for != here) {
    default_device = cpu_device(0);
    named_for = here;
  }
  return default_device;
}

device_scope::device_scope(device_spec device)
  : device_(device.canonical()), enclosing_(innermost_scope_device) {
  innermost_scope_device = &device_;
}

device_scope::~device_scope() {
  innermost_scope_device = enclosing_;
}

} // namespace lockstep
