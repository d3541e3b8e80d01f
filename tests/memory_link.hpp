#pragma once

// An in-memory link (src/transport/link.hpp): the ranks are threads of one
// process, and each ordered pair of ranks has a byte queue, so any rank
// sends to and receives from any rank, with no socket. A send never waits
// (the queues grow); a receive waits on the hub's condition variable until
// its bytes are in, the sender's end is closed, or the deadline passes on
// the link's clock. It proves that the ring's algorithm needs no more than
// the link interface, and lets its tests run without sockets.

#include "transport/link.hpp"

#include "runtime/little_endian.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace lockstep::detail::test {

/// The queues between `size` ranks; each rank's end is a memory_link.
class memory_hub {
public:
  explicit memory_hub(std::size_t size) : size_(size), queues_(size * size), closed_(size) {}

  std::size_t size() const noexcept { return size_; }

  /// Closes `rank`'s end, as a process that dies: the ranks that wait for
  /// its bytes, or send to it, throw link_closed naming it (bytes it sent
  /// before are still received).
  void close(std::size_t rank) {
    {
      std::lock_guard lock{mutex_};
      closed_.at(rank) = true;
    }
    moved_.notify_all();
  }

  /// Appends `out` to the queue from `from` to `to`.
  void push(std::size_t from, std::size_t to, std::span<const std::uint8_t> out) {
    {
      std::lock_guard lock{mutex_};
      if (closed_[to])
        throw link_closed(name(to) + " closed its link");
      auto& queue = queues_[from * size_ + to];
      queue.bytes.insert(queue.bytes.end(), out.begin(), out.end());
    }
    moved_.notify_all();
  }

  /// Fills `in` from the queue from `from` to `to`, waiting until `deadline`.
  void pull(std::size_t from, std::size_t to, std::span<std::uint8_t> in,
            link::time_point deadline) {
    std::unique_lock lock{mutex_};
    auto& queue = queues_[from * size_ + to];
    std::size_t received = 0;
    while (received < in.size()) {
      const auto n = std::min(in.size() - received, queue.bytes.size() - queue.at);
      if (n > 0) {
        std::memcpy(in.data() + received, queue.bytes.data() + queue.at, n);
        received += n;
        queue.at += n;
        if (queue.at == queue.bytes.size()) {
          queue.bytes.clear();
          queue.at = 0;
        }
        continue;
      }
      if (closed_[from])
        throw link_closed(name(from) + " closed its link");
      if (closed_[to])
        throw link_closed(name(to) + "'s own link is closed");
      if (moved_.wait_until(lock, deadline) == std::cv_status::timeout
          && queue.bytes.size() == queue.at && !closed_[from] && !closed_[to])
        throw link_deadline_passed("no data came from " + name(from) + " before the deadline");
    }
  }

private:
  static std::string name(std::size_t rank) { return "rank " + std::to_string(rank); }

  struct queue {
    std::vector<std::uint8_t> bytes;
    std::size_t at = 0; // what is received of `bytes`
  };

  const std::size_t size_;
  std::mutex mutex_;
  std::condition_variable moved_;
  std::vector<queue> queues_; // from * size + to
  std::vector<bool> closed_;  // by rank
};

/// Rank `rank`'s end of a memory_hub. Its clock is the steady clock.
class memory_link final : public link {
public:
  memory_link(memory_hub& hub, std::size_t rank) : hub_(hub), rank_(rank) {}

  std::size_t size() const noexcept override { return hub_.size(); }
  std::size_t rank() const noexcept override { return rank_; }
  time_point now() const override { return std::chrono::steady_clock::now(); }

  void exchange(std::size_t to, std::span<const std::uint8_t> out, std::size_t from,
                std::span<std::uint8_t> in, time_point deadline) override {
    check(to, !out.empty());
    check(from, !in.empty());
    if (!out.empty())
      hub_.push(rank_, to, out);
    if (!in.empty())
      hub_.pull(from, rank_, in, deadline);
  }

  void exchange_frame(std::size_t to, std::span<const std::uint8_t> out, std::size_t from,
                      bytes& in, std::size_t max_bytes, time_point deadline) override {
    check(to, !out.empty());
    check(from, true);
    if (!out.empty())
      hub_.push(rank_, to, out);
    in.resize(8);
    hub_.pull(from, rank_, in, deadline);
    const auto length = load_le<std::uint64_t>(in);
    if (length > max_bytes)
      throw link_closed("rank " + std::to_string(from) + " sent a frame of "
                        + std::to_string(length) + " bytes, more than any rank sends");
    in.resize(8 + length);
    hub_.pull(from, rank_, std::span(in).subspan(8), deadline);
  }

  /// Closes this rank's end (memory_hub::close).
  void close() { hub_.close(rank_); }

private:
  /// value_error for a rank outside the group (no_rank only for a side
  /// that moves nothing).
  void check(std::size_t peer, bool moves) const {
    if (peer == no_rank ? moves : peer >= hub_.size())
      throw value_error("memory_link: rank " + std::to_string(peer) + " is not a rank of "
                        + std::to_string(hub_.size()));
  }

  memory_hub& hub_;
  std::size_t rank_;
};

} // namespace lockstep::detail::test
