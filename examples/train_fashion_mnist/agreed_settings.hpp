#pragma once

// The settings that every worker of a multi-worker run must share: each
// one that changes the numbers the run computes. The rendezvous compares
// them, and a worker started with another --lr, --seed or --epochs fails
// the join on every worker with an error naming the setting and each
// worker's value (lockstep::multi_worker_options::agreed_settings) instead
// of training silently wrong.

#include "trainer.hpp"

#include "lockstep/multi_worker_mirrored_strategy.hpp"

#include <vector>

namespace fashion_mnist {

/// `config`'s settings that change the run's numbers, and the size of the
/// data set, by command-line name.
std::vector<lockstep::agreed_setting> settings_to_agree(const training_config& config,
                                                        const training_data& data);

} // namespace fashion_mnist
