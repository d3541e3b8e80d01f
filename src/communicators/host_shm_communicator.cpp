#include "communicators/host_shm_communicator.hpp"

#include "collectives/allreduce_slices.hpp"
#include "collectives/chunk_reduction.hpp"
#include "collectives/tensor_bytes.hpp"
#include "collectives/thread_scratch.hpp"
#include "collectives/worker_timeout.hpp"
#include "runtime/error_text.hpp"
#include "runtime/fault_injection.hpp"
#include "runtime/spin_wait.hpp"
#include "transport/shm/shared_wait.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace lockstep::detail {

namespace {

constexpr std::uint64_t layout_magic = 0x6c6f636b73686d31; // "lockshm1"
constexpr std::size_t page = 4096;

constexpr std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

/// What the group's reason holds: its kind and message, cut to fit.
constexpr std::size_t reason_capacity = 4096;

enum broken_state : std::uint32_t { working = 0, writing = 1, written = 2 };

} // namespace

/// A rank's control line, a cache line of its own.
struct alignas(64) host_rank_line {
  std::atomic<std::uint64_t> phase{0};   // barriers passed
  std::atomic<std::uint64_t> reached{0}; // the last collective started
  std::atomic<std::uint32_t> record_size[2]{};
};

/// The start of the segment; the records, then the slots, follow it.
struct host_segment_layout {
  std::uint64_t magic = 0;
  std::uint64_t ranks = 0;
  std::uint64_t slot_bytes = 0;
  alignas(64) shared_wake_word wake;
  alignas(64) std::atomic<std::uint32_t> broken{working};
  std::uint32_t reason_kind = 0;
  std::uint32_t reason_length = 0;
  char reason[reason_capacity];
  host_rank_line lines[host_shm_communicator::max_ranks];
};

namespace {

std::size_t records_offset() {
  return round_up(sizeof(host_segment_layout), page);
}

std::size_t slots_offset(std::size_t ranks) {
  return round_up(records_offset() + ranks * 2 * host_shm_communicator::record_bytes, page);
}

/// `failure` with its message cut so that its record fits: a failure's
/// text is the only part of a record without a bound.
std::exception_ptr fitting(const std::exception_ptr& failure) {
  if (!failure)
    return failure;
  auto value = to_error_value(failure);
  constexpr std::size_t most = host_shm_communicator::record_bytes / 2;
  if (value.message.size() <= most)
    return failure;
  value.message = value.message.substr(0, most) + "... (cut)";
  return to_exception_ptr(value);
}

} // namespace

std::size_t host_shm_communicator::segment_bytes(std::size_t ranks, std::size_t slot_bytes) {
  return slots_offset(ranks) + ranks * round_up(slot_bytes, page);
}

void host_shm_communicator::initialize(shared_segment& segment, std::size_t ranks,
                                       std::size_t slot_bytes) {
  if (segment.size() != segment_bytes(ranks, slot_bytes))
    throw value_error("host_shm_communicator: a segment of " + std::to_string(segment.size())
                      + " bytes for " + std::to_string(ranks) + " ranks");
  auto* layout = new (segment.data()) host_segment_layout;
  layout->ranks = ranks;
  layout->slot_bytes = slot_bytes;
  std::atomic_thread_fence(std::memory_order_release);
  layout->magic = layout_magic;
}

host_shm_communicator::host_shm_communicator(shared_segment segment, std::size_t rank,
                                             std::size_t ranks, std::size_t slot_bytes,
                                             std::vector<std::size_t> workers,
                                             std::size_t processes_on_host)
  : segment_(std::move(segment)),
    layout_(reinterpret_cast<host_segment_layout*>(segment_.data())),
    rank_(rank),
    ranks_(ranks),
    slot_bytes_(round_up(slot_bytes, 64)),
    workers_(std::move(workers)),
    spin_(spin_budget(processes_on_host)),
    session_("host_shm", rank, ranks, rank < workers_.size() ? workers_[rank] : rank,
             "the workers of its host (shared memory)") {
  if (ranks == 0 || ranks > max_ranks || rank >= ranks || workers_.size() != ranks
      || segment_.size() != segment_bytes(ranks, slot_bytes) || layout_->magic != layout_magic
      || layout_->ranks != ranks || layout_->slot_bytes != slot_bytes)
    throw value_error("host_shm_communicator: segment '" + segment_.name()
                      + "' does not hold a group of " + std::to_string(ranks) + " ranks with "
                      + std::to_string(slot_bytes) + "-byte slots for rank "
                      + std::to_string(rank));
  records_.name_workers(workers_);
}

