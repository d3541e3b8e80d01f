#include "collectives/collective_group.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <utility>

#include "lockstep/error.hpp"
#include "spin_wait.hpp"

namespace lockstep::detail {

namespace {

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::string milliseconds(std::chrono::steady_clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms",
                std::chrono::duration<double, std::milli>(d).count());
  return text;
}

std::string list_ranks(const std::vector<std::size_t>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i)
    text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return text;
}

} // namespace

// -- collective_fingerprint ---------------------------------------------------

std::size_t collective_fingerprint::bytes() const {
  std::size_t elements = 1;
  for (auto dim : shape)
    elements *= static_cast<std::size_t>(dim);
  return elements * size_of(dtype);
}

std::string collective_fingerprint::to_string() const {
  std::string text = op + " #" + std::to_string(seq);
  if (!reduction.empty())
    text += " " + reduction;
  text += " " + std::string(lockstep::to_string(dtype)) + " " + shape_to_string(shape);
  if (!tag.empty())
    text += " tag '" + tag + "'";
  return text;
}

// -- collective_group ---------------------------------------------------------

std::string_view collective_group::state_name(slot_state state) {
  switch (state) {
    case slot_state::gathering:
      return "waiting for ranks";
    case slot_state::running:
      return "running";
    case slot_state::completed:
      return "completed";
    case slot_state::mismatch:
      return "mismatch";
    case slot_state::timed_out:
      return "timed out";
  }
  return "invalid";
}

collective_group::collective_group(std::size_t participants, std::string tag)
    : participants_(participants),
      tag_(std::move(tag)),
      spin_budget_(spin_budget(participants)),
      created_(clock::now()),
      last_seq_(participants, 0) {
  if (participants == 0)
    throw value_error("collective_group '" + tag_ + "': needs at least one participant");
}

std::uint64_t collective_group::next_seq(std::size_t rank) const {
  check_rank(rank, "next_seq");
  std::lock_guard lock{mutex_};
  return last_seq_[rank] + 1;
}

void collective_group::check_rank(std::size_t rank, const char* call) const {
  if (rank >= participants_)
    throw value_error("collective_group '" + tag_ + "': " + call + " by rank "
                      + std::to_string(rank) + ", but the group has "
                      + std::to_string(participants_) + " ranks");
}

void collective_group::rethrow_if_aborted() const {
  if (aborted_)
    std::rethrow_exception(aborted_);
}

void collective_group::publish() {
  changes_.fetch_add(1, std::memory_order_release);
  if (sleepers_ > 0)
    changed_.notify_all();
}

template <class Ready>
bool collective_group::wait_until(std::unique_lock<std::mutex>& lock, Ready ready,
                                  clock::time_point deadline) {
  if (ready())
    return true;
  if (spin_budget_.count() > 0) {
    // Poll the change counter without the lock: a rank that arrives a few
    // microseconds later is seen without a sleep and a wake-up.
    const auto seen = changes_.load(std::memory_order_acquire);
    const auto spin_end = std::min(deadline, clock::now() + spin_budget_);
    lock.unlock();
    for (unsigned polls = 0; changes_.load(std::memory_order_acquire) == seen; ++polls) {
      cpu_relax();
      if (polls % 64 == 63 && clock::now() >= spin_end)
        break;
    }
    lock.lock();
    if (ready())
      return true;
  }
  ++sleepers_;
  while (!ready()) {
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      --sleepers_;
      return ready();
    }
  }
  --sleepers_;
  return true;
}

collective_group::record* collective_group::find_record(std::uint64_t seq) {
  for (auto it = records_.rbegin(); it != records_.rend(); ++it)
    if (it->fingerprint.seq == seq)
      return &*it;
  return nullptr;
}

void collective_group::finish(std::uint64_t seq, slot& s, slot_state state) {
  s.state = state;
  if (auto* entry = find_record(seq)) {
    entry->state = state;
    entry->end = clock::now();
  }
  publish();
}

void collective_group::leave(std::uint64_t seq, slot& s) {
  if (++s.left == participants_)
    slots_.erase(seq);
}

std::string collective_group::mismatch_message(const slot& s) const {
  std::string text = "collective mismatch in group '" + tag_ + "': ";
  for (std::size_t rank = 0; rank < participants_; ++rank)
    text += (rank == 0 ? "" : ", ") + ("rank " + std::to_string(rank) + " issued ")
            + s.fingerprints[rank]->to_string();
  return text;
}

std::string collective_group::timeout_message(std::uint64_t seq, const slot& s,
                                              bool barrier) const {
  const collective_fingerprint* issued = nullptr;
  for (const auto& fingerprint : s.fingerprints)
    if (fingerprint && !issued)
      issued = &*fingerprint;
  std::vector<std::size_t> missing;
  for (std::size_t rank = 0; rank < participants_; ++rank)
    if (barrier ? !s.finished[rank] : !s.fingerprints[rank])
      missing.push_back(rank);

  std::string text = "collective timed out in group '" + tag_ + "': " + list_ranks(missing)
                     + (barrier ? " did not finish " : " did not reach ")
                     + (issued ? issued->to_string() : "collective #" + std::to_string(seq));
  // Where each missing rank is instead, so a skipped or reordered
  // collective shows up as such.
  for (auto rank : missing) {
    text += "; rank " + std::to_string(rank);
    const collective_fingerprint* elsewhere = nullptr;
    for (const auto& [other_seq, other] : slots_)
      if (other_seq != seq && other.fingerprints[rank] && other.state == slot_state::gathering)
        elsewhere = &*other.fingerprints[rank];
    if (barrier)
      text += " arrived but is still working on it";
    else if (elsewhere)
      text += " is waiting in " + elsewhere->to_string();
    else
      text += last_seq_[rank] == 0 ? " has issued no collective yet"
                                   : " last issued #" + std::to_string(last_seq_[rank]);
  }
  text += "\nrecent collectives in group '" + tag_ + "':\n" + dump_locked(entries_in_errors);
  return text;
}

