#include "communicators/mpi_communicator.hpp"
#include "communicators/mpi_workers.hpp"

#include "collectives/allreduce_slices.hpp"
#include "collectives/tensor_bytes.hpp"
#include "devices/elementwise_loops.hpp"
#include "runtime/fault_injection.hpp"
#include "runtime/little_endian.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <thread>

namespace lockstep::detail {

struct mpi_collective_buffers {
  std::vector<std::uint8_t> record;      // this rank's agreement record
  std::vector<std::uint8_t> gathered;    // every rank's record
  std::vector<std::uint8_t> frame;       // this rank's whole frame, when long
  std::vector<std::uint8_t> long_frames; // every rank's whole frame
  std::vector<int> lengths;              // of the frames, by rank
  std::vector<int> offsets;              // of the frames in long_frames
  std::vector<std::byte> pack;           // a run of several tensors, contiguous
};

namespace {

// -- MPI itself: initialization, the lock, the half types' ops -------------------------

/// Every MPI call of every mpi_communicator holds it: MPI runs at
/// MPI_THREAD_SERIALIZED or above.
std::mutex& mpi_mutex() {
  static std::mutex mutex;
  return mutex;
}

/// Which half type and op: [0] float16, [1] bfloat16; sum, min, max, prod.
constexpr std::size_t half_op_index(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::mean:
      return 0;
    case reduce_op::min:
      return 1;
    case reduce_op::max:
      return 2;
    case reduce_op::prod:
      return 3;
  }
  return 0;
}

/// MPI's user function for half type T: `inout = inout op in`, element by
/// element, in float, rounded once (elementwise_loops' combine_loop).
template <class T, reduce_op Op>
void combine_halves(void* in, void* inout, int* count, MPI_Datatype*) {
  combine_loop<Op>(static_cast<T*>(inout), static_cast<const T*>(in), *count);
}

template <class T>
void create_half_ops(MPI_Op (&ops)[4]) {
  MPI_Op_create(&combine_halves<T, reduce_op::sum>, 1, &ops[0]);
  MPI_Op_create(&combine_halves<T, reduce_op::min>, 1, &ops[1]);
  MPI_Op_create(&combine_halves<T, reduce_op::max>, 1, &ops[2]);
  MPI_Op_create(&combine_halves<T, reduce_op::prod>, 1, &ops[3]);
}

/// MPI, once per process: initialized here when nobody had (and then
/// finalized at exit, by this object's destructor), with the half types'
/// datatype and ops.
struct mpi_runtime {
  bool initialized_here = false;
  MPI_Datatype half = MPI_DATATYPE_NULL; // two bytes, combined only by half_ops
  MPI_Op half_ops[2][4]{};

  mpi_runtime() {
    mpi_mutex(); // constructed first, so destroyed after this (~mpi_runtime locks it)
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized)
      throw context_error("mpi_communicator: MPI was finalized; lockstep's collectives over MPI "
                          "need it running");
    int provided = MPI_THREAD_SINGLE;
    if (!initialized) {
      const auto code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      if (code != MPI_SUCCESS)
        rethrow(mpi_error(code, "MPI_Init_thread", "initializing MPI for lockstep"));
      initialized_here = true;
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      finalize();
      throw context_error(
        "mpi_communicator: MPI runs at thread level " + std::to_string(provided)
        + " (MPI_THREAD_SINGLE or MPI_THREAD_FUNNELED); lockstep calls MPI from the threads "
          "that issue collectives, one at a time, and needs MPI_THREAD_SERIALIZED or above "
          "(initialize MPI with MPI_Init_thread, or let lockstep initialize it)");
    }
    MPI_Type_contiguous(2, MPI_BYTE, &half);
    MPI_Type_commit(&half);
    create_half_ops<float16_t>(half_ops[0]);
    create_half_ops<bfloat16_t>(half_ops[1]);
  }

  ~mpi_runtime() { finalize(); }

  void finalize() noexcept {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!initialized_here || finalized)
      return;
    std::lock_guard lock{mpi_mutex()};
    MPI_Finalize();
  }

  mpi_runtime(const mpi_runtime&) = delete;
  mpi_runtime& operator=(const mpi_runtime&) = delete;
};

