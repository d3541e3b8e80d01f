// The shortest real lockstep program: four replicas on virtual CPU devices
// each compute a local gradient, meet in all_reduce, and the caller reduces
// their results.

#include <lockstep/lockstep.hpp>

#include <csignal>
#include <iostream>

int main() {
  using namespace lockstep;
  // `kill -USR1` writes the flight recorders of the running program
  // (docs/timeline.md; LOCKSTEP_DUMP_SIGNAL picks another signal); watched
  // before any thread starts.
  if (get_runtime_options().dump_signal == 0) {
    auto options = get_runtime_options();
    options.dump_signal = SIGUSR1;
    set_runtime_options(options);
  }
  watch_dump_signal();
  mirrored_strategy strategy{cpu_devices(4)}; // one replica actor per device

  auto per_replica_sum = strategy.run([](replica_context& ctx) {
    const auto id = static_cast<float>(ctx.replica_id_in_sync_group());
    auto gradient = tensor::from<float>({id, 10 * id}); // lives on this replica's device
    return ctx.all_reduce(reduce_op::sum, gradient);    // every replica gets {6, 60}
  });

  auto mean = strategy.reduce(reduce_op::mean, per_replica_sum);
  std::cout << "replicas: " << strategy.num_replicas_in_sync() << "\n"
            << "all_reduce on replica 3: " << per_replica_sum[3] << "\n"
            << "mean over replicas:      " << mean << "\n";
}