std::string host_shm_communicator::name() const {
  return "host_shm";
}

std::size_t host_shm_communicator::size() const noexcept {
  return ranks_;
}

collective_session& host_shm_communicator::session() noexcept {
  return session_;
}

std::byte* host_shm_communicator::slot(std::size_t r) const noexcept {
  return segment_.data() + slots_offset(ranks_) + r * round_up(layout_->slot_bytes, page);
}

std::uint64_t host_shm_communicator::reached() const noexcept {
  return layout_->lines[rank_].reached.load(std::memory_order_acquire);
}

// -- breaking ----------------------------------------------------------------------

void host_shm_communicator::break_group(const error_value& why) noexcept {
  auto expected = std::uint32_t{working};
  if (!layout_->broken.compare_exchange_strong(expected, writing))
    return;
  const auto length = std::min(why.message.size(), reason_capacity);
  std::memcpy(layout_->reason, why.message.data(), length);
  layout_->reason_length = static_cast<std::uint32_t>(length);
  layout_->reason_kind = static_cast<std::uint32_t>(why.kind);
  layout_->broken.store(written, std::memory_order_release);
  wake_all(layout_->wake);
}

error_value host_shm_communicator::broken_reason() const {
  while (layout_->broken.load(std::memory_order_acquire) == writing) {
  } // a few stores away
  const auto kind = static_cast<error_kind>(layout_->reason_kind);
  return {is_valid(kind) ? kind : error_kind::peer_lost_error,
          std::string(layout_->reason, layout_->reason_length), ""};
}

void host_shm_communicator::throw_if_broken() const {
  if (layout_->broken.load(std::memory_order_acquire) != working)
    rethrow(broken_reason());
}

void host_shm_communicator::explain_timeouts(std::chrono::milliseconds delay,
                                             progress_question ask, failure_notice tell) {
  std::lock_guard lock{explain_mutex_};
  delay_ = delay;
  ask_ = std::move(ask);
  tell_ = std::move(tell);
}

std::chrono::milliseconds host_shm_communicator::report_delay() const noexcept {
  std::lock_guard lock{explain_mutex_};
  return delay_;
}

error_value host_shm_communicator::timeout_reason(const collective_fingerprint& f,
                                                  std::chrono::milliseconds timeout) const {
  progress_question ask;
  {
    std::lock_guard lock{explain_mutex_};
    ask = ask_;
  }
  if (ask)
    return worker_timeout(f, workers_[rank_], timeout, ask(f.seq));
  auto text = f.op + " #" + std::to_string(f.seq) + " between the workers ("
              + f.details(false).substr(1) + ") timed out on worker "
              + std::to_string(workers_[rank_]) + " after " + std::to_string(timeout.count())
              + " ms (its timeout): ";
  std::vector<std::string> missing, where;
  for (std::size_t r = 0; r < ranks_; ++r) {
    const auto reached = layout_->lines[r].reached.load(std::memory_order_acquire);
    if (r == rank_ || reached >= f.seq)
      continue;
    missing.push_back(std::to_string(workers_[r]));
    if (where.size() <= items_in_errors)
      where.push_back("worker " + std::to_string(workers_[r])
                      + (reached == 0 ? " has issued none"
                                      : " last issued #" + std::to_string(reached)));
  }
  text += missing.empty() ? "every worker reached it, and its data stalled"
                          : workers_text(missing) + " did not reach it ("
                              + joined_list(where, items_in_errors, missing.size()) + ")";
  return {error_kind::timeout_error, std::move(text), "lockstep::timeout_error"};
}

// -- barriers ----------------------------------------------------------------------