mpi_runtime& runtime() {
  static mpi_runtime instance; // a failed start is tried again by the next communicator
  return instance;
}

/// What MPI call `start` returns, called under the MPI lock.
template <class Start>
int locked(Start start) {
  std::lock_guard lock{mpi_mutex()};
  return start();
}

/// MPI's datatype for elements of `type`.
MPI_Datatype datatype_of(dtype type) {
  switch (type) {
    case dtype::f32:
      return MPI_FLOAT;
    case dtype::f64:
      return MPI_DOUBLE;
    case dtype::i32:
      return MPI_INT32_T;
    case dtype::i64:
      return MPI_INT64_T;
    case dtype::f16:
    case dtype::bf16:
      return runtime().half;
  }
  throw dtype_error("mpi_communicator: invalid dtype");
}

/// MPI's op combining elements of `type` for `op` (MEAN: SUM, divided after).
MPI_Op op_of(reduce_op op, dtype type) {
  if (is_half(type))
    return runtime().half_ops[type == dtype::f16 ? 0 : 1][half_op_index(op)];
  switch (op) {
    case reduce_op::sum:
    case reduce_op::mean:
      return MPI_SUM;
    case reduce_op::min:
      return MPI_MIN;
    case reduce_op::max:
      return MPI_MAX;
    case reduce_op::prod:
      return MPI_PROD;
  }
  throw value_error("mpi_communicator: invalid reduce_op");
}

/// `count` elements as MPI's int count; value_error beyond what one call takes.
int count_of(std::size_t count, const char* what) {
  if (count > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw value_error(std::string("mpi_communicator ") + what + ": " + std::to_string(count)
                      + " elements, more than one MPI call takes (2^31 - 1)");
  return static_cast<int>(count);
}

/// MEAN's division of `count` elements of `type` at `data` by `ranks`.
void divide(dtype type, void* data, std::size_t count, std::size_t ranks) {
  visit_dtype(type, [&]<class T>(T) {
    divide_loop(static_cast<T*>(data), static_cast<std::int64_t>(ranks),
                static_cast<std::int64_t>(count));
  });
}

/// What abandoned collectives' buffers were: MPI may still read and write
/// them (a late rank arrives), so they live until the process ends.
struct abandoned_buffers {
  std::mutex mutex;
  std::vector<std::unique_ptr<mpi_collective_buffers>> buffers;
  std::vector<tensor> tensors;
};

abandoned_buffers& abandoned() {
  static auto* kept = new abandoned_buffers; // never destroyed: MPI may write them at exit
  return *kept;
}

} // namespace

// -- errors ----------------------------------------------------------------------------

error_value mpi_error(int code, const char* call, const std::string& context) {
  int error_class = MPI_ERR_UNKNOWN;
  if (MPI_Error_class(code, &error_class) != MPI_SUCCESS)
    error_class = MPI_ERR_UNKNOWN;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    length = std::snprintf(text, sizeof text, "MPI error code %d", code);
  auto kind = error_kind::error;
  switch (error_class) {
    case MPI_ERR_ROOT:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_OP:
    case MPI_ERR_ARG:
    case MPI_ERR_BUFFER:
    case MPI_ERR_TRUNCATE:
    case MPI_ERR_RANK:
    case MPI_ERR_COMM:
      kind = error_kind::value_error;
      break;
    case MPI_ERR_NO_MEM:
      kind = error_kind::resource_error;
      break;
    default:
      break;
  }
  return {kind,
          context + ": " + call + " failed: " + std::string(text, static_cast<std::size_t>(length)),
          kind == error_kind::value_error      ? "lockstep::value_error"
          : kind == error_kind::resource_error ? "lockstep::resource_error"
                                               : "lockstep::error"};
}

// -- the communicator ------------------------------------------------------------------

