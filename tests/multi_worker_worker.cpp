// One worker of the multi-worker tests (tests/multi_worker_test.cpp starts
// several, each with TF_CONFIG and a token): a multi_worker_mirrored_strategy
// and one scenario, checked against closed forms. Exits 0 when the
// scenario went as expected, 1 (with a message on stderr) otherwise.
//
//   collectives   every reduce op x dtype x size on the replica path and
//                 the cross-replica path, a merge_call, a batch of mixed
//                 dtypes, distributed input (sharded global batches, uneven
//                 per-worker inputs ending together, an empty one and a
//                 failing one), a variable whose initial value is the chief's
//   mismatch      worker 1 passes another shape (a small one, and one for
//                 the segmented ring) and another dtype: every worker gets
//                 the same error naming what each issued, then the group
//                 still works
//   lost kill|stop  the last worker dies (SIGKILL) or freezes (SIGSTOP)
//                 before a collective: every other raises peer_lost_error
//                 naming it
//   lost kill|stop PHASE  the same inside an all-reduce, at PHASE (the
//                 test sets LOCKSTEP_FAULT in the last worker's environment)
//   left          (the test kills the last worker while it connects the
//                 ring: LOCKSTEP_FAULT=ring-connect:kill) the others'
//                 strategy constructors raise peer_lost_error naming who
//                 left, long before the join timeout (300 s here)
//   lost freeze   the last worker freezes (SIGSTOP) before a collective as
//                 with `stop`; once the test continues it (SIGCONT), after
//                 the others dropped it, its collective raises
//                 peer_lost_error saying that this worker was cut off
//   skipped R[,R...]  workers R issue an all_reduce with a 1 s timeout
//                 (communication_options, TF's CommunicationOptions
//                 timeout_seconds), the others do not: each R raises
//                 timeout_error naming that all_reduce as the user counts
//                 it and every other worker as not having reached it, and
//                 prints how long after the timeout it came; the others
//                 issue nothing for 4 s, then their next collective raises
//                 that timeout too
//   refused [WHY] (worker 1 is given other replicas per worker, or
//                 another world size) the join fails with a value_error
//                 that holds WHY (default "replicas per worker"): on every
//                 worker for settings that differ; on worker 1 alone for
//                 another world size, where the coordinator's join times
//                 out naming worker 1
//
// `--slurm-port-base N` before the scenario sets cluster_options'
// slurm_port_base, as a program run under srun would (no variable sets it).
//   checkpoints FOLDER  a checkpoint_manager in FOLDER/shared: a save in
//                 view on every worker once it returns; saves of different
//                 steps refused on every worker, nothing written; every
//                 worker resumes from the same one; folders of their own
//                 (FOLDER/<rank>) refused at the resume, naming each find;
//                 the last worker dies where it would save, and the
//                 chief's file never comes into view
//   devices       TF's names of this worker's devices (/job:worker/replica:0/
//                 task:k/device:CPU:d, the chief's /job:chief/...) everywhere
//   stale         (worker 1 is of an earlier generation, LOCKSTEP_GENERATION)
//                 its handshake is refused; the coordinator's join times
//                 out naming worker 1

#include "lockstep/lockstep.hpp"

#include "reduce_values.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace lockstep;
using namespace std::chrono_literals;

