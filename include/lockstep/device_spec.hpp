#pragma once

#include <compare>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {

/// A (possibly partial) TF device name such as
/// `/job:worker/replica:0/task:1/device:GPU:0` (TF's tf.DeviceSpec).
/// Every field may be unset; `canonical()` fills the unset ones in.
class device_spec {
public:
  // -- construction -----------------------------------------------------------

  /// A spec with every field unset (the device string "").
  device_spec() = default;

  /// Parses a TF device string, following TF's DeviceSpec.from_string:
  /// components separated by '/', each one of `job:<name>`,
  /// `replica:<int>`, `task:<int>`, `device:<type>:<index or *>` or the
  /// short `<type>[:<index or *>]` for the types CPU, GPU and TPU (any
  /// case). Device types are upper-cased ("gpu" gives "GPU"); empty
  /// components are skipped, so "" and "/job:localhost" are valid.
  /// Throws value_error, quoting `text`, for an unknown attribute, a
  /// malformed job name or type, an index that is not a non-negative
  /// integer, or an attribute given twice.
  static device_spec parse(std::string_view text);

  /// Same as `parse(text)`; implicit so APIs accept device strings.
  device_spec(const char* text);

  /// Same as `parse(text)`; implicit so APIs accept device strings.
  device_spec(const std::string& text);

  // -- fields -----------------------------------------------------------------

  /// The job name ("worker", "localhost"), if set.
  const std::optional<std::string>& job() const { return job_; }

  /// The replica number, if set.
  std::optional<int> replica() const { return replica_; }

  /// The task number, if set.
  std::optional<int> task() const { return task_; }

  /// The upper-case device type ("CPU", "GPU"), if set.
  const std::optional<std::string>& device_type() const { return device_type_; }

  /// The device index, if set (unset for "*" or a bare type such as "/GPU").
  std::optional<int> device_index() const { return device_index_; }

  // -- derived forms ----------------------------------------------------------

  /// TF's canonicalize: an unset job (and task) or "localhost" becomes this process's task
  /// (/job:localhost/replica:0/task:0; in a multi-worker strategy /job:worker/replica:0/task:k),
  /// replica 0, type "CPU", index 0: "", "/cpu:0", "/CPU:0" give its .../device:CPU:0.
  device_spec canonical() const;

  /// The set fields in TF's order, e.g. "/job:x/replica:0/task:1/device:GPU:0";
  /// an unset index prints as "*" ("/device:GPU:*"); "" when nothing is set.
  std::string to_string() const;

  /// True for this process's devices: job unset, "localhost", or this process's task.
  bool is_local() const;

  /// True when the device type is GPU.
  bool is_gpu() const;

  /// True when the device type is CPU or unset (canonical() resolves an
  /// unset type to CPU).
  bool is_cpu() const;

  /// Field-wise comparison: equal specs name the same fields with the same
  /// values ("/cpu:0" equals "/device:CPU:0" but not its canonical form).
  friend bool operator==(const device_spec&, const device_spec&) = default;

  /// A total order over specs, so they can key a std::map.
  friend std::strong_ordering operator<=>(const device_spec&, const device_spec&) = default;

private:
  std::optional<std::string> job_;
  std::optional<int> replica_;
  std::optional<int> task_;
  std::optional<std::string> device_type_;
  std::optional<int> device_index_;
};

/// Writes `spec.to_string()`.
std::ostream& operator<<(std::ostream& out, const device_spec& spec);

/// This process's virtual CPU device `index`, canonical: in one process
/// /job:localhost/replica:0/task:0/device:CPU:<index>. Throws value_error for
/// a negative index.
device_spec cpu_device(int index);

/// `cpu_device(0)` .. `cpu_device(count - 1)`. Throws value_error for a
/// negative count.
std::vector<device_spec> cpu_devices(int count);

// -- the current device -------------------------------------------------------

/// The canonical device new tensors are placed on in this thread (TF's
/// current device): the innermost live device_scope's, else cpu_device(0).
/// The reference stays valid while that scope lives (and the task's name).
const device_spec& current_device();

/// Sets `current_device()` for this thread until destroyed, then restores
/// the enclosing one. Scopes nest and must be destroyed in reverse order of
/// construction (as automatic variables are). The device is canonicalised;
/// unlike tf.device, it is not merged with the enclosing scope's device.
class device_scope {
public:
  /// Makes `device.canonical()` the current device of this thread.
  explicit device_scope(device_spec device);

  /// Restores the device that was current before this scope.
  ~device_scope();

  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

private:
  device_spec device_;
  const device_spec* enclosing_; // the device current before this scope
};

} // namespace lockstep