mpi_communicator::duplicate mpi_communicator::duplicate_of(MPI_Comm parent) {
  runtime();
  std::lock_guard lock{mpi_mutex()};
  duplicate d;
  const auto fail = [](int code, const char* call) {
    rethrow(mpi_error(code, call, "mpi_communicator: duplicating the MPI communicator"));
  };
  if (const auto code = MPI_Comm_dup(parent, &d.comm); code != MPI_SUCCESS)
    fail(code, "MPI_Comm_dup");
  if (const auto code = MPI_Comm_set_errhandler(d.comm, MPI_ERRORS_RETURN); code != MPI_SUCCESS)
    fail(code, "MPI_Comm_set_errhandler");
  MPI_Comm_rank(d.comm, &d.rank);
  MPI_Comm_size(d.comm, &d.size);
  return d;
}

mpi_communicator::mpi_communicator(MPI_Comm parent)
  : mpi_communicator(duplicate_of(parent)) {}

mpi_communicator::mpi_communicator(duplicate d)
  : comm_(d.comm),
    rank_(static_cast<std::size_t>(d.rank)),
    ranks_(static_cast<std::size_t>(d.size)),
    buffers_(std::make_unique<mpi_collective_buffers>()),
    session_("mpi", rank_, ranks_, rank_, "the MPI communicator's ranks") {}

mpi_communicator::~mpi_communicator() {
  if (broken_.load(std::memory_order_acquire) || comm_ == MPI_COMM_NULL)
    return; // a collective in flight still uses it
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return;
  std::lock_guard lock{mpi_mutex()};
  MPI_Comm_free(&comm_);
}

std::string mpi_communicator::name() const {
  return "mpi";
}

std::size_t mpi_communicator::size() const noexcept {
  return ranks_;
}

collective_session& mpi_communicator::session() noexcept {
  return session_;
}

std::uint64_t mpi_communicator::reached() const noexcept {
  return session_.last_begun();
}

// -- breaking ----------------------------------------------------------------------------

void mpi_communicator::break_group(const error_value& why) noexcept {
  std::lock_guard lock{reason_mutex_};
  if (broken_.load(std::memory_order_relaxed))
    return;
  reason_ = why;
  broken_.store(true, std::memory_order_release);
}

void mpi_communicator::throw_if_broken() const {
  if (!broken_.load(std::memory_order_acquire))
    return;
  error_value reason;
  {
    std::lock_guard lock{reason_mutex_};
    reason = reason_;
  }
  rethrow(reason);
}

void mpi_communicator::abandon(std::vector<MPI_Request>& requests, std::span<const tensor> keep) {
  auto& kept = abandoned();
  std::lock_guard lock{kept.mutex};
  // Whatever MPI may still write: this rank's record buffers and pack,
  // and the caller's tensors. The requests are leaked (MPI forbids
  // freeing those of collectives), and so is the duplicate.
  kept.buffers.push_back(std::move(buffers_));
  buffers_ = std::make_unique<mpi_collective_buffers>(); // unused: the group is broken
  kept.tensors.insert(kept.tensors.end(), keep.begin(), keep.end());
  requests.clear();
}

void mpi_communicator::check(int code, const char* call, const collective_fingerprint& f) {
  if (code == MPI_SUCCESS)
    return;
  error_value why;
  {
    std::lock_guard lock{mpi_mutex()}; // MPI_Error_string is an MPI call too
    why = mpi_error(code, call, "mpi: " + f.to_string() + " on worker " + std::to_string(rank_));
  }
  break_group(why); // MPI's state after an error is undefined (MPI-3.1, 8.3)
  throw_if_broken();
}

namespace {

/// The agreement's wait, as errors name it.
constexpr const char* agreement_wait = "MPI_Iallgather (the agreement)";

} // namespace

