#include "communicators/device_communicator.hpp"

#include "collectives/run_collective.hpp"
#include "devices/device_registry.hpp"

#include "lockstep/error.hpp"

#include <exception>
#include <vector>

namespace lockstep::detail {

namespace {

/// What a rank of an all-reduce publishes.
struct reduce_buffers_of {
  const tensor* input;
  tensor* output;
};

} // namespace

device_communicator::device_communicator(std::size_t ranks, std::string tag)
  : group_(ranks, std::move(tag), "replica") {}

std::string device_communicator::name() const {
  return group_.tag();
}

std::size_t device_communicator::size() const noexcept {
  return group_.size();
}

collective_session& device_communicator::session() noexcept {
  return group_;
}

void device_communicator::all_reduce(std::size_t rank, reduce_op op,
                                     std::span<const tensor> inputs, std::span<tensor> outputs,
                                     const collective_options& options,
                                     std::uint64_t first_seq) {
  if (inputs.size() != outputs.size())
    throw value_error("all_reduce in group '" + group_.tag() + "': "
                      + std::to_string(inputs.size()) + " inputs and "
                      + std::to_string(outputs.size()) + " outputs");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto fingerprint = fingerprint_of(group_, rank, "all_reduce", inputs[i], options,
                                      i == 0 ? first_seq : 0);
    fingerprint.reduction = to_string(op);
    const reduce_buffers_of mine{&inputs[i], &outputs[i]};
    run_collective(group_, rank, fingerprint, &mine, options, [&] {
      if (group_.claim(fingerprint.seq) != 0)
        return; // another rank launches it
      std::vector<tensor> all_inputs;
      std::vector<tensor> all_outputs; // handles: the kernel writes the ranks' buffers
      for (std::size_t r = 0; r < group_.size(); ++r) {
        const auto& theirs = *static_cast<const reduce_buffers_of*>(group_.payload(r));
        all_inputs.push_back(*theirs.input);
        all_outputs.push_back(*theirs.output);
      }
      reduce_buffers(op, all_inputs, all_outputs);
    });
  }
}

void device_communicator::reduce_scatter(std::size_t, reduce_op, const tensor&, tensor&,
                                         const collective_options&) {
  throw device_error("reduce_scatter: the device communicator ('" + group_.tag()
                     + "') has no such collective");
}

void device_communicator::all_gather(std::size_t rank, const tensor& input, tensor& output,
                                     const collective_options& options) {
  check_blocks(group_, rank, "all_gather", input, output, true);
  const auto fingerprint = fingerprint_of(group_, rank, "all_gather", input, options);
  run_collective(group_, rank, fingerprint, &input, options, [&] {
    const auto bytes = input.byte_size();
    for (std::size_t r = 0; r < group_.size(); ++r) {
      const auto& theirs = *static_cast<const tensor*>(group_.payload(r));
      copy_between(kind_of(theirs), kind_of(output))(
        output.device(), output.buffer().data() + r * bytes, theirs.device(),
        theirs.buffer().data(), bytes);
    }
  });
}

void device_communicator::broadcast(std::size_t rank, std::size_t root, std::span<tensor> buffers,
                                    const collective_options& options) {
  const auto fingerprint = broadcast_fingerprint(group_, rank, root, buffers, options);
  run_collective(group_, rank, fingerprint, &buffers, options, [&] {
    if (rank == root)
      return;
    // The fingerprints agreed: the root has as many buffers, alike.
    const auto& from = *static_cast<const std::span<tensor>*>(group_.payload(root));
    for (std::size_t i = 0; i < buffers.size(); ++i)
      copy_into(buffers[i], from[i]);
  });
}

} // namespace lockstep::detail
