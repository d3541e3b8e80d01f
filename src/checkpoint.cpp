// Checkpoints: variables to and from safetensors files (src/safetensors.hpp),
// written with write_file_atomically (src/atomic_file.hpp).

#include "lockstep/checkpoint.hpp"

#include "atomic_file.hpp"
#include "safetensors.hpp"
#include "thread_mode.hpp"
#include "variable_state.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <charconv>
#include <set>
#include <string_view>
#include <system_error>

namespace lockstep {

namespace {

constexpr const char* checkpoint_format = "lockstep-checkpoint-1";

/// The value a checkpoint stores for `var` (see `save`).
tensor saved_value(const variable& var) {
  const auto whole = var.container();
  if (whole.is_sync_on_read() && whole.aggregation() != variable_aggregation::none)
    return whole.value(); // the aggregate
  return whole.primary().value();
}

void check_unique_names(const std::vector<variable>& variables, const char* what) {
  std::set<std::string> names;
  for (const auto& v : variables)
    if (!names.insert(v.name()).second)
      throw value_error(std::string{what} + ": two variables are named '" + v.name()
                        + "'; names in a checkpoint must be unique");
}

checkpoint_info info_of(std::map<std::string, std::string> metadata, const std::string& source) {
  checkpoint_info info;
  if (auto i = metadata.find("step"); i != metadata.end()) {
    std::int64_t step = 0;
    const auto& text = i->second;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), step);
    if (ec != std::errc{} || end != text.data() + text.size())
      throw data_loss_error(source + ": the metadata's step \"" + text + "\" is not an integer");
    info.step = step;
  }
  info.metadata = std::move(metadata);
  return info;
}

/// The step of a file named "ckpt-<digits>.safetensors", else nullopt.
std::optional<std::int64_t> checkpoint_step(const std::string& name) {
  constexpr std::string_view prefix = "ckpt-";
  constexpr std::string_view suffix = ".safetensors";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix)
      || !name.ends_with(suffix))
    return std::nullopt;
  const auto* first = name.data() + prefix.size();
  const auto* last = name.data() + name.size() - suffix.size();
  std::int64_t step = 0;
  const auto [end, error] = std::from_chars(first, last, step);
  if (error != std::errc{} || end != last || *first == '-' || *first == '+')
    return std::nullopt;
  return step;
}

} // namespace

void save(const std::filesystem::path& path, const std::vector<variable>& variables,
          std::int64_t step) {
  check_unique_names(variables, "save");
  std::vector<detail::named_tensor> tensors;
  std::size_t replicas = 1;
  std::string strategy_name = get_strategy().to_string();
  for (const auto& v : variables) {
    v.state().require_cross_replica_context();
    tensors.push_back({v.name(), saved_value(v)});
    replicas = std::max(replicas, v.container().values().size());
    strategy_name = v.strategy().to_string();
  }
  const std::map<std::string, std::string> metadata{
    {"format", checkpoint_format},
    {"step", std::to_string(step)},
    {"strategy", strategy_name},
    {"replicas", std::to_string(replicas)},
  };
  detail::write_file_atomically(path, detail::encode_safetensors(tensors, metadata));
}

checkpoint_info restore(const std::filesystem::path& path, const std::vector<variable>& variables) {
  check_unique_names(variables, "restore");
  const auto source = path.string();
  auto contents = detail::read_safetensors(path);
  // Check everything first: a failed restore leaves every variable as it was.
  std::vector<const tensor*> values;
  for (const auto& v : variables) {
    v.state().require_cross_replica_context();
    const auto found = contents.tensors.find(v.name());
    if (found == contents.tensors.end())
      throw value_error(source + ": no tensor for variable '" + v.name() + "'");
    const auto& t = found->second;
    if (t.dtype() != v.dtype())
      throw dtype_error(source + ": variable '" + v.name() + "' is "
                        + std::string(to_string(v.dtype())) + " but the checkpoint holds "
                        + std::string(to_string(t.dtype())));
    if (t.shape() != v.shape())
      throw shape_error(source + ": variable '" + v.name() + "' has shape "
                        + shape_to_string(v.shape()) + " but the checkpoint holds "
                        + shape_to_string(t.shape()));
    values.push_back(&t);
  }
  auto info = info_of(std::move(contents.metadata), source); // checks the step too
  // A cross-replica assign writes every copy, with TF's rule for SUM
  // sync-on-read variables.
  for (std::size_t i = 0; i < variables.size(); ++i)
    variables[i].container().assign(*values[i]);
  return info;
}

checkpoint_info read_checkpoint_info(const std::filesystem::path& path) {
  return info_of(detail::read_safetensors(path).metadata, path.string());
}

// -- checkpoint_manager ----------------------------------------------------------

checkpoint_manager::checkpoint_manager(std::filesystem::path directory, std::size_t max_to_keep,
                                       lockstep::strategy strategy)
  : directory_(std::move(directory)), max_to_keep_(max_to_keep), strategy_(std::move(strategy)) {
  if (max_to_keep_ == 0)
    throw value_error("checkpoint_manager: max_to_keep must be at least 1");
  std::error_code ec;
  std::filesystem::create_directories(directory_, ec);
  if (ec)
    throw io_error("checkpoint_manager: cannot create " + directory_.string() + ": "
                   + ec.message());
  for (const auto& entry : std::filesystem::directory_iterator{directory_, ec})
    if (detail::is_atomic_write_temporary(entry.path()))
      std::filesystem::remove(entry.path(), ec); // left by a save that crashed
}

std::optional<std::filesystem::path>
checkpoint_manager::save(const std::vector<variable>& variables, std::int64_t step) {
  if (step < 0)
    throw value_error("checkpoint_manager: the step must not be negative, got "
                      + std::to_string(step));
  if (!strategy_.extended().should_checkpoint())
    return std::nullopt;
  const auto path = directory_ / ("ckpt-" + std::to_string(step) + ".safetensors");
  lockstep::save(path, variables, step);
  // Delete the oldest others: a step saved after larger ones (a rerun
  // from an earlier checkpoint) is kept, as TF keeps the latest save.
  auto existing = checkpoints();
  std::erase(existing, path);
  while (existing.size() + 1 > max_to_keep_) {
    std::error_code ec;
    std::filesystem::remove(existing.front(), ec);
    if (ec)
      throw io_error("checkpoint_manager: cannot delete " + existing.front().string() + ": "
                     + ec.message());
    existing.erase(existing.begin());
  }
  return path;
}

std::vector<std::filesystem::path> checkpoint_manager::checkpoints() const {
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator{directory_, ec})
    if (auto step = checkpoint_step(entry.path().filename().string()))
      found.emplace_back(*step, entry.path());
  if (ec)
    throw io_error("checkpoint_manager: cannot list " + directory_.string() + ": " + ec.message());
  std::sort(found.begin(), found.end());
  std::vector<std::filesystem::path> out;
  for (auto& [step, path] : found)
    out.push_back(std::move(path));
  return out;
}

std::optional<std::filesystem::path> checkpoint_manager::latest() const {
  auto all = checkpoints();
  if (all.empty())
    return std::nullopt;
  return all.back();
}

std::optional<checkpoint_info>
checkpoint_manager::restore_latest(const std::vector<variable>& variables) const {
  const auto path = latest();
  if (!path)
    return std::nullopt;
  return restore(*path, variables);
}

} // namespace lockstep
