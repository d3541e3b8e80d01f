#include "transport/tcp/connect_watch.hpp"

namespace lockstep::detail {

bool wait_watching(pollfd own, io_clock::time_point deadline, ring_watch& watch) {
  std::vector<pollfd> fds{own};
  fds.insert(fds.end(), watch.entries.begin(), watch.entries.end());
  for (;;) {
    for (auto& entry : fds)
      entry.revents = 0;
    if (!poll_until(fds, deadline))
      return false;
    for (std::size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0 && !watch.ready(i - 1))
        fds[i].fd = watch.entries[i - 1].fd = -1; // poll(2) skips it from now on
    if (fds[0].revents != 0)
      return true;
  }
}

} // namespace lockstep::detail
