// One rank of tests/mpi_test: run by a real `mpirun -n N`, it drives
// mpi_communicator (src/communicators/) through every collective, op and
// dtype against closed forms (tests/reduce_values.hpp), the agreement's
// errors, a failure passed on, MPI's errors, a break and a timeout. The
// communicator initializes MPI itself (nobody else did); the checks compare
// ranks with raw MPI calls on MPI_COMM_WORLD. Every failed check prints a
// line "FAIL rank r: ..."; the rank exits 1 if any did, else it prints
// "ok mpi: rank r of N" and exits 0. Rank 0 also prints what it observed
// of MPI's order of combining floats ("observed: ...") and the texts of
// the errors ("error text ..."). With an argument ("serialized",
// "single"), the program initializes MPI itself at that thread level.

#include "communicators/mpi_communicator.hpp"

#include "collectives/chunk_reduction.hpp"
#include "runtime/error_value.hpp"
#include "runtime/fault_injection.hpp"

#include "lockstep/error.hpp"

#include "reduce_values.hpp"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using lockstep::dtype;
using lockstep::reduce_op;
using lockstep::tensor;
using lockstep::detail::collective_options;
using lockstep::detail::mpi_communicator;

constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max,
                                 reduce_op::prod};
constexpr dtype all_dtypes[] = {dtype::f32, dtype::f64, dtype::i32, dtype::i64, dtype::f16,
                                dtype::bf16};

int world_rank = 0;
int world_size = 0;
int failures = 0;

/// Rank 0 shows an error's text in the test's log (docs/multi_worker.md
/// quotes them).
void show(const char* what, const lockstep::detail::error_value& e) {
  if (world_rank == 0)
    std::cout << "error text (" << what << "): " << lockstep::detail::to_string(e.kind) << ": "
              << e.message << std::endl;
}

void expect(bool ok, const std::string& what) {
  if (ok)
    return;
  ++failures;
  std::cout << "FAIL rank " << world_rank << ": " << what << std::endl;
}

template <class T>
double as_double(T value) {
  if constexpr (lockstep::is_half_v<T>)
    return static_cast<double>(static_cast<float>(value));
  else
    return static_cast<double>(value);
}

/// Element indices cycle with this period, so that closed forms stay exact
/// in the dtype (float16 and bfloat16 hold integers up to 256 exactly).
std::size_t period_of(dtype type) {
  return lockstep::is_half(type) ? 8 : 1 << 20;
}

std::string describe(const char* what, reduce_op op, dtype type, std::size_t count) {
  std::ostringstream text;
  text << what << " " << lockstep::to_string(op) << " " << lockstep::to_string(type) << " ["
       << count << "]";
  return text.str();
}

/// Whether every rank of MPI_COMM_WORLD holds the same `bytes` (by length
/// and content, compared on every rank).
bool same_on_every_rank(const std::string& bytes) {
  const auto length = static_cast<int>(bytes.size());
  std::vector<int> lengths(world_size);
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (auto l : lengths)
    if (l != length)
      return false;
  std::string all(bytes.size() * world_size, '\0');
  MPI_Allgather(bytes.data(), length, MPI_BYTE, all.data(), length, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 0; r < world_size; ++r)
    if (all.compare(r * bytes.size(), bytes.size(), bytes) != 0)
      return false;
  return true;
}

std::string bytes_of(const tensor& t) {
  return {static_cast<const char*>(t.raw_data()), t.byte_size()};
}

/// Every rank's `t`, in rank order.
std::vector<tensor> gathered(const tensor& t) {
  auto all = tensor::zeros(t.dtype(), {static_cast<std::int64_t>(world_size) * t.num_elements()});
  MPI_Allgather(t.raw_data(), static_cast<int>(t.byte_size()), MPI_BYTE, all.raw_data(),
                static_cast<int>(t.byte_size()), MPI_BYTE, MPI_COMM_WORLD);
  std::vector<tensor> by_rank;
  for (int r = 0; r < world_size; ++r) {
    auto part = tensor::zeros(t.dtype(), t.shape());
    std::memcpy(part.raw_data(), static_cast<const char*>(all.raw_data()) + r * t.byte_size(),
                t.byte_size());
    by_rank.push_back(part);
  }
  return by_rank;
}