void mpi_communicator::wait(std::vector<MPI_Request>& requests, const char* what,
                            const collective_fingerprint& f, std::chrono::milliseconds timeout,
                            time_point deadline, std::span<const tensor> keep) {
  // MPI_Test drives Open MPI's progress, so the rank polls without
  // sleeping, as MPI_Wait would; it yields its CPU between tests once the
  // collective is not quick, so that ranks sharing CPUs progress.
  for (std::uint64_t polls = 0;; ++polls) {
    int done = 0;
    int code;
    {
      std::lock_guard lock{mpi_mutex()};
      code = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                         MPI_STATUSES_IGNORE);
    }
    if (code != MPI_SUCCESS) {
      abandon(requests, keep);
      check(code, what, f);
    }
    if (done) {
      requests.clear();
      return;
    }
    if (broken_.load(std::memory_order_acquire)) {
      abandon(requests, keep);
      throw_if_broken();
    }
    if (polls % 64 == 63 && std::chrono::steady_clock::now() >= deadline) {
      abandon(requests, keep);
      break_group({error_kind::timeout_error,
                   f.op + " #" + std::to_string(f.seq) + " between the workers ("
                     + f.details(false).substr(1) + ") timed out on worker "
                     + std::to_string(rank_) + " after " + std::to_string(timeout.count())
                     + " ms (its timeout), waiting in " + what
                     + (std::string_view(what) == agreement_wait
                          ? ": some worker did not issue it (MPI cannot tell which)"
                          : ": every worker issued it, and its data stalled")
                     + "; the MPI communicator is broken",
                   "lockstep::timeout_error"});
      throw_if_broken();
    }
    if (polls >= 1024)
      std::this_thread::yield();
  }
}

// -- a collective ------------------------------------------------------------------------

void mpi_communicator::agree(const collective_fingerprint& f, const collective_options& options,
                             time_point deadline) {
  auto& b = *buffers_;
  fault_point("agree");
  records_.start(rank_, ranks_, f, options.failure, {});
  const auto mine = records_.frame(rank_);
  // Each record: the frame's length, then as much of the frame as fits.
  b.record.assign(record_bytes, 0);
  store_le(b.record.data(), std::uint64_t{mine.size()});
  std::memcpy(b.record.data() + 8, mine.data(), std::min(mine.size(), record_bytes - 8));
  b.gathered.resize(ranks_ * record_bytes);
  requests_.assign(1, MPI_REQUEST_NULL);
  check(locked([&] {
          return MPI_Iallgather(b.record.data(), static_cast<int>(record_bytes), MPI_BYTE,
                                b.gathered.data(), static_cast<int>(record_bytes), MPI_BYTE,
                                comm_, requests_.data());
        }),
        "MPI_Iallgather", f);
  wait(requests_, agreement_wait, f, options.timeout, deadline);
  b.lengths.resize(ranks_);
  bool fit = true;
  for (std::size_t r = 0; r < ranks_; ++r) {
    const auto length = load_le<std::uint64_t>(
      std::span<const std::uint8_t>(b.gathered.data() + r * record_bytes, 8));
    if (length > ring_records::max_frame_bytes)
      throw value_error("mpi: worker " + std::to_string(r) + " announced a record of "
                        + std::to_string(length) + " bytes for " + f.to_string());
    b.lengths[r] = static_cast<int>(length);
    fit = fit && length <= record_bytes - 8;
  }
  if (fit) {
    for (std::size_t r = 0; r < ranks_; ++r)
      if (r != rank_) {
        const auto* at = b.gathered.data() + r * record_bytes + 8;
        records_.buffer(r).assign(at, at + b.lengths[r]);
      }
  } else {
    // Some frame is longer than a record: every rank saw its length, so
    // every rank gathers the whole frames.
    b.offsets.resize(ranks_);
    std::size_t total = 0;
    for (std::size_t r = 0; r < ranks_; ++r) {
      b.offsets[r] = static_cast<int>(total);
      total += static_cast<std::size_t>(b.lengths[r]);
    }
    b.frame.assign(mine.begin(), mine.end());
    b.long_frames.resize(std::max<std::size_t>(total, 1));
    requests_.assign(1, MPI_REQUEST_NULL);
    check(locked([&] {
            return MPI_Iallgatherv(b.frame.data(), static_cast<int>(b.frame.size()), MPI_BYTE,
                                   b.long_frames.data(), b.lengths.data(), b.offsets.data(),
                                   MPI_BYTE, comm_, requests_.data());
          }),
          "MPI_Iallgatherv", f);
    wait(requests_, "MPI_Iallgatherv (the agreement's long records)", f, options.timeout,
         deadline);
    for (std::size_t r = 0; r < ranks_; ++r)
      if (r != rank_) {
        const auto* at = b.long_frames.data() + b.offsets[r];
        records_.buffer(r).assign(at, at + b.lengths[r]);
      }
  }
  records_.check(); // its errors are agreed on by every rank: the communicator stays usable
}

