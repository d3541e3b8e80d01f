#include "collectives/worker_session.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <utility>

namespace lockstep::detail {

worker_session::worker_session(std::string what, std::size_t rank, std::size_t ranks,
                               std::size_t worker, std::string waits_on)
  : what_(std::move(what)),
    rank_(rank),
    ranks_(ranks),
    worker_(worker),
    waits_on_(std::move(waits_on)) {}

void worker_session::check_rank(std::size_t rank) const {
  if (rank != rank_)
    throw value_error(what_ + ": worker " + std::to_string(worker_)
                      + "'s communicator called for rank " + std::to_string(rank));
}

void worker_session::begin(std::uint64_t seq) {
  std::lock_guard lock{mutex_};
  if (seq < cancelled_below_)
    std::rethrow_exception(cancel_reason_);
  last_seq_ = std::max(last_seq_, seq);
  running_ = seq;
}

void worker_session::end(const collective_fingerprint& issued, const char* outcome) {
  std::lock_guard lock{mutex_};
  running_ = 0;
  auto& entry = flight_[flights_++ % flight_.size()];
  entry.issued = issued;
  entry.outcome = outcome;
}

std::uint64_t worker_session::last_begun() const noexcept {
  std::lock_guard lock{mutex_};
  return last_seq_;
}

void worker_session::restart_numbering() noexcept {
  std::lock_guard lock{mutex_};
  last_seq_ = 0;
}

std::uint64_t worker_session::number(std::size_t rank, const collective_options& options,
                                     std::uint64_t first_seq) const {
  return options.seq != 0 ? options.seq : std::max(first_seq, next_seq(rank));
}

std::uint64_t worker_session::next_seq(std::size_t rank) const {
  check_rank(rank);
  std::lock_guard lock{mutex_};
  return last_seq_ + 1;
}

void worker_session::cancel_below(std::uint64_t seq, std::exception_ptr reason) {
  std::lock_guard lock{mutex_};
  if (seq <= cancelled_below_)
    return;
  cancelled_below_ = seq;
  cancel_reason_ = reason ? reason : std::make_exception_ptr(error(what_ + ": collective cancelled"));
}

std::uint64_t worker_session::cancelled_below() const noexcept {
  std::lock_guard lock{mutex_};
  return cancelled_below_;
}

void worker_session::depart(std::size_t, std::uint64_t) {}

bool worker_session::waiting(std::size_t rank, std::uint64_t from_seq) const noexcept {
  std::lock_guard lock{mutex_};
  return rank == rank_ && running_ != 0 && running_ >= from_seq;
}

std::string worker_session::stall_report(std::uint64_t from_seq) const {
  std::lock_guard lock{mutex_};
  if (running_ == 0 || running_ < from_seq)
    return "";
  return "worker " + std::to_string(worker_) + " waits on " + waits_on_ + " in collective #"
         + std::to_string(running_);
}

std::string worker_session::dump() const {
  std::lock_guard lock{mutex_};
  std::string text;
  for (auto i = flights_ - std::min(flights_, flight_.size()); i < flights_; ++i) {
    const auto& entry = flight_[i % flight_.size()];
    text += entry.issued.to_string() + ": " + entry.outcome + "\n";
  }
  return text;
}

} // namespace lockstep::detail