void host_shm_communicator::barrier(std::uint64_t phase, time_point deadline,
                                    const collective_fingerprint& f,
                                    std::chrono::milliseconds timeout) {
  const auto everyone_passed = [&] {
    for (std::size_t r = 0; r < ranks_; ++r)
      if (layout_->lines[r].phase.load(std::memory_order_acquire) < phase)
        return false;
    return true;
  };
  const auto broken = [&] { return layout_->broken.load(std::memory_order_acquire) != working; };
  switch (wait_on(layout_->wake, everyone_passed, broken, deadline, spin_)) {
  case wait_end::ready:
    return;
  case wait_end::stopped:
    rethrow(broken_reason());
  case wait_end::deadline: {
    const auto reason = timeout_reason(f, timeout);
    break_group(reason);
    failure_notice tell;
    {
      std::lock_guard lock{explain_mutex_};
      tell = tell_;
    }
    if (tell)
      tell(reason);
    rethrow(broken_reason()); // this rank's reason, or one that came first
  }
  }
}

void host_shm_communicator::pass_barrier(time_point deadline, const collective_fingerprint& f,
                                         std::chrono::milliseconds timeout) {
  ++phase_;
  layout_->lines[rank_].phase.store(phase_, std::memory_order_release);
  wake_all(layout_->wake);
  barrier(phase_, deadline, f, timeout);
}

// -- a collective --------------------------------------------------------------------

template <class Work>
void host_shm_communicator::run(std::size_t rank, collective_fingerprint f,
                                const collective_options& options,
                                std::span<const std::uint8_t> payload, Work work) {
  session_.check_rank(rank);
  session_.begin(f.seq);
  const auto record = [&](const char* outcome) { session_.end(f, outcome); };
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  try {
    throw_if_broken();
    fault_point("agree");
    layout_->lines[rank_].reached.store(f.seq, std::memory_order_release);
    // The agreement: this rank's record in this collective's area, a
    // barrier, every rank's record read and checked.
    const auto area = collectives_++ % 2;
    records_.start(rank_, ranks_, f, fitting(options.failure), payload);
    const auto mine = records_.frame(rank_);
    if (mine.size() > record_bytes)
      throw value_error("host_shm: the record of " + f.to_string() + " has "
                        + std::to_string(mine.size()) + " bytes, more than "
                        + std::to_string(record_bytes));
    auto* records = segment_.data() + records_offset();
    const auto record_at = [&](std::size_t r) { return records + (r * 2 + area) * record_bytes; };
    std::memcpy(record_at(rank_), mine.data(), mine.size());
    layout_->lines[rank_].record_size[area].store(static_cast<std::uint32_t>(mine.size()),
                                                  std::memory_order_release);
    work.fill_first();
    if (!payload.empty())
      fault_point("all-gather"); // the small path's data went out with the record
    pass_barrier(deadline, f, options.timeout);
    for (std::size_t r = 0; r < ranks_; ++r) {
      if (r == rank_)
        continue;
      const auto size = std::min<std::size_t>(
        layout_->lines[r].record_size[area].load(std::memory_order_acquire), record_bytes);
      const auto* at = reinterpret_cast<const std::uint8_t*>(record_at(r));
      records_.buffer(r).assign(at, at + size);
    }
    records_.check(); // its errors are agreed on by every rank: the group stays usable
    work.rest(deadline);
  } catch (...) {
    if (layout_->broken.load(std::memory_order_acquire) != working) {
      record("group broken");
      rethrow(broken_reason());
    }
    record("failed");
    throw;
  }
  record("completed");
}

template <class Fill, class Combine, class Drain>
void host_shm_communicator::through_slots(std::size_t bytes, std::size_t chunk,
                                          time_point deadline, const collective_fingerprint& f,
                                          std::chrono::milliseconds timeout, Fill fill,
                                          Combine combine, Drain drain) {
  // Chunk 0 was filled before the agreement's barrier.
  for (std::size_t offset = 0; offset < bytes; offset += chunk) {
    const auto length = std::min(chunk, bytes - offset);
    if (offset > 0) {
      fill(offset, length);
      pass_barrier(deadline, f, timeout);
    }
    if (combine(offset, length))
      pass_barrier(deadline, f, timeout);
    drain(offset, length);
  }
}

namespace {

/// What run() does for a collective: `fill_first` before the agreement's
/// barrier, `rest` after it.
template <class First, class Rest>
struct collective_work {
  First fill_first;
  Rest rest;
};
template <class First, class Rest>
collective_work(First, Rest) -> collective_work<First, Rest>;

} // namespace