namespace {

std::size_t rank_of(const multi_worker_mirrored_strategy& s) {
  return s.cluster().rank;
}

void require(bool condition, const std::string& what) {
  if (!condition)
    throw std::runtime_error("check failed: " + what);
}

multi_worker_options test_options(std::chrono::milliseconds join = 30s) {
  multi_worker_options o;
  o.timeout = 30s;
  o.join_timeout = join;
  o.peer_timeout = 2s;
  o.heartbeat_interval = 200ms;
  return o;
}

/// Replica `g`'s input for `op`, of `n` elements of `type`.
tensor input(reduce_op op, dtype type, std::size_t g, std::size_t n, const device_spec& device) {
  auto t = tensor::zeros(type, {static_cast<std::int64_t>(n)}, device);
  visit_dtype(type, [&]<class T>(T) {
    auto data = t.data<T>();
    for (std::size_t i = 0; i < n; ++i)
      data[i] = static_cast<T>(input_value(op, g, i));
  });
  return t;
}

void check(const tensor& t, reduce_op op, std::size_t replicas, std::size_t n,
           const std::string& what) {
  require(static_cast<std::size_t>(t.num_elements()) == n, what + ": element count");
  visit_dtype(t.dtype(), [&]<class T>(T) {
    const auto data = t.data<T>();
    for (std::size_t i = 0; i < n; ++i)
      if (data[i] != expected_value<T>(op, replicas, i))
        throw std::runtime_error(what + ": element " + std::to_string(i) + " is "
                                 + std::to_string(static_cast<double>(data[i])) + ", expected "
                                 + std::to_string(static_cast<double>(
                                   expected_value<T>(op, replicas, i))));
  });
}

/// This worker's input function gives `steps_of_this_worker` steps of
/// per-replica batches of 2 rows.
distributed_dataset<tensor> per_worker_input(const multi_worker_mirrored_strategy& s,
                                             std::int64_t steps_of_this_worker) {
  const auto local = static_cast<std::int64_t>(s.extended().worker_devices().size());
  return s.experimental_distribute_datasets_from_function([&](const input_context& ctx) {
    require(ctx.input_pipeline_id() == rank_of(s), "input pipeline id is the worker's rank");
    require(ctx.num_input_pipelines() == s.cluster().world_size, "one input pipeline per worker");
    return dataset<std::int64_t>::range(steps_of_this_worker * local).map([](std::int64_t i) {
      return tensor::from(std::vector<float>{static_cast<float>(i), static_cast<float>(i)});
    });
  });
}

void uneven_input(multi_worker_mirrored_strategy& s) {
  const auto workers = static_cast<std::int64_t>(s.cluster().world_size);
  const auto local = static_cast<std::int64_t>(s.extended().worker_devices().size());
  const auto rank = static_cast<std::int64_t>(rank_of(s));
  auto iterator = per_worker_input(s, rank + 1).make_iterator();
  const auto rows_in_step = [&](const per_replica<tensor>& step) {
    const auto rows = s.run([](replica_context& ctx, const tensor& mine) {
      return ctx.all_reduce(reduce_op::sum, tensor::scalar(static_cast<float>(mine.num_elements())));
    }, step);
    return rows[0].at<float>(0);
  };
  const auto first = iterator.next();
  require(first.has_value(), "every worker has a first step");
  require(rows_in_step(*first) == static_cast<float>(2 * workers * local), "full first step");
  // The rest in one multi-step loop: every worker takes workers - 1 more.
  const auto loop = s.extended().experimental_run_steps_on_iterator(
    [](replica_context&, multi_step_context& ctx, const tensor& mine) {
      ctx.set_last_step_output("rows", tensor::scalar(static_cast<float>(mine.num_elements())),
                               reduce_op::sum);
    },
    iterator, 1000);
  require(static_cast<std::int64_t>(loop.steps()) == workers - 1,
          "every worker takes the longest input's steps: " + std::to_string(loop.steps()));
  if (workers > 1)
    require(std::get<tensor>(loop.last_step_outputs().at("rows")).at<float>(0)
              == 2.0f * static_cast<float>(local),
            "the last step holds the last worker's rows alone");
  require(!iterator.next().has_value(), "the end, on every worker");
  std::int64_t stepped = 0; // range-for reads through the same decision
  for ([[maybe_unused]] const auto& step : per_worker_input(s, rank + 1).make_iterator())
    ++stepped;
  require(stepped == workers, "range-for takes the longest input's steps too");

  if (workers == 1)
    return;
  // Worker 1's input is empty from the start: no step to empty, so every
  // worker gets the error naming it.
  auto stuck = per_worker_input(s, rank == 1 ? 0 : 1).make_iterator();
  try {
    stuck.next();
    throw std::runtime_error("an input that cannot stand in was accepted");
  } catch (const value_error& e) {
    const std::string text = e.what();
    require(text.find("worker(s) 1 ended") != std::string::npos, "names worker 1: " + text);
  }
  // A pipeline that throws on one worker throws on every worker.
  auto failing = s.experimental_distribute_datasets_from_function([&](const input_context& ctx) {
    const auto pipeline = ctx.input_pipeline_id();
    return dataset<std::int64_t>::range(local).map([pipeline](std::int64_t i) {
      if (pipeline == 1)
        throw value_error("worker 1's input cannot be read");
      return tensor::from(std::vector<float>{static_cast<float>(i)});
    });
  });
  try {
    failing.make_iterator().next();
    throw std::runtime_error("a failed input was not reported");
  } catch (const value_error& e) {
    const std::string text = e.what();
    require(text.find("worker 1's input cannot be read") != std::string::npos,
            "every worker gets worker 1's error: " + text);
  }
}

void collectives(multi_worker_mirrored_strategy& s) {
  const auto workers = s.cluster().world_size;
  const auto replicas = s.num_replicas_in_sync();
  const auto local = s.extended().worker_devices().size();
  require(replicas == workers * local, "num_replicas_in_sync counts every worker's replicas");
  require(s.is_chief() == (rank_of(s) == 0), "is_chief");
  require(s.extended().should_checkpoint() == s.is_chief(), "should_checkpoint");
  require(s.extended().experimental_between_graph() == (workers > 1), "between-graph");
  const auto ids = s.run([](replica_context& ctx) { return ctx.replica_id_in_sync_group(); });
  for (std::size_t r = 0; r < local; ++r)
    require(ids[r] == rank_of(s) * local + r, "global replica ids");

  const std::size_t sizes[] = {0, 1, 2 * replicas + 1, 100003};
  for (const auto type : {dtype::f32, dtype::f64, dtype::i32, dtype::i64})
    for (const auto op : {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max,
                          reduce_op::prod})
      for (const auto n : sizes) {
        const auto what = std::string(to_string(op)) + " of " + std::to_string(n) + " "
                          + std::string(to_string(type));
        const auto results = s.run([&](replica_context& ctx) {
          const auto g = ctx.replica_id_in_sync_group();
          return ctx.all_reduce(op, input(op, type, g, n, current_device()));
        });
        for (const auto& t : results.values())
          check(t, op, replicas, n, "replica all_reduce, " + what);
        const auto parts = s.run([&](replica_context& ctx) {
          return input(op, type, ctx.replica_id_in_sync_group(), n, current_device());
        });
        check(s.reduce(op, parts), op, replicas, n, "strategy.reduce, " + what);
      }

  // A merge function runs once per worker; its reduction spans the cluster.
  const auto merged = s.run([&](replica_context& ctx) {
    const auto mine = input(reduce_op::sum, dtype::f32, ctx.replica_id_in_sync_group(), 5,
                            current_device());
    return ctx.merge_call(
      [](strategy& st, const per_replica<tensor>& v) {
        return st.extended().reduce_to(reduce_op::sum, v, v).primary().to(cpu_device(0));
      },
      mine);
  });
  for (const auto& t : merged.values())
    check(t, reduce_op::sum, replicas, 5, "reduce_to in a merge function");

  // A batch of mixed dtypes, packed.
  const auto batches = s.run([&](replica_context& ctx) {
    const auto g = ctx.replica_id_in_sync_group();
    return ctx.all_reduce(reduce_op::sum,
                          std::vector<tensor>{input(reduce_op::sum, dtype::f32, g, 3, current_device()),
                                              input(reduce_op::sum, dtype::i64, g, 4, current_device()),
                                              input(reduce_op::sum, dtype::f32, g, 2, current_device())});
  });
  for (const auto& batch : batches.values()) {
    check(batch.at(0), reduce_op::sum, replicas, 3, "batch tensor 0");
    check(batch.at(1), reduce_op::sum, replicas, 4, "batch tensor 1");
    check(batch.at(2), reduce_op::sum, replicas, 2, "batch tensor 2");
  }

  // A distributed dataset: every worker reads the same global batches and
  // keeps its own replicas' rows in TF's order (the batch rebatched into
  // 2-row slices, sharded among the workers round-robin, each worker's
  // replicas taking its slices in turn: local replica r of worker w takes
  // slice r·W + w); a multi-step loop over it reduces across every worker.
  const auto steps = 3;
  std::vector<float> values(static_cast<std::size_t>(steps) * 2 * replicas);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i);
  const auto data = dataset<tensor>::from_tensor_slices(tensor::from(values))
                      .batch(static_cast<std::int64_t>(2 * replicas), true);
  auto iterator = s.experimental_distribute_dataset(data).make_iterator();
  const auto first = iterator.next();
  require(first.has_value(), "a first step");
  const auto rows = s.run([&](replica_context& ctx, const tensor& mine) {
    const auto g = ctx.replica_id_in_sync_group();
    const auto slice = static_cast<float>((g % local) * workers + g / local);
    return mine.num_elements() == 2 && mine.at<float>(0) == 2 * slice
           && mine.at<float>(1) == 2 * slice + 1;
  }, *first);
  for (const bool ok : rows.values())
    require(ok, "each replica's rows of the first global batch");
  const auto loop = s.extended().experimental_run_steps_on_iterator(
    [](replica_context&, multi_step_context& ctx, const tensor& mine) {
      ctx.set_last_step_output("sum", tensor::scalar(mine.at<float>(0) + mine.at<float>(1)),
                               reduce_op::sum);
    },
    iterator, 5);
  require(loop.steps() == steps - 1, "the loop takes the steps that are left");
  const auto last_sum = std::get<tensor>(loop.last_step_outputs().at("sum")).at<float>(0);
  const auto n = static_cast<float>(2 * replicas);
  require(last_sum == n * n * (steps - 1) + n * (n - 1) / 2,
          "the last step's sum over every worker's replicas");

