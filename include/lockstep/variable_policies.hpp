#pragma once

// How a distributed variable's copies agree and how replicas' writes
// combine (TF's tf.VariableSynchronization and tf.VariableAggregation).
// Vocabulary (docs/design.md): the variables use them, and so does the
// wire message that announces a variable across workers.

#include <cstdint>
#include <string_view>

namespace lockstep {

/// When the copies of a distributed variable agree (TF's
/// tf.VariableSynchronization). `automatic` and `on_write` make a mirrored
/// variable, `on_read` a sync-on-read variable; `none` is not supported by
/// mirrored strategies.
enum class variable_synchronization : std::uint8_t { automatic, on_write, on_read, none };

/// How writes from several replicas combine (TF's tf.VariableAggregation).
enum class variable_aggregation : std::uint8_t { none, sum, mean, only_first_replica };

/// TF's names: "AUTO", "ON_WRITE", "ON_READ", "NONE".
std::string_view to_string(variable_synchronization mode);
/// TF's names: "NONE", "SUM", "MEAN", "ONLY_FIRST_REPLICA".
std::string_view to_string(variable_aggregation mode);

/// Parses TF's names (any case); value_error for anything else.
variable_synchronization parse_variable_synchronization(std::string_view text);
variable_aggregation parse_variable_aggregation(std::string_view text);

} // namespace lockstep