template <class Drain>
void host_shm_communicator::reduce_through_slots(std::size_t rank,
                                                 const collective_fingerprint& f,
                                                 const collective_options& options, reduce_op op,
                                                 dtype type, std::span<const tensor> in,
                                                 std::size_t bytes, Drain drain) {
  const auto element = size_of(type);
  const auto chunk = slot_bytes_ / element * element;
  const auto mine = slot(rank_);
  const auto fill = [&](std::size_t offset, std::size_t length) {
    read_pack(in, offset, mine, length);
  };
  const auto combine = [&](std::size_t offset, std::size_t length) {
    // Rank r reduces slice r of the chunk, in place in every slot.
    const auto count = length / element;
    const auto begin = count * rank_ / ranks_;
    const auto end = count * (rank_ + 1) / ranks_;
    visit_dtype(type, [&]<class T>(T) {
      dispatch_op(op, [&](auto op_constant) {
        const auto scratch_chunk = std::max<std::size_t>(1, default_chunk_bytes(ranks_) / sizeof(T));
        auto* block = thread_scratch(scratch_chunk * scratch_per_element<T>);
        const auto at = [&](std::size_t r) { return reinterpret_cast<T*>(slot(r)) + begin; };
        reduce_to_every_output<decltype(op_constant)::value, T>(ranks_, at, at, end - begin,
                                                               scratch_chunk, block);
      });
    });
    if (offset == 0)
      fault_point("reduce-scatter");
    return true;
  };
  const auto read_out = [&](std::size_t offset, std::size_t length) {
    drain(offset, mine, length);
    if (offset == 0)
      fault_point("all-gather");
  };
  run(rank, f, options, {},
      collective_work{[&] { fill(0, std::min(chunk, bytes)); },
                      [&](time_point deadline) {
                        through_slots(bytes, chunk, deadline, f, options.timeout, fill, combine,
                                      read_out);
                      }});
}

void host_shm_communicator::all_reduce(std::size_t rank, reduce_op op,
                                       std::span<const tensor> inputs, std::span<tensor> outputs,
                                       const collective_options& options,
                                       std::uint64_t first_seq) {
  if (inputs.size() != outputs.size())
    throw value_error("host_shm all_reduce: " + std::to_string(inputs.size()) + " inputs but "
                      + std::to_string(outputs.size()) + " outputs");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (outputs[i].dtype() != inputs[i].dtype()
        || outputs[i].num_elements() != inputs[i].num_elements())
      throw value_error("host_shm all_reduce: output " + std::to_string(i)
                        + " does not match its input");
  auto seq = session_.number(rank, options, first_seq);
  const auto batch = sign_batch(inputs);
  // One collective per run of tensors of one dtype.
  std::size_t first = 0;
  do {
    auto last = first + 1;
    while (last < inputs.size() && inputs[last].dtype() == inputs[first].dtype())
      ++last;
    last = std::min(last, inputs.size());
    const auto pack_in = inputs.subspan(first, last - first);
    const auto pack_out = outputs.subspan(first, last - first);
    const auto bytes = pack_bytes(pack_in);
    const auto type = inputs.empty() ? dtype::f32 : inputs[first].dtype();
    const auto run_seq = options.seq != 0 ? seq : seq++; // caller-numbered: one number
    auto f = all_reduce_fingerprint(run_seq, op, inputs, first, last, batch, options);
    if (bytes <= small_bytes) {
      // Through the records: every rank reduces every rank's data.
      alignas(64) std::byte mine[small_bytes];
      read_pack(pack_in, 0, mine, bytes);
      run(rank, f, options,
          {reinterpret_cast<const std::uint8_t*>(mine), bytes},
          collective_work{[] {}, [&](time_point) {
                            if (bytes == 0)
                              return;
                            alignas(64) std::byte out[small_bytes];
                            alignas(64) float wide[small_bytes / 2];
                            const auto count = bytes / size_of(type);
                            visit_dtype(type, [&]<class T>(T) {
                              dispatch_op(op, [&](auto op_constant) {
                                reduce_operands<decltype(op_constant)::value, T>(
                                  ranks_,
                                  [&](std::size_t r) {
                                    return reinterpret_cast<const T*>(records_.payload(r).data());
                                  },
                                  count, reinterpret_cast<T*>(out), wide);
                              });
                            });
                            write_pack(pack_out, 0, out, bytes);
                          }});
    } else {
      reduce_through_slots(rank, f, options, op, type, pack_in, bytes,
                           [&](std::size_t offset, const std::byte* reduced, std::size_t length) {
                             write_pack(pack_out, offset, reduced, length);
                           });
    }
    first = last;
  } while (first < inputs.size());
}

