#pragma once

// The task this process's devices belong to (TF's host device name
// /job:<job>/replica:0/task:<task>): "localhost" task 0 in one process, as
// in TF; a multi-worker strategy names it after its place in the cluster
// (/job:worker/replica:0/task:k, the chief /job:chief/replica:0/task:0), as
// TF does once a cluster is configured. device_spec reads it: canonical()
// fills an unset job (and task) with it and resolves "localhost" to it, and
// is_local() counts its devices as local.

#include <string>

namespace lockstep::detail {

/// A job name and a task index.
struct task_name {
  std::string job;
  int task = 0;

  friend bool operator==(const task_name&, const task_name&) = default;
};

/// The task of this process's devices; "localhost" task 0 until
/// set_local_task. The reference stays valid for the process's life (every
/// name set is kept), so its address tells one setting from another.
const task_name& local_task() noexcept;

/// Names this process's devices after `name` from now on, for every thread
/// (canonical() of specs already made keeps their names). Throws
/// value_error for a job name that is not a letter followed by letters,
/// digits or '_', or a negative task.
void set_local_task(const task_name& name);

} // namespace lockstep::detail