/// The rank-order reduction of every rank's `t`: what the ring computes.
tensor in_rank_order(reduce_op op, const tensor& t) {
  const auto inputs = gathered(t);
  auto out = tensor::zeros(t.dtype(), t.shape());
  std::vector<float> wide(static_cast<std::size_t>(t.num_elements()));
  lockstep::visit_dtype(t.dtype(), [&]<class T>(T) {
    lockstep::detail::dispatch_op(op, [&](auto op_constant) {
      lockstep::detail::reduce_operands<decltype(op_constant)::value, T>(
        inputs.size(), [&](std::size_t r) { return inputs[r].template data<T>().data(); },
        static_cast<std::size_t>(t.num_elements()), out.template data<T>().data(), wide.data());
    });
  });
  return out;
}

/// Checks that `t` holds expected_value(op, world, first + i) at element i
/// (modulo the dtype's period).
void expect_closed_form(const tensor& t, reduce_op op, std::size_t first, const std::string& what) {
  const auto period = period_of(t.dtype());
  lockstep::visit_dtype(t.dtype(), [&]<class T>(T) {
    const auto data = t.data<T>();
    for (std::size_t i = 0; i < data.size(); ++i) {
      const auto at = (first + i) % period;
      // float16 and bfloat16 are floating types: MEAN does not truncate.
      double want;
      if constexpr (lockstep::is_half_v<T>)
        want = as_double(T(static_cast<float>(expected_value<double>(op, world_size, at))));
      else
        want = as_double(expected_value<T>(op, world_size, at));
      if (as_double(data[i]) != want) {
        expect(false, what + ": element " + std::to_string(i) + " is "
                        + std::to_string(as_double(data[i])) + ", expected "
                        + std::to_string(want));
        return;
      }
    }
  });
}

tensor closed_form_input(dtype type, reduce_op op, std::size_t count) {
  const auto period = period_of(type);
  return make_input(type, static_cast<std::int64_t>(count),
                    [&](std::size_t i) { return input_value(op, world_rank, i % period); });
}

/// Runs `call`; returns the error it threw as a value (kind `unknown` with
/// an empty message when it threw none).
lockstep::detail::error_value error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (...) {
    return lockstep::detail::to_error_value(std::current_exception());
  }
  return {lockstep::detail::error_kind::unknown, "", ""};
}

// -- the collectives' values ---------------------------------------------------------------

void all_reduce_values(mpi_communicator& comm) {
  const std::size_t counts[] = {0, 1, 5, 1000, 70001};
  for (auto op : all_ops)
    for (auto type : all_dtypes)
      for (auto count : counts) {
        auto in = closed_form_input(type, op, count);
        auto out = tensor::zeros(type, {static_cast<std::int64_t>(count)});
        comm.all_reduce(comm.rank(), op, {&in, 1}, {&out, 1}, {});
        expect_closed_form(out, op, 0, describe("all_reduce", op, type, count));
        // In place: the output is the input.
        comm.all_reduce(comm.rank(), op, {&in, 1}, {&in, 1}, {});
        expect_closed_form(in, op, 0, describe("all_reduce in place", op, type, count));
      }
}

void packed_values(mpi_communicator& comm) {
  // Runs of one dtype: [f32 f32 f32] [i64] [f16] [f32], each one collective.
  const std::pair<dtype, std::size_t> layout[] = {{dtype::f32, 3}, {dtype::f32, 0},
                                                  {dtype::f32, 5}, {dtype::i64, 4},
                                                  {dtype::f16, 2}, {dtype::f32, 7}};
  for (auto op : all_ops) {
    std::vector<tensor> inputs, outputs;
    for (auto [type, count] : layout) {
      inputs.push_back(closed_form_input(type, op, count));
      outputs.push_back(tensor::zeros(type, {static_cast<std::int64_t>(count)}));
    }
    const auto before = comm.session().next_seq(comm.rank());
    comm.all_reduce(comm.rank(), op, inputs, outputs, {});
    expect(comm.session().next_seq(comm.rank()) == before + 4,
           "a batch of 4 runs of one dtype is 4 collectives");
    for (std::size_t i = 0; i < outputs.size(); ++i)
      expect_closed_form(outputs[i], op, 0,
                         describe("packed all_reduce, tensor", op, layout[i].first, i));
  }
}