void host_shm_communicator::reduce_scatter(std::size_t rank, reduce_op op, const tensor& input,
                                           tensor& output, const collective_options& options) {
  if (input.dtype() != output.dtype()
      || static_cast<std::size_t>(input.num_elements()) != ranks_ * output.num_elements())
    throw value_error("host_shm reduce_scatter: the input needs " + std::to_string(ranks_)
                      + " blocks of the output's size and dtype");
  const auto f = reduce_scatter_fingerprint(session_.number(rank, options), op, input, options);
  // The all-reduce's pass through the slots, each rank reading back only
  // the part of each chunk in its own block.
  const auto block = output.byte_size();
  const auto first = rank * block;
  auto* out = bytes_of(output).data();
  reduce_through_slots(rank, f, options, op, input.dtype(), {&input, 1}, input.byte_size(),
                       [&](std::size_t offset, const std::byte* reduced, std::size_t length) {
                         const auto from = std::max(offset, first);
                         const auto to = std::min(offset + length, first + block);
                         if (from < to)
                           std::memcpy(out + (from - first), reduced + (from - offset),
                                       to - from);
                       });
}

void host_shm_communicator::all_gather(std::size_t rank, const tensor& input, tensor& output,
                                       const collective_options& options) {
  const auto f = all_gather_fingerprint("host_shm", ranks_, session_.number(rank, options),
                                        input, output, options);
  const auto bytes = input.byte_size();
  const auto chunk = slot_bytes_;
  const auto fill = [&](std::size_t offset, std::size_t length) {
    std::memcpy(slot(rank_), bytes_of(input).data() + offset, length);
  };
  const auto out = bytes_of(output);
  const auto drain = [&](std::size_t offset, std::size_t length) {
    for (std::size_t r = 0; r < ranks_; ++r)
      std::memcpy(out.data() + r * bytes + offset, slot(r), length);
  };
  run(rank, f, options, {},
      collective_work{[&] { fill(0, std::min(chunk, bytes)); },
                      [&](time_point deadline) {
                        // The others read this rank's slot while they
                        // drain: a barrier before the next fill.
                        through_slots(bytes, chunk, deadline, f, options.timeout, fill,
                                      [](std::size_t, std::size_t) { return false; },
                                      [&](std::size_t offset, std::size_t length) {
                                        drain(offset, length);
                                        pass_barrier(deadline, f, options.timeout);
                                      });
                      }});
}

void host_shm_communicator::broadcast(std::size_t rank, std::size_t root,
                                      std::span<tensor> buffers,
                                      const collective_options& options) {
  if (root >= ranks_)
    throw value_error("host_shm broadcast: root " + std::to_string(root) + " of "
                      + std::to_string(ranks_) + " ranks");
  const auto f = broadcast_fingerprint(session_.number(rank, options), root, buffers, options);
  const auto bytes = pack_bytes(buffers);
  const auto chunk = slot_bytes_;
  const auto fill = [&](std::size_t offset, std::size_t length) {
    if (rank_ == root)
      read_pack(buffers, offset, slot(root), length);
  };
  run(rank, f, options, {},
      collective_work{[&] { fill(0, std::min(chunk, bytes)); },
                      [&](time_point deadline) {
                        through_slots(bytes, chunk, deadline, f, options.timeout, fill,
                                      [](std::size_t, std::size_t) { return false; },
                                      [&](std::size_t offset, std::size_t length) {
                                        if (rank_ != root)
                                          write_pack(buffers, offset, slot(root), length);
                                        pass_barrier(deadline, f, options.timeout);
                                      });
                      }});
}

} // namespace lockstep::detail