  uneven_input(s);

  // Every worker asks for another initial value; all get the chief's.
  auto scope = s.scope();
  variable v(tensor::scalar(100.0f + static_cast<float>(rank_of(s))), {.name = "v"});
  for (const auto& copy : v.values())
    require(copy.value().at<float>(0) == 100.0f, "variable initial value from the chief");
  std::printf("ok collectives: %zu workers x %zu replicas\n", workers, local);
}

/// Worker 1 issues another shape on the small path (where the data rides
/// with the fingerprints), a buffer for the segmented ring against the
/// others' small one, and another dtype: each time every worker raises
/// the error of that kind naming what each issued, and prints it (the
/// test compares the lines of all workers); then the group still works.
void mismatch(multi_worker_mirrored_strategy& s) {
  struct odd_one {
    dtype type;
    std::int64_t elements;
    bool dtype_differs;
    std::string words;
  };
  const std::vector<odd_one> cases{
    {dtype::f32, 3, false, "worker 0 has shape [2] but worker 1 has shape [3]"},
    {dtype::f32, 40'003, false, "worker 0 has shape [2] but worker 1 has shape [40003]"},
    {dtype::f64, 2, true, "worker 0 has dtype float32 but worker 1 has dtype float64"}};
  for (const auto& odd : cases) {
    const bool is_odd = rank_of(s) == 1;
    std::string text;
    try {
      s.run([&](replica_context& ctx) {
        return ctx.all_reduce(reduce_op::sum,
                              tensor::zeros(is_odd ? odd.type : dtype::f32,
                                            {is_odd ? odd.elements : 2}, current_device()));
      });
      throw std::runtime_error("a mismatched all_reduce succeeded");
    } catch (const dtype_error& e) {
      require(odd.dtype_differs, std::string("a dtype_error for another shape: ") + e.what());
      text = e.what();
    } catch (const shape_error& e) {
      require(!odd.dtype_differs, std::string("a shape_error for another dtype: ") + e.what());
      text = e.what();
    }
    require(text.find(odd.words) != std::string::npos, "the mismatch names worker 1: " + text);
    std::printf("mismatch error: %s\n", text.c_str());
  }
  const auto results = s.run([&](replica_context& ctx) {
    return ctx.all_reduce(reduce_op::sum, input(reduce_op::sum, dtype::f32,
                                                ctx.replica_id_in_sync_group(), 4,
                                                current_device()));
  });
  check(results[0], reduce_op::sum, s.num_replicas_in_sync(), 4, "all_reduce after a mismatch");
  std::printf("ok mismatch\n");
}

/// The last worker is killed or frozen inside the second all-reduce, at
/// the phase the test set in its LOCKSTEP_FAULT; the others must raise
/// peer_lost_error naming it, in that all-reduce, or in the next one where
/// they got every block before it was lost (during the all-gather or the
/// fan-out, a worker may hold the whole result already).
void lost_in_phase(multi_worker_mirrored_strategy& s, const std::string& phase) {
  const auto sum_of = [&](std::int64_t n) {
    return s.run([&](replica_context& ctx) {
      return ctx.all_reduce(reduce_op::sum, tensor::filled(dtype::f32, {n}, 1.0, current_device()));
    });
  };
  sum_of(1);
  const auto last = s.cluster().world_size - 1;
  const auto big = 100'003; // the ring path, several blocks a segment
  try {
    const auto sums = sum_of(big); // where it completes, with every worker's data
    for (const auto& sum : sums.values())
      require(sum.at<float>(big - 1) == static_cast<float>(s.num_replicas_in_sync()),
              "a completed all_reduce holds every replica's data");
    if (rank_of(s) == last) {
      std::fprintf(stderr, "the fault at %s did not fire\n", phase.c_str());
      std::_Exit(5);
    }
    if (phase == "agree" || phase == "reduce-scatter")
      throw std::runtime_error("an all_reduce that lost worker " + std::to_string(last) + " at "
                               + phase + " succeeded");
    sum_of(big);
    throw std::runtime_error("an all_reduce after the loss succeeded");
  } catch (const peer_lost_error& e) {
    const std::string text = e.what();
    require(text.find("worker " + std::to_string(last)) != std::string::npos,
            "peer_lost_error names worker " + std::to_string(last) + ": " + text);
    std::printf("peer lost at %s: %s\n", phase.c_str(), e.what());
  }
  std::printf("ok lost\n");
}

void lost(multi_worker_mirrored_strategy& s, const std::string& how) {
  const auto sum_once = [&] {
    return s.run([&](replica_context& ctx) {
      return ctx.all_reduce(reduce_op::sum, tensor::scalar(1.0f, current_device()));
    });
  };
  const auto last = s.cluster().world_size - 1;
  if (rank_of(s) == last) {
    sum_once();
    std::fflush(stdout);
    std::raise(how == "kill" ? SIGKILL : SIGSTOP);
    if (how != "freeze")
      std::_Exit(4); // a stopped worker is killed by the test
    // Continued by the test once the others dropped this worker.
    try {
      sum_once();
      throw std::runtime_error("an all_reduce of a worker cut off from the job succeeded");
    } catch (const peer_lost_error& e) {
      const std::string text = e.what();
      const auto self = "this worker (rank " + std::to_string(last) + ") was cut off from the job";
      require(text.find(self) != std::string::npos, "the error says '" + self + "': " + text);
      require(text.find("worker " + std::to_string(last) + " was lost") == std::string::npos,
              "the error does not call this worker lost: " + text);
      std::printf("cut off: %s\n", e.what());
    }
    std::printf("ok cut off\n");
    return;
  }
  try {
    // The last worker dies once its first all-reduce returned, which may
    // be before this worker's did (one waiting in a fan-out, say): then
    // this worker's first raises the loss.
    sum_once();
    sum_once();
    throw std::runtime_error("an all_reduce without worker " + std::to_string(last) + " succeeded");
  } catch (const peer_lost_error& e) {
    const std::string text = e.what();
    require(text.find("worker " + std::to_string(last)) != std::string::npos,
            "peer_lost_error names worker " + std::to_string(last) + ": " + text);
    std::printf("peer lost: %s\n", e.what());
  }
  try {
    sum_once();
    throw std::runtime_error("an all_reduce after the loss succeeded");
  } catch (const peer_lost_error&) {
  }
  std::printf("ok lost\n");
}

/// The workers of `launchers` (ranks separated by commas) issue an
/// all_reduce with a 1 s timeout, after one that every worker issues (so it
/// is the user's second collective between the workers); the others do
/// not. Each launcher must raise timeout_error naming that all_reduce (#2,
/// its op, dtype and shape), a launcher as the worker it timed out on (the
/// first to time out passes its error on), and every other worker as one
/// that did not reach it, and nothing internal (the fan-out broadcast of
/// the replicas, the replica group's numbering). A launcher prints how long
/// after the timeout its error came (docs/reliability.md; never asserted).
/// The others issue nothing for 4 s, then their next collective raises
/// timeout_error naming the same timeout.
void skipped(multi_worker_mirrored_strategy& s, const std::string& launchers) {
  const auto workers = s.cluster().world_size;
  const auto rank = rank_of(s);
  std::vector<bool> launches(workers, false);
  for (std::size_t at = 0; at < launchers.size(); at = launchers.find(',', at) + 1) {
    launches.at(std::stoul(launchers.substr(at))) = true;
    if (launchers.find(',', at) == std::string::npos)
      break;
  }
  const auto sum = [&](std::optional<std::chrono::milliseconds> timeout) {
    return s.run([&](replica_context& ctx) {
      communication_options options;
      options.timeout = timeout;
      return ctx.all_reduce(reduce_op::sum, tensor::filled(dtype::f32, {4}, 1.0, current_device()),
                            options);
    });
  };
  sum(std::nullopt);
  std::vector<std::size_t> others;
  std::string listed;
  for (std::size_t r = 0; r < workers; ++r)
    if (!launches[r]) {
      listed += (others.empty() ? "" : ", ") + std::to_string(r);
      others.push_back(r);
    }
  const auto check_text = [&](const std::string& text) {
    for (const auto& part : {std::string("all_reduce #2 "), std::string("sum float32 [4]"),
                             (others.size() == 1 ? "worker " : "workers ") + listed
                               + " did not reach it"})
      require(text.find(part) != std::string::npos, "the timeout says '" + part + "': " + text);
    bool on_a_launcher = false;
    for (std::size_t r = 0; r < workers; ++r)
      on_a_launcher = on_a_launcher
                      || (launches[r]
                          && text.find("timed out on worker " + std::to_string(r) + " ")
                               != std::string::npos);
    require(on_a_launcher, "the timeout names a worker that issued the all_reduce: " + text);
    for (const auto* internal : {"broadcast", "#1048", "#2097"})
      require(text.find(internal) == std::string::npos,
              std::string("the timeout names nothing internal ('") + internal + "'): " + text);
  };
  if (launches[rank]) {
    const auto start = std::chrono::steady_clock::now();
    try {
      sum(1s);
      throw std::runtime_error("an all_reduce that only workers " + launchers + " issued succeeded");
    } catch (const timeout_error& e) {
      const auto after = std::chrono::steady_clock::now() - start - 1s;
      std::printf("timed out %lld ms after the timeout: %s\n",
                  static_cast<long long>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(after).count()),
                  e.what());
      check_text(e.what());
    }
  } else {
    std::this_thread::sleep_for(4s);
    try {
      sum(std::nullopt);
      throw std::runtime_error("an all_reduce after a timeout succeeded");
    } catch (const timeout_error& e) {
      std::printf("after the timeout: %s\n", e.what());
      check_text(e.what());
    }
  }
  std::printf("ok skipped\n");
}