void reduce_scatter_values(mpi_communicator& comm) {
  const std::size_t blocks[] = {0, 1, 5, 3001};
  for (auto op : all_ops)
    for (auto type : all_dtypes)
      for (auto block : blocks) {
        auto in = closed_form_input(type, op, block * world_size);
        auto out = tensor::zeros(type, {static_cast<std::int64_t>(block)});
        comm.reduce_scatter(comm.rank(), op, in, out, {});
        expect_closed_form(out, op, world_rank * block,
                           describe("reduce_scatter", op, type, block));
      }
}

void all_gather_values(mpi_communicator& comm) {
  for (auto type : all_dtypes)
    for (std::size_t count : {0, 1, 5, 4099}) {
      auto in = make_input(type, static_cast<std::int64_t>(count),
                           [&](std::size_t i) { return world_rank * 10 + i % 8; });
      auto out = tensor::zeros(type, {static_cast<std::int64_t>(count * world_size)});
      comm.all_gather(comm.rank(), in, out, {});
      lockstep::visit_dtype(type, [&]<class T>(T) {
        const auto data = out.data<T>();
        for (std::size_t i = 0; i < data.size(); ++i)
          if (as_double(data[i]) != static_cast<double>(i / count * 10 + i % count % 8)) {
            expect(false, describe("all_gather", reduce_op::sum, type, count) + ": element "
                            + std::to_string(i));
            return;
          }
      });
    }
}

void broadcast_values(mpi_communicator& comm) {
  for (int root = 0; root < world_size; ++root) {
    std::vector<tensor> buffers;
    for (auto [type, count] : {std::pair{dtype::f32, 3}, {dtype::i64, 0}, {dtype::f16, 4},
                               {dtype::f64, 2000}})
      buffers.push_back(make_input(type, count, [&](std::size_t i) {
        return world_rank == root ? root * 10 + i % 8 + 1 : 0;
      }));
    comm.broadcast(comm.rank(), root, buffers, {});
    for (auto& buffer : buffers)
      lockstep::visit_dtype(buffer.dtype(), [&]<class T>(T) {
        const auto data = buffer.data<T>();
        for (std::size_t i = 0; i < data.size(); ++i)
          if (as_double(data[i]) != static_cast<double>(root * 10 + i % 8 + 1)) {
            expect(false, "broadcast from " + std::to_string(root) + " of "
                            + std::string(lockstep::to_string(buffer.dtype())) + ": element "
                            + std::to_string(i));
            return;
          }
      });
  }
}

// -- bits ----------------------------------------------------------------------------------

