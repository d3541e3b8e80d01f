#pragma once

// Looking at a running process without stopping it: the flight recorders
// of its strategies' collectives, on demand (docs/timeline.md).

#include <filesystem>

namespace lockstep {

/// Writes the flight recorder of every strategy alive in this process (its
/// last collectives, and who a collective waits for now, if one does) as
/// Chrome trace-event JSON, the timeline's form, to
/// `flight-<pid>-<n>.json` in the folder of runtime_options::timeline (the
/// current directory when there is none), n counting this process's dumps
/// from 0, and returns the file's path. Safe while collectives hang: it
/// takes no lock a waiting collective holds. io_error when the file cannot
/// be written.
std::filesystem::path dump_flight_recorders();

/// Starts the thread that dumps the flight recorders when the process gets
/// runtime_options::dump_signal (none when it is 0), if not yet started:
/// it blocks the signal in the calling thread and waits for it with
/// sigwait(2) on a thread of its own, so no handler of the application's
/// is replaced. The signal must be blocked in every thread, so call this
/// before the program starts threads (the first strategy created calls it,
/// too late for threads started before). Returns whether it watches.
/// Throws resource_error when the thread cannot start (a limit on
/// threads); the signal's mask is then as it was.
bool watch_dump_signal();

} // namespace lockstep
