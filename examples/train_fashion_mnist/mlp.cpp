#include "mlp.hpp"

#include "lockstep/error.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <random>

namespace fashion_mnist {

using lockstep::dtype;
using lockstep::tensor;
using lockstep::value_error;

namespace {

using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using matrix_map = Eigen::Map<matrix>;
using const_matrix_map = Eigen::Map<const matrix>;
using row_vector = Eigen::Matrix<float, 1, Eigen::Dynamic>;
using const_row_map = Eigen::Map<const row_vector>;

const_matrix_map kernel(const mlp_spec& spec, const std::vector<tensor>& p, std::size_t l) {
  return {p[2 * l].data<float>().data(), spec.layers[l], spec.layers[l + 1]};
}

const_row_map bias(const mlp_spec& spec, const std::vector<tensor>& p, std::size_t l) {
  return {p[2 * l + 1].data<float>().data(), spec.layers[l + 1]};
}

void check_parameters(const mlp_spec& spec, const std::vector<tensor>& parameters) {
  if (parameters.size() != 2 * spec.num_layers())
    throw value_error("mlp: expected " + std::to_string(2 * spec.num_layers())
                      + " parameters, got " + std::to_string(parameters.size()));
  for (std::size_t l = 0; l < spec.num_layers(); ++l) {
    const lockstep::shape_t k{spec.layers[l], spec.layers[l + 1]};
    const lockstep::shape_t b{spec.layers[l + 1]};
    if (parameters[2 * l].shape() != k || parameters[2 * l + 1].shape() != b
        || parameters[2 * l].dtype() != dtype::f32 || parameters[2 * l + 1].dtype() != dtype::f32)
      throw value_error("mlp: layer " + std::to_string(l + 1) + " expects float32 kernel "
                        + lockstep::shape_to_string(k) + " and bias "
                        + lockstep::shape_to_string(b) + ", got "
                        + parameters[2 * l].to_string() + " and "
                        + parameters[2 * l + 1].to_string());
  }
}

std::int64_t check_batch(const mlp_spec& spec, const tensor& images, const tensor& labels) {
  if (images.dtype() != dtype::f32 || images.rank() != 2 || images.shape()[1] != spec.inputs())
    throw value_error("mlp: images must be float32 [batch, " + std::to_string(spec.inputs())
                      + "], got " + std::string(lockstep::to_string(images.dtype())) + " "
                      + lockstep::shape_to_string(images.shape()));
  const auto batch = images.shape()[0];
  if (labels.dtype() != dtype::i64 || labels.shape() != lockstep::shape_t{batch})
    throw value_error("mlp: labels must be int64 [" + std::to_string(batch) + "], got "
                      + std::string(lockstep::to_string(labels.dtype())) + " "
                      + lockstep::shape_to_string(labels.shape()));
  for (auto label : labels.data<std::int64_t>())
    if (label < 0 || label >= spec.classes())
      throw value_error("mlp: label " + std::to_string(label) + " is not a class in [0, "
                        + std::to_string(spec.classes()) + ")");
  return batch;
}

/// The activations of every layer for `x`: acts[0] = x, acts[l + 1] =
/// relu(acts[l] W + b) for hidden layers, the logits for the last.
std::vector<matrix> forward(const mlp_spec& spec, const std::vector<tensor>& p,
                            const const_matrix_map& x) {
  std::vector<matrix> acts;
  acts.reserve(spec.num_layers() + 1);
  acts.emplace_back(x);
  for (std::size_t l = 0; l < spec.num_layers(); ++l) {
    matrix z = acts[l] * kernel(spec, p, l);
    z.rowwise() += bias(spec, p, l);
    if (l + 1 < spec.num_layers())
      z = z.cwiseMax(0.0f);
    acts.push_back(std::move(z));
  }
  return acts;
}

} // namespace

std::vector<std::string> parameter_names(const mlp_spec& spec) {
  std::vector<std::string> names;
  for (std::size_t l = 1; l <= spec.num_layers(); ++l) {
    names.push_back("dense_" + std::to_string(l) + "/kernel");
    names.push_back("dense_" + std::to_string(l) + "/bias");
  }
  return names;
}

std::vector<tensor> initial_parameters(const mlp_spec& spec, std::uint64_t seed) {
  std::mt19937_64 generator{seed};
  std::vector<tensor> parameters;
  for (std::size_t l = 0; l < spec.num_layers(); ++l) {
    const auto in = spec.layers[l];
    const auto out = spec.layers[l + 1];
    const auto limit = std::sqrt(6.0 / static_cast<double>(in + out));
    // From the generator's bits directly: std::uniform_real_distribution's
    // output is not specified bit for bit across standard libraries.
    std::vector<float> values(static_cast<std::size_t>(in * out));
    for (auto& v : values) {
      const auto unit = static_cast<double>(generator() >> 11) * 0x1.0p-53; // [0, 1)
      v = static_cast<float>((2 * unit - 1) * limit);
    }
    parameters.push_back(tensor::from(values, {in, out}));
    parameters.push_back(tensor::zeros(dtype::f32, {out}));
  }
  return parameters;
}

batch_gradients loss_and_gradients(const mlp_spec& spec, const std::vector<tensor>& parameters,
                                   const tensor& images, const tensor& labels,
                                   std::int64_t global_batch, bool input_gradient) {
  check_parameters(spec, parameters);
  const auto batch = check_batch(spec, images, labels);
  if (global_batch <= 0)
    throw value_error("mlp: global batch must be positive, got " + std::to_string(global_batch));
  batch_gradients result;
  for (const auto& p : parameters)
    result.gradients.push_back(tensor::zeros(dtype::f32, p.shape()));
  if (input_gradient)
    result.input_gradient = tensor::zeros(dtype::f32, images.shape());
  if (batch == 0)
    return result;

  const const_matrix_map x{images.data<float>().data(), batch, spec.inputs()};
  const auto acts = forward(spec, parameters, x);
  const auto y = labels.data<std::int64_t>();
  // Softmax cross-entropy and its gradient with respect to the logits.
  matrix delta = acts.back();
  const auto scale = 1.0f / static_cast<float>(global_batch);
  double loss = 0;
  for (std::int64_t i = 0; i < batch; ++i) {
    auto row = delta.row(i);
    Eigen::Index predicted = 0;
    const float top = row.maxCoeff(&predicted);
    const auto label = static_cast<Eigen::Index>(y[static_cast<std::size_t>(i)]);
    result.correct += predicted == label ? 1 : 0;
    row = (row.array() - top).exp().matrix();
    const float total = row.sum();
    loss += std::log(static_cast<double>(total)) - (acts.back()(i, label) - top);
    row /= total;
    row(label) -= 1.0f;
  }
  delta *= scale;
  result.loss = loss / static_cast<double>(global_batch);

  for (auto l = spec.num_layers(); l-- > 0;) {
    matrix_map{result.gradients[2 * l].data<float>().data(), spec.layers[l], spec.layers[l + 1]}
        .noalias() = acts[l].transpose() * delta;
    Eigen::Map<row_vector>{result.gradients[2 * l + 1].data<float>().data(), spec.layers[l + 1]}
        = delta.colwise().sum();
    if (l > 0) {
      matrix back = delta * kernel(spec, parameters, l).transpose();
      delta = (acts[l].array() > 0.0f).select(back, 0.0f);
    } else if (input_gradient) {
      matrix_map{result.input_gradient.data<float>().data(), batch, spec.inputs()}.noalias()
          = delta * kernel(spec, parameters, 0).transpose();
    }
  }
  return result;
}

tensor hidden_layer(const tensor& kernel_tensor, const tensor& bias_tensor, const tensor& images) {
  if (kernel_tensor.dtype() != dtype::f32 || kernel_tensor.rank() != 2
      || bias_tensor.dtype() != dtype::f32
      || bias_tensor.shape() != lockstep::shape_t{kernel_tensor.shape()[1]}
      || images.dtype() != dtype::f32 || images.rank() != 2
      || images.shape()[1] != kernel_tensor.shape()[0])
    throw value_error("mlp: a hidden layer needs float32 images [b, in], kernel [in, out] and"
                      " bias [out], got " + images.to_string() + ", " + kernel_tensor.to_string()
                      + " and " + bias_tensor.to_string());
  const auto batch = images.shape()[0];
  const auto in = kernel_tensor.shape()[0];
  const auto out = kernel_tensor.shape()[1];
  auto hidden = tensor::zeros(dtype::f32, {batch, out});
  if (batch == 0)
    return hidden;
  matrix z = const_matrix_map{images.data<float>().data(), batch, in}
             * const_matrix_map{kernel_tensor.data<float>().data(), in, out};
  z.rowwise() += const_row_map{bias_tensor.data<float>().data(), out};
  matrix_map{hidden.data<float>().data(), batch, out} = z.cwiseMax(0.0f);
  return hidden;
}

std::vector<tensor> hidden_layer_gradients(const tensor& images, const tensor& hidden,
                                           const tensor& hidden_gradient) {
  if (images.dtype() != dtype::f32 || images.rank() != 2 || hidden.dtype() != dtype::f32
      || hidden.rank() != 2 || hidden.shape()[0] != images.shape()[0]
      || hidden_gradient.dtype() != dtype::f32 || hidden_gradient.shape() != hidden.shape())
    throw value_error("mlp: a hidden layer's gradients need float32 images [b, in], hidden [b,"
                      " out] and its gradient [b, out], got " + images.to_string() + ", "
                      + hidden.to_string() + " and " + hidden_gradient.to_string());
  const auto batch = images.shape()[0];
  const auto in = images.shape()[1];
  const auto out = hidden.shape()[1];
  std::vector<tensor> gradients{tensor::zeros(dtype::f32, {in, out}),
                                tensor::zeros(dtype::f32, {out})};
  if (batch == 0)
    return gradients;
  const const_matrix_map h{hidden.data<float>().data(), batch, out};
  const matrix delta
      = (h.array() > 0.0f).select(const_matrix_map{hidden_gradient.data<float>().data(), batch, out}, 0.0f);
  const const_matrix_map x{images.data<float>().data(), batch, in};
  matrix_map{gradients[0].data<float>().data(), in, out}.noalias() = x.transpose() * delta;
  Eigen::Map<row_vector>{gradients[1].data<float>().data(), out} = delta.colwise().sum();
  return gradients;
}

std::int64_t count_correct(const mlp_spec& spec, const std::vector<tensor>& parameters,
                           const tensor& images, const tensor& labels, std::int64_t batch) {
  check_parameters(spec, parameters);
  const auto total = check_batch(spec, images, labels);
  const auto y = labels.data<std::int64_t>();
  std::int64_t correct = 0;
  for (std::int64_t start = 0; start < total; start += batch) {
    const auto rows = std::min(batch, total - start);
    const const_matrix_map x{images.data<float>().data() + start * spec.inputs(), rows,
                             spec.inputs()};
    const auto acts = forward(spec, parameters, x);
    for (std::int64_t i = 0; i < rows; ++i) {
      Eigen::Index predicted = 0;
      acts.back().row(i).maxCoeff(&predicted);
      correct += predicted == static_cast<Eigen::Index>(y[static_cast<std::size_t>(start + i)])
                     ? 1 : 0;
    }
  }
  return correct;
}

} // namespace fashion_mnist
