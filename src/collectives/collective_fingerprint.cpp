#include "collectives/collective_fingerprint.hpp"

#include "lockstep/error.hpp"

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
  if (!algorithm.empty())
    text += " by " + algorithm;
  return text;
}

std::exception_ptr mismatch_error(std::span<const collective_fingerprint* const> by_rank,
                                  std::string_view rank_noun, std::string_view group,
                                  std::span<const std::size_t> numbers) {
  const auto rank_name = [&](std::size_t r) {
    return std::string(rank_noun) + " " + std::to_string(r < numbers.size() ? numbers[r] : r);
  };
  const auto& first = *by_rank[0];
  std::size_t other = 1;
  const auto differs = [&](auto field) {
    for (other = 1; other < by_rank.size(); ++other)
      if (field(*by_rank[other]) != field(first))
        return true;
    return false;
  };
  const auto plural = std::string(rank_noun) + "s";
  const auto versus = [&](const std::string& what, const std::string& a, const std::string& b) {
    return "cannot reduce across " + plural + ": " + rank_name(0) + " has " + what + " " + a
           + " but " + rank_name(other) + " has " + what + " " + b;
  };
  const auto odd = [&]() -> const collective_fingerprint& { return *by_rank[other]; };
  std::string lead;
  enum { value, dtype, shape } kind = value;
  if (differs([](const auto& f) { return f.op + "/" + f.reduction + "/" + f.tag; })) {
    lead = plural + " issued different collectives";
  } else if (differs([](const auto& f) { return f.batch_tensors; })) {
    lead = "cannot reduce across " + plural + ": " + rank_name(0) + " passed "
           + std::to_string(first.batch_tensors) + " tensors but " + rank_name(other)
           + " passed " + std::to_string(odd().batch_tensors);
  } else if (differs([](const auto& f) { return f.batch_dtypes; })
             || differs([](const auto& f) { return f.dtype; })) {
    lead = first.dtype != odd().dtype
               ? versus("dtype", std::string(lockstep::to_string(first.dtype)),
                        std::string(lockstep::to_string(odd().dtype)))
               : "cannot reduce across " + plural + ": the dtypes of " + rank_name(0)
                     + "'s tensors differ from " + rank_name(other) + "'s";
    kind = dtype;
  } else if (differs([](const auto& f) { return f.batch_shapes; })
             || differs([](const auto& f) { return f.shape; })
             || differs([](const auto& f) { return f.layout; })) {
    lead = first.shape != odd().shape
               ? versus("shape", shape_to_string(first.shape), shape_to_string(odd().shape))
               : "cannot reduce across " + plural + ": the shapes of " + rank_name(0)
                     + "'s tensors differ from " + rank_name(other) + "'s";
    kind = shape;
  } else if (differs([](const auto& f) { return f.algorithm; })) {
    lead = plural + " chose different algorithms: " + rank_name(0) + " "
           + (first.algorithm.empty() ? "none" : first.algorithm) + ", " + rank_name(other) + " "
           + (odd().algorithm.empty() ? "none" : odd().algorithm);
  } else if (differs([](const auto& f) { return f.inline_data; })
             || differs([](const auto& f) { return f.slice; })) {
    lead = plural + " issued the same collective with different chunk sizes, so some "
                    "published their data inline and some did not";
  } else {
    lead = plural + " issued collectives out of order";
  }
  auto message = lead + " (collective mismatch in group '" + std::string(group) + "': ";
  for (std::size_t r = 0; r < by_rank.size(); ++r)
    message += (r == 0 ? "" : ", ") + rank_name(r) + " issued " + by_rank[r]->to_string();
  message += ")";
  if (kind == dtype)
    return std::make_exception_ptr(dtype_error(message));
  if (kind == shape)
    return std::make_exception_ptr(shape_error(message));
  return std::make_exception_ptr(value_error(message));
}

} // namespace lockstep::detail
