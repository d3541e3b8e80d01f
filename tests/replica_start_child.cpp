// The child process of replica_start_test: starts a mirrored strategy of
// argv[1] replicas, runs one all_reduce if it starts, and reports on stdout.
// Exit status: 0 started and ran; 3 resource_error (its message printed);
// 1 any other error. Returning from main also checks that the actor system
// shuts down after a failed start instead of waiting for threads that never
// ran.

#include "lockstep/lockstep.hpp"

#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: replica_start_child REPLICAS\n";
    return 2;
  }
  try {
    lockstep::mirrored_strategy strategy{lockstep::cpu_devices(std::stoul(argv[1]))};
    auto sums = strategy.run([](lockstep::replica_context& ctx) {
      return ctx.all_reduce(lockstep::reduce_op::sum, lockstep::tensor::from<float>({1.0f}));
    });
    std::cout << "started; all_reduce gave " << sums[0] << "\n";
    return 0;
  } catch (const lockstep::resource_error& e) {
    std::cout << "resource_error: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cout << "other error: " << e.what() << "\n";
    return 1;
  }
}