/// True when `text` holds `part`.
bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void checkpoints(multi_worker_mirrored_strategy& s, const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  const auto rank = rank_of(s);
  const auto last = s.cluster().world_size - 1;
  auto scope = s.scope();
  variable v(tensor::scalar(1.0f), {.name = "v"});
  const auto shared = folder / "shared";
  checkpoint_manager manager(shared, 3, s);
  const auto in_view = [&](int step) {
    return fs::exists(shared / ("ckpt-" + std::to_string(step) + ".safetensors"));
  };

  const auto saved = manager.save({v}, 1);
  require(saved.has_value() == (rank == 0), "the chief alone writes");
  require(in_view(1), "the checkpoint is in view on every worker once save returns");

  try {
    manager.save({v}, rank == last ? 3 : 2);
    throw std::runtime_error("saves of different steps succeeded");
  } catch (const value_error& e) {
    require(has(e.what(), "the workers save different steps")
              && has(e.what(), "worker " + std::to_string(last) + " step 3"),
            std::string("the refusal names each worker's step: ") + e.what());
  }
  require(!in_view(2) && !in_view(3), "a refused save writes nothing");

  v.assign(tensor::scalar(5.0f));
  const auto resumed = manager.restore_latest({v});
  require(resumed && resumed->step == 1 && v.value().at<float>(0) == 1.0f,
          "every worker resumes from step 1");

  checkpoint_manager own(folder / std::to_string(rank), 3, s);
  own.save({v}, 4); // in the chief's folder only
  try {
    own.restore_latest({v});
    throw std::runtime_error("a resume from different folders succeeded");
  } catch (const io_error& e) {
    require(has(e.what(), "find different newest checkpoints") && has(e.what(), "worker 0 has step 4")
              && has(e.what(), "worker 1 has none"),
            std::string("the refusal names what each found: ") + e.what());
  }

  if (rank == last)
    std::raise(SIGKILL); // where it would save
  try {
    manager.save({v}, 5);
    throw std::runtime_error("a save without worker " + std::to_string(last) + " succeeded");
  } catch (const peer_lost_error&) {
  }
  require(!in_view(5), "a save a worker died in never comes into view");
  if (rank == 0)
    for (const auto& entry : fs::directory_iterator(shared))
      require(entry.path().filename() == "ckpt-1.safetensors"
                || entry.path().filename().string().starts_with(".lockstep-writer"),
              "nothing but ckpt-1 and the writer lock is left: " + entry.path().string());
  std::printf("ok checkpoints\n");
}

