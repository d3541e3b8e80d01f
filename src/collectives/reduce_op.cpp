#include "lockstep/reduce_op.hpp"

#include "lockstep/error.hpp"

#include <string>

namespace lockstep {

namespace {

constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::mean, reduce_op::min,
                                 reduce_op::max, reduce_op::prod};

std::string upper(std::string_view text) {
  std::string out{text};
  for (auto& c : out)
    c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return out;
}

} // namespace

std::string_view to_string(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
      return "sum";
    case reduce_op::mean:
      return "mean";
    case reduce_op::min:
      return "min";
    case reduce_op::max:
      return "max";
    case reduce_op::prod:
      return "prod";
  }
  return "invalid reduce_op";
}

reduce_op parse_reduce_op(std::string_view text) {
  for (auto op : all_ops)
    if (text == to_string(op) || text == upper(to_string(op)))
      return op;
  throw type_error("Expected `reduce_op` to be a `lockstep::reduce_op`, not: '"
                   + std::string{text} + "'");
}

} // namespace lockstep