/// Integers: the ring's bits (rank order), for every op. Floats: the same
/// bits on every rank; MIN and MAX exact; how many elements differ from
/// rank order is reported.
void bits(mpi_communicator& comm) {
  for (auto type : {dtype::i32, dtype::i64})
    for (auto op : all_ops)
      for (std::size_t count : {7, 100000}) {
        auto in = tensor::zeros(type, {static_cast<std::int64_t>(count)});
        mixed_values(world_rank * 31 + count).fill(in, op);
        auto out = tensor::zeros(type, {static_cast<std::int64_t>(count)});
        comm.all_reduce(comm.rank(), op, {&in, 1}, {&out, 1}, {});
        expect(bytes_of(out) == bytes_of(in_rank_order(op, in)),
               describe("integer all_reduce not bit-identical to rank order", op, type, count));
        auto block = tensor::zeros(type, {static_cast<std::int64_t>(count)});
        auto whole = tensor::zeros(type, {static_cast<std::int64_t>(count) * world_size});
        mixed_values(world_rank * 37 + count).fill(whole, op);
        comm.reduce_scatter(comm.rank(), op, whole, block, {});
        const auto reference = in_rank_order(op, whole);
        expect(std::memcmp(block.raw_data(),
                           static_cast<const char*>(reference.raw_data())
                             + world_rank * block.byte_size(),
                           block.byte_size())
                 == 0,
               describe("integer reduce_scatter not bit-identical to rank order", op, type,
                        count));
      }
  for (auto type : {dtype::f32, dtype::f64, dtype::f16, dtype::bf16})
    for (auto op : all_ops)
      for (std::size_t count : {7, 1000, 300000}) {
        auto in = tensor::zeros(type, {static_cast<std::int64_t>(count)});
        mixed_values(world_rank * 41 + count).fill(in, op);
        auto out = tensor::zeros(type, {static_cast<std::int64_t>(count)});
        comm.all_reduce(comm.rank(), op, {&in, 1}, {&out, 1}, {});
        expect(same_on_every_rank(bytes_of(out)),
               describe("ranks got different bits from", op, type, count));
        const auto reference = in_rank_order(op, in);
        std::size_t differ = 0;
        lockstep::visit_dtype(type, [&]<class T>(T) {
          const auto a = out.data<T>();
          const auto b = reference.data<T>();
          for (std::size_t i = 0; i < a.size(); ++i)
            differ += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
        });
        if (op == reduce_op::min || op == reduce_op::max)
          expect(differ == 0, describe("min/max differs from rank order", op, type, count));
        else if (world_rank == 0)
          std::cout << "observed: " << describe("all_reduce", op, type, count) << " on "
                    << world_size << " ranks: " << differ << " elements differ from rank order"
                    << std::endl;
      }
}

// -- errors --------------------------------------------------------------------------------

void agreement_errors(mpi_communicator& comm) {
  using lockstep::detail::error_kind;
  // Shapes differ: shape_error, the same words on every rank.
  {
    auto in = tensor::zeros(dtype::f32, {world_rank == 0 ? 4 : 5});
    const auto e = error_of([&] { comm.all_reduce(comm.rank(), reduce_op::sum, {&in, 1}, {&in, 1}, {}); });
    show("mismatched shapes", e);
    expect(e.kind == error_kind::shape_error, "mismatched shapes: " + e.message);
    expect(same_on_every_rank(e.message), "mismatched shapes: the ranks' errors differ");
  }
  // Dtypes differ: dtype_error.
  {
    auto in = tensor::zeros(world_rank == 0 ? dtype::f32 : dtype::i32, {4});
    const auto e = error_of([&] { comm.all_reduce(comm.rank(), reduce_op::sum, {&in, 1}, {&in, 1}, {}); });
    expect(e.kind == error_kind::dtype_error, "mismatched dtypes: " + e.message);
    expect(same_on_every_rank(e.message), "mismatched dtypes: the ranks' errors differ");
  }
  // Different collectives: an all-gather against an all-reduce.
  {
    auto in = tensor::zeros(dtype::f32, {2});
    auto out = tensor::zeros(dtype::f32, {2 * world_size});
    const auto e = error_of([&] {
      if (world_rank == 1)
        comm.all_gather(comm.rank(), in, out, {});
      else
        comm.all_reduce(comm.rank(), reduce_op::sum, {&in, 1}, {&in, 1}, {});
    });
    expect(e.kind != error_kind::unknown && e.message.find("worker 1") != std::string::npos,
           "mismatched collectives: " + e.message);
    expect(same_on_every_rank(e.message), "mismatched collectives: the ranks' errors differ");
  }
  // A failure passed on by the last rank, short and long (the long one
  // does not fit a record: the second gather).
  for (std::size_t length : {40, 3000}) {
    const auto text = "worker " + std::to_string(world_size - 1) + "'s input failed: "
                      + std::string(length, 'x');
    collective_options options;
    if (world_rank == world_size - 1)
      options.failure = std::make_exception_ptr(lockstep::io_error(text));
    auto in = closed_form_input(dtype::f32, reduce_op::sum, 3);
    const auto e = error_of([&] { comm.all_reduce(comm.rank(), reduce_op::sum, {&in, 1}, {&in, 1}, options); });
    expect(e.kind == error_kind::io_error && e.message == text,
           "a failure passed on (" + std::to_string(length) + "): " + e.message);
  }
  // A long tag: every record is long, and the collective still runs.
  {
    collective_options options;
    options.tag = std::string(700, 't');
    auto in = closed_form_input(dtype::i32, reduce_op::max, 9);
    comm.all_reduce(comm.rank(), reduce_op::max, {&in, 1}, {&in, 1}, options);
    expect_closed_form(in, reduce_op::max, 0, "all_reduce with a long tag");
  }
  // The communicator is still usable after all of those.
  auto in = closed_form_input(dtype::f64, reduce_op::sum, 11);
  comm.all_reduce(comm.rank(), reduce_op::sum, {&in, 1}, {&in, 1}, {});
  expect_closed_form(in, reduce_op::sum, 0, "all_reduce after the agreement's errors");
}