/// TF's device names: this worker's devices are
/// /job:<task type>/replica:0/task:<index>/device:CPU:<d> (TF_CONFIG's task),
/// in worker_devices, parameter_devices, the values replicas return, a
/// variable's copies, the main thread's tensors and strategy.reduce's
/// result; "/cpu:0" and "/job:localhost/..." resolve to them, another
/// task's devices are remote. Prints the names for the test to compare.
void devices(multi_worker_mirrored_strategy& s) {
  const auto& cluster = s.cluster();
  const auto task = "/job:" + cluster.task_type + "/replica:0/task:"
                    + std::to_string(cluster.task_index);
  const auto local = s.extended().worker_devices().size();
  std::vector<device_spec> expected;
  for (std::size_t d = 0; d < local; ++d)
    expected.push_back(device_spec::parse(task + "/device:CPU:" + std::to_string(d)));
  require(s.extended().worker_devices() == expected, "worker_devices are " + task + "'s");
  require(s.extended().parameter_devices() == expected, "parameter_devices are " + task + "'s");
  const auto made = s.run([](replica_context&) { return tensor::scalar(1.0f); });
  for (std::size_t r = 0; r < local; ++r)
    require(made[r].device() == expected[r], "replica " + std::to_string(r) + "'s value is on "
                                               + expected[r].to_string() + ", not "
                                               + made[r].device().to_string());
  require(cpu_device(0) == expected[0] && current_device() == expected[0]
            && tensor::scalar(1.0f).device() == expected[0],
          "the main thread's device is " + task + "'s CPU:0: " + current_device().to_string());
  require(s.reduce(reduce_op::sum, made).device() == expected[0],
          "strategy.reduce gives a tensor on the current device");
  require(device_spec::parse("/cpu:0").canonical() == expected[0]
            && device_spec::parse("/job:localhost/replica:0/task:0/device:CPU:0").canonical()
                 == expected[0],
          "/cpu:0 and /job:localhost resolve to this task's device");
  require(device_spec::parse(task + "/device:CPU:1").is_local()
            && device_spec::parse("/cpu:1").is_local(),
          "this task's devices are local");
  const auto other = "/job:worker/replica:0/task:" + std::to_string(cluster.task_index + 1)
                     + "/device:CPU:0";
  require(!device_spec::parse(other).is_local(), other + " is remote");
  require(device_spec::parse(other).canonical().to_string() == other,
          "a remote device keeps its name");
  auto scope = s.scope();
  variable v(tensor::scalar(2.0f), {.name = "v"});
  require(v.devices() == expected, "a variable's copies are on this task's devices");
  std::string names;
  for (const auto& d : expected)
    names += (names.empty() ? "" : ", ") + d.to_string();
  std::printf("devices: %s\n", names.c_str());
  // Collectives between the renamed devices still meet.
  const auto sums = s.run([](replica_context& ctx) {
    return ctx.all_reduce(reduce_op::sum, tensor::scalar(1.0f));
  });
  for (const auto& t : sums.values())
    require(t.as_double(0) == static_cast<double>(s.num_replicas_in_sync()),
            "the all_reduce sums every replica");
  std::printf("ok devices\n");
}