void collective_group::arrive(std::size_t rank, const collective_fingerprint& mine,
                              clock::time_point deadline) {
  check_rank(rank, "arrive");
  std::unique_lock lock{mutex_};
  rethrow_if_aborted();
  if (mine.seq <= last_seq_[rank])
    throw value_error("collective_group '" + tag_ + "': rank " + std::to_string(rank)
                      + " issued " + mine.to_string() + " after #"
                      + std::to_string(last_seq_[rank])
                      + "; sequence numbers must increase");
  last_seq_[rank] = mine.seq;

  auto [it, created] = slots_.try_emplace(mine.seq);
  slot& s = it->second;
  if (created) {
    s.fingerprints.resize(participants_);
    s.finished.resize(participants_, false);
    records_.push_back(record{mine, clock::now(), std::nullopt, slot_state::gathering});
    if (records_.size() > flight_recorder_size)
      records_.pop_front();
  }
  s.fingerprints[rank] = mine;
  ++s.arrived;

  if (s.state == slot_state::timed_out) {
    std::string message = "collective timed out in group '" + tag_ + "': rank "
                          + std::to_string(rank) + " arrived at " + mine.to_string()
                          + " after it had timed out. " + s.error;
    leave(mine.seq, s);
    throw timeout_error(message);
  }

  if (s.arrived == participants_) {
    const bool equal = std::all_of(s.fingerprints.begin(), s.fingerprints.end(),
                                   [&](const auto& f) { return *f == *s.fingerprints[0]; });
    if (equal) {
      s.state = slot_state::running;
      if (auto* entry = find_record(mine.seq))
        entry->state = slot_state::running;
      publish();
    } else {
      s.error = mismatch_message(s);
      finish(mine.seq, s, slot_state::mismatch);
    }
  }

  const bool ready = wait_until(
      lock, [&] { return aborted_ || s.state != slot_state::gathering; }, deadline);
  rethrow_if_aborted();
  if (!ready) {
    // Marked first, so the message's flight-recorder lines show it.
    finish(mine.seq, s, slot_state::timed_out);
    s.error = timeout_message(mine.seq, s, false);
  }
  switch (s.state) {
    case slot_state::running:
      return;
    case slot_state::mismatch: {
      std::string message = s.error;
      leave(mine.seq, s);
      throw value_error(message);
    }
    default: {
      std::string message = s.error;
      leave(mine.seq, s);
      throw timeout_error(message);
    }
  }
}

void collective_group::wait_all_done(std::size_t rank, std::uint64_t seq,
                                     clock::time_point deadline) {
  check_rank(rank, "wait_all_done");
  std::unique_lock lock{mutex_};
  rethrow_if_aborted();
  const auto it = slots_.find(seq);
  if (it == slots_.end() || !it->second.fingerprints[rank] || it->second.finished[rank])
    throw value_error("collective_group '" + tag_ + "': rank " + std::to_string(rank)
                      + " called wait_all_done for #" + std::to_string(seq)
                      + " without a successful arrive()");
  slot& s = it->second;
  if (s.state == slot_state::timed_out) {
    std::string message = "collective timed out in group '" + tag_ + "': rank "
                          + std::to_string(rank) + " finished #" + std::to_string(seq)
                          + " after it had timed out. " + s.error;
    leave(seq, s);
    throw timeout_error(message);
  }
  s.finished[rank] = true;
  if (++s.finished_count == participants_)
    finish(seq, s, slot_state::completed);

  const bool ready = wait_until(
      lock, [&] { return aborted_ || s.state != slot_state::running; }, deadline);
  rethrow_if_aborted();
  if (!ready) {
    // Marked first, so the message's flight-recorder lines show it.
    finish(seq, s, slot_state::timed_out);
    s.error = timeout_message(seq, s, true);
  }
  if (s.state == slot_state::completed) {
    leave(seq, s);
    return;
  }
  std::string message = s.error;
  leave(seq, s);
  throw timeout_error(message);
}

void collective_group::abort(std::exception_ptr reason) {
  std::lock_guard lock{mutex_};
  if (!aborted_)
    aborted_ = reason ? reason
                      : std::make_exception_ptr(
                            error("collective_group '" + tag_ + "' was aborted"));
  publish();
}

std::string collective_group::dump() const {
  return dump(flight_recorder_size);
}

std::string collective_group::dump(std::size_t entries) const {
  std::lock_guard lock{mutex_};
  return dump_locked(entries);
}

std::string collective_group::dump_locked(std::size_t entries) const {
  std::string text;
  const auto first = records_.size() > entries ? records_.size() - entries : 0;
  for (auto i = first; i < records_.size(); ++i) {
    const auto& entry = records_[i];
    const auto& f = entry.fingerprint;
    text += "#" + std::to_string(f.seq) + " " + f.op;
    if (!f.reduction.empty())
      text += " " + f.reduction;
    text += " " + std::string(lockstep::to_string(f.dtype)) + " " + shape_to_string(f.shape)
            + " " + std::to_string(f.bytes()) + " B";
    if (!f.tag.empty())
      text += " tag '" + f.tag + "'";
    text += ": " + std::string(state_name(entry.state)) + ", started at +"
            + milliseconds(entry.start - created_);
    if (entry.end)
      text += ", took " + milliseconds(*entry.end - entry.start);
    text += "\n";
  }
  if (text.empty())
    text = "(no collectives yet)\n";
  return text;
}

} // namespace lockstep::detail
