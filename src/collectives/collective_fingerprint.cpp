#include "collectives/collective_fingerprint.hpp"

namespace lockstep::detail {

std::size_t collective_fingerprint::bytes() const {
  std::size_t elements = 1;
  for (auto dim : shape)
    elements *= static_cast<std::size_t>(dim);
  return elements * size_of(dtype);
}

std::string collective_fingerprint::to_string() const {
  return op + " #" + std::to_string(seq) + details(false);
}

std::string collective_fingerprint::details(bool with_bytes) const {
  std::string text;
  if (!reduction.empty())
    text += " " + reduction;
  text += " " + std::string(lockstep::to_string(dtype));
  if (tensors != 1 || layout != 0)
    text += " pack of " + std::to_string(tensors) + " tensors";
  text += " " + shape_to_string(shape);
  if (with_bytes)
    text += " " + std::to_string(bytes()) + " B";
  if (!tag.empty())
    text += " tag '" + tag + "'";
  return text;
}

} // namespace lockstep::detail