/// Five steps of one all_reduce each, for a test of the workers' timelines
/// (LOCKSTEP_TIMELINE set by the test).
void timeline_steps(multi_worker_mirrored_strategy& s) {
  for (int step = 0; step < 5; ++step) {
    const auto sums = s.run([](replica_context& ctx) {
      return ctx.all_reduce(reduce_op::sum, tensor::scalar(1.0f));
    });
    for (const auto& t : sums.values())
      require(t.as_double(0) == static_cast<double>(s.num_replicas_in_sync()),
              "the all_reduce sums every replica");
  }
  std::printf("ok timeline\n");
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  cluster_options cluster;
  if (args.size() >= 2 && args[0] == "--slurm-port-base") {
    cluster.slurm_port_base = static_cast<std::uint16_t>(std::stoul(args[1]));
    args.erase(args.begin(), args.begin() + 2);
  }
  const std::string scenario = args.empty() ? "" : args[0];
  try {
    if (scenario == "refused" || scenario == "stale") {
      const std::string why = args.size() > 1 ? args[1] : "replicas per worker";
      try {
        multi_worker_mirrored_strategy s(cluster_resolver{cluster}, test_options(3s));
      } catch (const authentication_error& e) {
        const std::string text = e.what();
        require(scenario == "stale" && text.find("generation") != std::string::npos,
                "a refused handshake names the generation among its causes: " + text);
        std::printf("refused: %s\n", e.what());
        return 0;
      } catch (const value_error& e) {
        const std::string text = e.what();
        require(text.find(why) != std::string::npos, "refusal names the field: " + text);
        std::printf("refused: %s\n", e.what());
        return 0;
      } catch (const timeout_error& e) {
        const std::string text = e.what();
        require(text.find("worker(s) 1 ") != std::string::npos, "timeout names worker 1: " + text);
        std::printf("join timed out: %s\n", e.what());
        return 0;
      }
      throw std::runtime_error("the rendezvous succeeded");
    }
    if (scenario == "left") {
      try {
        multi_worker_mirrored_strategy s(cluster_resolver{cluster}, test_options(300s));
      } catch (const peer_lost_error& e) {
        const std::string text = e.what();
        require(text.find("left while the workers connected their ring") != std::string::npos,
                "peer_lost_error says who left while the ring connected: " + text);
        std::printf("ok left: %s\n", e.what());
        return 0;
      }
      throw std::runtime_error("the strategy started without the worker that left");
    }
    multi_worker_mirrored_strategy s(cluster_resolver{cluster}, test_options());
    if (scenario == "collectives")
      collectives(s);
    else if (scenario == "mismatch")
      mismatch(s);
    else if (scenario == "timeline")
      timeline_steps(s);
    else if (scenario == "devices")
      devices(s);
    else if (scenario == "checkpoints" && args.size() > 1)
      checkpoints(s, args[1]);
    else if (scenario == "skipped" && args.size() > 1)
      skipped(s, args[1]);
    else if (scenario == "lost" && args.size() > 2)
      lost_in_phase(s, args[2]);
    else if (scenario == "lost" && args.size() > 1)
      lost(s, args[1]);
    else
      throw std::runtime_error("unknown scenario '" + scenario + "'");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker failed: %s\n", e.what());
    return 1;
  }
}
