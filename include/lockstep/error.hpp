#pragma once

#include <stdexcept>
#include <string>

namespace lockstep {

/// Base of every exception lockstep throws. `what()` carries TF's message
/// with C++ names, so a reader can look the condition up in TF's docs.
/// Messages quote paths, names and strings from users and files; bytes in
/// them that are not valid UTF-8 are escaped as `\xNN`, so `what()` is
/// always valid UTF-8 text.
class error : public std::runtime_error {
public:
  explicit error(const std::string& what);
  explicit error(const char* what);
};

/// TF's RuntimeError: an API used in the wrong context (replica vs
/// cross-replica, the wrong strategy's scope, concurrent calls).
class context_error : public error {
public:
  using error::error;
};

/// TF's ValueError and AssertionError: a value that is not acceptable.
class value_error : public error {
public:
  using error::error;
};

/// TF's TypeError: a value of the wrong kind.
class type_error : public error {
public:
  using error::error;
};

/// Shapes that must agree do not; the message names both sides.
class shape_error : public value_error {
public:
  using value_error::value_error;
};

/// Element types that must agree do not; the message names both sides.
class dtype_error : public type_error {
public:
  using type_error::type_error;
};

/// A blocking wait ran out of time; the message names who is missing.
class timeout_error : public error {
public:
  using error::error;
};

/// An operating-system call on a file failed (open, write, fsync, rename);
/// the message names the call, the path and the system's reason.
class io_error : public error {
public:
  using error::error;
};

/// TF's DataLossError: a file is truncated or corrupted; the message names
/// the file, the entry and what is wrong with it.
class data_loss_error : public error {
public:
  using error::error;
};

/// TF's ResourceExhaustedError: the process could not get a resource it
/// needs (threads, memory); the message names what failed and how far the
/// operation had come.
class resource_error : public error {
public:
  using error::error;
};

/// A device cannot do what was asked: the host read a buffer in memory it
/// cannot reach (copy the tensor with `to(device)` first), a device kind has
/// no kernel or copy for an operation, or a device call failed. The message
/// names the device (or device kind) and the operation.
class device_error : public error {
public:
  using error::error;
};

/// A connection between workers did not pass the cluster's authentication:
/// the peer's proof of the shared token was wrong, or the peer refused
/// ours. The message names the peer's address and nothing more.
class authentication_error : public error {
public:
  using error::error;
};

/// A worker of the cluster was lost: its connection closed, or it was
/// silent past the peer timeout. The message names the lost rank(s); the
/// survivors' pending and next collectives raise it.
class peer_lost_error : public error {
public:
  using error::error;
};

/// TF's CancelledError: the program asked a wait to end (cancel_joins()
/// from a Ctrl-C handler stops a join in progress); nothing failed.
class cancelled_error : public error {
public:
  using error::error;
};

/// The exit status a worker process gives for a peer_lost_error
/// (EX_TEMPFAIL): `lockstep-run --max-restarts` restarts the world for it,
/// as for a worker killed by a signal, while other failures end the job.
inline constexpr int peer_lost_exit_status = 75;

} // namespace lockstep