void mpi_errors() {
  using lockstep::detail::error_kind;
  mpi_communicator comm;
  auto buffer = tensor::zeros(dtype::f32, {3});
  // A root outside the group: every rank agrees on it, and MPI refuses it.
  const auto e = error_of([&] {
    comm.broadcast(comm.rank(), world_size, {&buffer, 1}, {});
  });
  show("a bad root", e);
  expect(e.kind == error_kind::value_error
           && e.message.find("MPI_Ibcast failed: MPI_ERR_ROOT") != std::string::npos
           && e.message.find("broadcast #1") != std::string::npos,
         "a bad root: " + e.message);
  // MPI's state after an error is undefined: the communicator is broken.
  const auto again = error_of([&] {
    comm.all_reduce(comm.rank(), reduce_op::sum, {&buffer, 1}, {&buffer, 1}, {});
  });
  expect(again == e, "after an MPI error: " + again.message);
  MPI_Barrier(MPI_COMM_WORLD);
}

void break_ends_a_wait() {
  using lockstep::detail::error_kind;
  mpi_communicator comm;
  if (world_rank == 0) {
    // Rank 0 waits in a collective that nobody else issues; another
    // thread breaks the group (as the node does for a lost worker).
    const lockstep::detail::error_value why{error_kind::peer_lost_error,
                                            "worker 1 was lost (test)", ""};
    std::thread breaker([&] {
      std::this_thread::sleep_for(200ms);
      comm.break_group(why);
    });
    auto in = tensor::zeros(dtype::f32, {4});
    collective_options options;
    options.timeout = 600s;
    const auto e = error_of([&] {
      comm.all_reduce(comm.rank(), reduce_op::sum, {&in, 1}, {&in, 1}, options);
    });
    breaker.join();
    expect(e.kind == error_kind::peer_lost_error && e.message == why.message,
           "break_group during a wait: " + e.message);
    auto gathered = tensor::zeros(dtype::f32, {4 * world_size});
    const auto later = error_of([&] { comm.all_gather(comm.rank(), in, gathered, {}); });
    expect(later.kind == error_kind::peer_lost_error && later.message == why.message,
           "a collective after break_group: " + later.message);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

void a_rank_skips_a_collective() {
  using lockstep::detail::error_kind;
  mpi_communicator comm;
  if (world_rank != world_size - 1) {
    auto in = tensor::zeros(dtype::i64, {6});
    collective_options options;
    options.timeout = 300ms;
    const auto start = std::chrono::steady_clock::now();
    const auto e = error_of([&] {
      comm.all_reduce(comm.rank(), reduce_op::sum, {&in, 1}, {&in, 1}, options);
    });
    const auto waited = std::chrono::steady_clock::now() - start;
    show("a rank skips a collective", e);
    expect(e.kind == error_kind::timeout_error
             && e.message.find("all_reduce #1 between the workers (sum int64 [6]) timed out on "
                               "worker " + std::to_string(world_rank) + " after 300 ms")
                  != std::string::npos
             && e.message.find("some worker did not issue it") != std::string::npos,
           "a timeout: " + e.message);
    // The deadline holds; the bound only catches a wait that did not end.
    expect(waited >= 300ms && waited < 30s, "the timeout's wait");
    const auto later = error_of([&] {
      comm.all_reduce(comm.rank(), reduce_op::sum, {&in, 1}, {&in, 1}, options);
    });
    expect(later == e, "a collective after a timeout: " + later.message);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/// The program initialized MPI itself at `level` (and finalizes it): at
/// MPI_THREAD_SERIALIZED the communicator works and leaves MPI to the
/// program; below it, constructing one is a context_error naming the level.
int program_owns_mpi(int level) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, level, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (provided >= MPI_THREAD_SERIALIZED) {
    try {
      mpi_communicator comm;
      auto in = closed_form_input(dtype::f32, reduce_op::sum, 9);
      comm.all_reduce(comm.rank(), reduce_op::sum, {&in, 1}, {&in, 1}, {});
      expect_closed_form(in, reduce_op::sum, 0, "all_reduce in a program that owns MPI");
    } catch (const std::exception& e) {
      expect(false, std::string("threw: ") + e.what());
    }
  } else {
    const auto e = error_of([] { mpi_communicator comm; });
    show("MPI_THREAD_SINGLE", e);
    expect(e.kind == lockstep::detail::error_kind::context_error
             && e.message.find("needs MPI_THREAD_SERIALIZED or above") != std::string::npos,
           "a communicator under MPI_THREAD_SINGLE: " + e.message);
  }
  MPI_Finalize(); // the program's: lockstep must not finalize MPI again at exit
  if (failures == 0)
    std::cout << "ok mpi: rank " << world_rank << " of " << world_size << std::endl;
  return failures == 0 ? 0 : 1;
}

/// All-reduces until LOCKSTEP_FAULT kills this rank or another: each rank
/// prints its pid first ("worker pid P"), so the test can check that none
/// is left; a rank that gets through every collective says "survived".
int killed_mid_collective() {
  mpi_communicator comm;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  lockstep::detail::set_fault_worker(comm.rank(), 0);
  std::cout << "worker pid " << ::getpid() << std::endl;
  MPI_Barrier(MPI_COMM_WORLD);
  auto in = tensor::zeros(dtype::f32, {1 << 18});
  for (int i = 0; i < 100; ++i)
    comm.all_reduce(comm.rank(), reduce_op::sum, {&in, 1}, {&in, 1}, {});
  std::cout << "survived: rank " << world_rank << std::endl;
  return 0;
}

} // namespace

/// Without arguments: every check, lockstep initializing MPI. With
/// "serialized" or "single": the program initializes MPI at that level.
/// With "killed": collectives until LOCKSTEP_FAULT kills a rank.
int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "killed")
    return killed_mid_collective();
  if (argc == 2 && std::string(argv[1]) == "serialized")
    return program_owns_mpi(MPI_THREAD_SERIALIZED);
  if (argc == 2 && std::string(argv[1]) == "single")
    return program_owns_mpi(MPI_THREAD_SINGLE);
  try {
    mpi_communicator comm; // initializes MPI
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    expect(comm.size() == static_cast<std::size_t>(world_size)
             && comm.rank() == static_cast<std::size_t>(world_rank),
           "the duplicate's rank and size");
    int thread_level = 0;
    MPI_Query_thread(&thread_level);
    expect(thread_level == MPI_THREAD_MULTIPLE, "lockstep initializes MPI_THREAD_MULTIPLE");
    all_reduce_values(comm);
    packed_values(comm);
    reduce_scatter_values(comm);
    all_gather_values(comm);
    broadcast_values(comm);
    bits(comm);
    agreement_errors(comm);
    expect(comm.session().dump().find("completed") != std::string::npos,
           "the flight recorder records the collectives");
    // The error paths that break a communicator, each on one of its own.
    mpi_errors();
    break_ends_a_wait();
    a_rank_skips_a_collective();
  } catch (const std::exception& e) {
    expect(false, std::string("threw: ") + e.what());
  }
  if (failures == 0)
    std::cout << "ok mpi: rank " << world_rank << " of " << world_size << std::endl;
  return failures == 0 ? 0 : 1;
}