template <class Work>
void mpi_communicator::run(std::size_t rank, const collective_fingerprint& f,
                           const collective_options& options, Work work) {
  session_.check_rank(rank);
  throw_if_broken();
  session_.begin(f.seq);
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  try {
    agree(f, options, deadline);
    work(deadline);
  } catch (...) {
    if (broken_.load(std::memory_order_acquire)) {
      session_.end(f, "group broken");
      throw_if_broken();
    }
    session_.end(f, "failed");
    throw;
  }
  session_.end(f, "completed");
}

void mpi_communicator::all_reduce(std::size_t rank, reduce_op op, std::span<const tensor> inputs,
                                  std::span<tensor> outputs, const collective_options& options,
                                  std::uint64_t first_seq) {
  if (inputs.size() != outputs.size())
    throw value_error("mpi all_reduce: " + std::to_string(inputs.size()) + " inputs but "
                      + std::to_string(outputs.size()) + " outputs");
  auto seq = session_.number(rank, options, first_seq);
  const auto batch = sign_batch(inputs);
  // One collective per run of tensors of one dtype, as on the ring.
  std::size_t first = 0;
  do {
    auto last = first + 1;
    while (last < inputs.size() && inputs[last].dtype() == inputs[first].dtype())
      ++last;
    std::size_t total = 0;
    for (auto i = first; i < last; ++i) {
      if (outputs[i].dtype() != inputs[i].dtype()
          || outputs[i].num_elements() != inputs[i].num_elements())
        throw value_error("mpi all_reduce: output " + std::to_string(i)
                          + " does not match its input");
      total += inputs[i].byte_size();
    }
    const auto run_seq = options.seq != 0 ? seq : seq++; // caller-numbered: one number
    const auto f = all_reduce_fingerprint(run_seq, op, inputs, first, last, batch, options);
    const auto type = f.dtype;
    run(rank, f, options, [&](time_point) {
      if (total == 0)
        return;
      const auto count = count_of(total / size_of(type), "all_reduce");
      // Every rank agreed to this all-reduce: its data moves in one blocking
      // MPI_Allreduce, whose algorithms (Open MPI's tuned component) are
      // what users measure; the non-blocking MPI_Iallreduce runs other ones
      // (libnbc), 1.2 to 1.5 times slower over TCP here (docs/multi_worker.md,
      // "Collectives over MPI"). The deadline bounds the agreement; a rank
      // lost inside the call is the launcher's to end (the file comment).
      const auto reduce = [&](const void* in, void* out) {
        fault_point("reduce-scatter"); // a rank lost as its all-reduce starts
        const auto datatype = datatype_of(type);
        const auto mpi_op = op_of(op, type);
        check(locked([&] { return MPI_Allreduce(in, out, count, datatype, mpi_op, comm_); }),
              "MPI_Allreduce", f);
        if (op == reduce_op::mean)
          divide(type, out, static_cast<std::size_t>(count), ranks_);
      };
      if (last - first == 1) { // one tensor: reduced into its output, no pack
        const void* in = inputs[first].raw_data();
        void* out = outputs[first].raw_data();
        reduce(in == out ? MPI_IN_PLACE : in, out);
        return;
      }
      auto& pack = buffers_->pack;
      pack.resize(total);
      auto* packed = reinterpret_cast<std::byte*>(pack.data());
      read_pack(inputs.subspan(first, last - first), 0, packed, total);
      reduce(MPI_IN_PLACE, pack.data());
      write_pack(outputs.subspan(first, last - first), 0, packed, total);
    });
    first = last;
  } while (first < inputs.size());
}

