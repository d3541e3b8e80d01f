#include "lockstep/reduce_op.hpp"

#include "lockstep/error.hpp"

#include <string>

namespace lockstep {

std::string_view to_string(reduce_op op) {
  return op == reduce_op::sum ? "sum" : "mean";
}

reduce_op parse_reduce_op(std::string_view text) {
  if (text == "sum" || text == "SUM")
    return reduce_op::sum;
  if (text == "mean" || text == "MEAN")
    return reduce_op::mean;
  throw type_error("Expected `reduce_op` to be a `lockstep::reduce_op`, not: '"
                   + std::string{text} + "'");
}

} // namespace lockstep
