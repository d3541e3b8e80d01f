#pragma once

/// Everything an application needs: `#include "lockstep/lockstep.hpp"`.

#include "lockstep/checkpoint.hpp"
#include "lockstep/config.hpp"
#include "lockstep/context.hpp"
#include "lockstep/cross_device_ops.hpp"
#include "lockstep/dataset.hpp"
#include "lockstep/distributed_dataset.hpp"
#include "lockstep/device_spec.hpp"
#include "lockstep/error.hpp"
#include "lockstep/idx.hpp"
#include "lockstep/mirrored_strategy.hpp"
#include "lockstep/nest.hpp"
#include "lockstep/one_device_strategy.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/replica_context.hpp"
#include "lockstep/runtime_options.hpp"
#include "lockstep/strategy.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/values.hpp"
#include "lockstep/variable.hpp"
#include "lockstep/version.hpp"