void mpi_communicator::reduce_scatter(std::size_t rank, reduce_op op, const tensor& input,
                                      tensor& output, const collective_options& options) {
  if (input.dtype() != output.dtype()
      || static_cast<std::size_t>(input.num_elements()) != ranks_ * output.num_elements())
    throw value_error("mpi reduce_scatter: the input needs " + std::to_string(ranks_)
                      + " blocks of the output's size and dtype");
  const auto f = reduce_scatter_fingerprint(session_.number(rank, options), op, input, options);
  run(rank, f, options, [&](time_point deadline) {
    const auto block = static_cast<std::size_t>(output.num_elements());
    if (block == 0)
      return;
    const auto count = count_of(block, "reduce_scatter");
    requests_.assign(1, MPI_REQUEST_NULL);
    const auto datatype = datatype_of(f.dtype);
    const auto mpi_op = op_of(op, f.dtype);
    check(locked([&] {
            return MPI_Ireduce_scatter_block(input.raw_data(), output.raw_data(), count, datatype,
                                             mpi_op, comm_, requests_.data());
          }),
          "MPI_Ireduce_scatter_block", f);
    fault_point("reduce-scatter");
    const tensor keep[] = {input, output};
    wait(requests_, "MPI_Ireduce_scatter_block", f, options.timeout, deadline, keep);
    if (op == reduce_op::mean)
      divide(f.dtype, output.raw_data(), block, ranks_);
  });
}

void mpi_communicator::all_gather(std::size_t rank, const tensor& input, tensor& output,
                                  const collective_options& options) {
  const auto f = all_gather_fingerprint("mpi", ranks_, session_.number(rank, options), input,
                                        output, options);
  run(rank, f, options, [&](time_point deadline) {
    const auto bytes = input.byte_size();
    if (bytes == 0)
      return;
    const auto count = count_of(bytes, "all_gather");
    requests_.assign(1, MPI_REQUEST_NULL);
    check(locked([&] {
            return MPI_Iallgather(input.raw_data(), count, MPI_BYTE, output.raw_data(), count,
                                  MPI_BYTE, comm_, requests_.data());
          }),
          "MPI_Iallgather", f);
    fault_point("all-gather");
    const tensor keep[] = {input, output};
    wait(requests_, "MPI_Iallgather", f, options.timeout, deadline, keep);
  });
}

void mpi_communicator::broadcast(std::size_t rank, std::size_t root, std::span<tensor> buffers,
                                 const collective_options& options) {
  auto f = broadcast_fingerprint(session_.number(rank, options), root, buffers, options);
  f.batch_dtypes = sign_batch(buffers).dtypes; // MPI moves bytes: the dtypes must agree too
  run(rank, f, options, [&](time_point deadline) {
    // MPI checks the root: one outside the group is its MPI_ERR_ROOT.
    const auto mpi_root = root > static_cast<std::size_t>(std::numeric_limits<int>::max())
                            ? -1
                            : static_cast<int>(root);
    requests_.clear();
    for (auto& buffer : buffers) {
      const auto bytes = buffer.byte_size();
      if (bytes == 0)
        continue;
      const auto count = count_of(bytes, "broadcast");
      auto request = MPI_REQUEST_NULL;
      const auto code = locked([&] {
        return MPI_Ibcast(buffer.raw_data(), count, MPI_BYTE, mpi_root, comm_, &request);
      });
      if (code != MPI_SUCCESS) {
        abandon(requests_, {buffers.data(), buffers.size()}); // the broadcasts started
        check(code, "MPI_Ibcast", f);
      }
      requests_.push_back(request);
    }
    wait(requests_, "MPI_Ibcast", f, options.timeout, deadline, {buffers.data(), buffers.size()});
  });
}

} // namespace lockstep::detail

// -- the node's entry (mpi_workers.hpp) -------------------------------------------

namespace lockstep::detail {

mpi_workers join_mpi_workers(std::size_t rank, std::size_t world) {
  auto mpi = std::make_shared<mpi_communicator>();
  if (mpi->rank() != rank || mpi->size() != world)
    throw value_error("LOCKSTEP_COMMUNICATOR=mpi: this process is MPI rank "
                      + std::to_string(mpi->rank()) + " of " + std::to_string(mpi->size())
                      + " but lockstep worker " + std::to_string(rank) + " of "
                      + std::to_string(world) + ": the workers must be one MPI job in the "
                      + "cluster's order (start them with mpirun, whose ranks lockstep takes)");
  return {mpi, [mpi](const error_value& why) { mpi->break_group(why); },
          [mpi] { return mpi->reached(); }};
}

bool built_with_mpi() noexcept {
  return true;
}

} // namespace lockstep::detail
