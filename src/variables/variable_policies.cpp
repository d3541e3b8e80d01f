// TF's names of the variable policies (lockstep/variable_policies.hpp), in a
// file of their own: the wire format names them (variable_created's
// fields), and a build of the network code alone (tests/fuzz) links them
// without the variables' code.

#include "lockstep/variable_policies.hpp"

namespace lockstep {

std::string_view to_string(variable_synchronization mode) {
  switch (mode) {
    case variable_synchronization::automatic:
      return "AUTO";
    case variable_synchronization::on_write:
      return "ON_WRITE";
    case variable_synchronization::on_read:
      return "ON_READ";
    case variable_synchronization::none:
      return "NONE";
  }
  return "invalid";
}

std::string_view to_string(variable_aggregation mode) {
  switch (mode) {
    case variable_aggregation::none:
      return "NONE";
    case variable_aggregation::sum:
      return "SUM";
    case variable_aggregation::mean:
      return "MEAN";
    case variable_aggregation::only_first_replica:
      return "ONLY_FIRST_REPLICA";
  }
  return "invalid";
}

} // namespace lockstep
