// Checkpoints: variables to and from safetensors files (src/safetensors.hpp),
// written with write_file_atomically (src/atomic_file.hpp), one writer per
// folder (src/folder_lock.hpp).
//
// What makes a file a lockstep checkpoint is its "format" metadata. Such a
// file must be whole and self-consistent: every tensor carries its crc32,
// the header carries one (format 2; format 1 files predate it and are read
// with a warning), the step is a non-negative integer and agrees with a
// `ckpt-<n>.safetensors` name. A safetensors file without "format" (from
// another tool) is read as the container allows: whatever checksums it has
// are verified. One flipped bit cannot turn a checkpoint into such a file:
// the "format" key is covered by the header checksum.

#include "lockstep/checkpoint.hpp"

#include "io/atomic_file.hpp"
#include "checkpoints/checkpoint_agreement.hpp"
#include "runtime/error_text.hpp"
#include "io/folder_lock.hpp"
#include "runtime/log.hpp"
#include "runtime/timeline.hpp"
#include "io/safetensors.hpp"
#include "strategies/public_state.hpp"
#include "replication/thread_mode.hpp"
#include "variables/variable_state.hpp"

#include "lockstep/error.hpp"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <set>
#include <span>
#include <sstream>
#include <string_view>
#include <system_error>

namespace lockstep {

namespace {

using detail::in_quotes;

constexpr std::string_view format_1 = "lockstep-checkpoint-1";

/// The value a checkpoint stores for `var` (see `save`).
/// The value saved for `var`, in host memory (a GPU variable's is copied).
tensor saved_value(const variable& var) {
  const auto whole = var.container();
  auto value = whole.is_sync_on_read() && whole.aggregation() != variable_aggregation::none
                 ? whole.value() // the aggregate
                 : whole.primary().value();
  return value.buffer().host_accessible() ? value : value.to(cpu_device(0));
}

void check_unique_names(const std::vector<variable>& variables, const char* what) {
  std::set<std::string> names;
  for (const auto& v : variables)
    if (!names.insert(v.name()).second)
      throw value_error(std::string{what} + ": two variables are named '" + v.name()
                        + "'; names in a checkpoint must be unique");
}

/// value_error naming `name` and the first NaN or infinity in `values`.
/// (Half types are checked and printed as float.)
template <class T>
void check_finite(std::span<const T> values, const std::string& name) {
  using wide = std::conditional_t<is_half_v<T>, float, T>;
  const auto bad = std::find_if(values.begin(), values.end(),
                                [](T x) { return !std::isfinite(static_cast<wide>(x)); });
  if (bad == values.end())
    return;
  std::ostringstream value;
  value << static_cast<wide>(*bad);
  throw value_error("save: variable '" + name + "' holds " + value.str() + " at element "
                    + std::to_string(bad - values.begin())
                    + "; a checkpoint holds finite values only, so a run resumed from it can "
                      "train (find where the value became non-finite)");
}

void check_finite(const tensor& value, const std::string& name) {
  if (value.dtype() == dtype::f32)
    check_finite(value.data<float>(), name);
  else if (value.dtype() == dtype::f64)
    check_finite(value.data<double>(), name);
  else if (value.dtype() == dtype::f16)
    check_finite(value.data<float16_t>(), name);
  else if (value.dtype() == dtype::bf16)
    check_finite(value.data<bfloat16_t>(), name);
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
  if (*first == '0' && last - first > 1)
    return std::nullopt; // "ckpt-007" is no name save gives: not one of ours
  return step;
}

/// The step `text` of the checkpoint `path`, checked: a non-negative
/// integer, equal to the step in the file's name if it is named by step.
std::int64_t checked_step(const std::string& text, const std::filesystem::path& path) {
  const auto source = path.string();
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), step);
  if (ec != std::errc{} || end != text.data() + text.size())
    throw data_loss_error(source + ": the metadata's step \"" + text + "\" is not an integer");
  if (step < 0)
    throw data_loss_error(source + ": the metadata's step " + text + " is negative");
  if (auto named = checkpoint_step(path.filename().string()); named && *named != step)
    throw data_loss_error(source + ": the metadata's step " + text + " differs from the step "
                          + std::to_string(*named) + " in the file's name");
  return step;
}

/// Applies the checkpoint rules (see the top of this file) to the validated
/// header of `path`; its info.
checkpoint_info checked_info(const detail::safetensors_header& header,
                             const std::filesystem::path& path) {
  const auto source = path.string();
  checkpoint_info info;
  info.metadata = header.metadata;
  const auto format = header.metadata.find("format");
  if (format != header.metadata.end()) {
    if (format->second != checkpoint_format && format->second != format_1)
      throw data_loss_error(source + ": the metadata's format \"" + format->second
                            + "\" is not one this lockstep reads (" + checkpoint_format + ", "
                            + std::string(format_1) + ")");
    if (!header.has_header_checksum) {
      if (format->second != format_1)
        throw data_loss_error(source + ": the header has no checksum (\""
                              + std::string(detail::header_crc32_metadata_key) + "\"), which "
                              + format->second + " requires");
      LOCKSTEP_LOG_WARN("{}: a {} checkpoint, written before lockstep checked its header: its "
                        "header (the step, the checksums) has no checksum, so corruption there "
                        "may go unnoticed; save again to write {}",
                        source, format_1, checkpoint_format);
    }
    for (const auto& entry : header.entries)
      if (!header.checksums.contains(entry.name))
        throw data_loss_error(source + ": tensor \"" + entry.name + "\": the header records no "
                              "checksum (\"" + std::string(detail::crc32_metadata_prefix)
                              + entry.name + "\") for it, which " + format->second
                              + " requires");
    if (!header.metadata.contains("step"))
      throw data_loss_error(source + ": the metadata has no step, which " + format->second
                            + " requires");
  }
  if (auto step = header.metadata.find("step"); step != header.metadata.end())
    info.step = checked_step(step->second, path);
  return info;
}

/// A checkpoint file read whole and checked.
struct loaded_checkpoint {
  checkpoint_info info;
  std::map<std::string, tensor> tensors;
};

loaded_checkpoint load(const std::filesystem::path& path) {
  auto file = detail::safetensors_file::open(path);
  auto info = checked_info(file.header(), path);
  return {std::move(info), file.read_tensors()};
}

/// Writes `checkpoint`'s tensors into `variables`, after checking them all.
void assign_all(const std::filesystem::path& path, const loaded_checkpoint& checkpoint,
                const std::vector<variable>& variables) {
  const auto source = path.string();
  std::vector<const tensor*> values;
  for (const auto& v : variables) {
    const auto found = checkpoint.tensors.find(v.name());
    if (found == checkpoint.tensors.end())
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
  // A cross-replica assign writes every copy, with TF's rule for SUM
  // sync-on-read variables.
  for (std::size_t i = 0; i < variables.size(); ++i)
    variables[i].container().assign(*values[i]);
}

void require_cross_replica(const std::vector<variable>& variables) {
  for (const auto& v : variables)
    v.state().require_cross_replica_context();
}

/// Runs `read`; the message of an error that makes the file unreadable
/// (damaged, not a regular file, a dtype lockstep does not read), nullopt
/// when it read. Any other error, such as resource_error for memory that
/// ran out, passes through: it says nothing about the file.
template <class F>
std::optional<std::string> unreadable_reason(F&& read) {
  try {
    read();
    return std::nullopt;
  } catch (const data_loss_error& e) {
    return e.what();
  } catch (const io_error& e) {
    return e.what();
  } catch (const dtype_error& e) {
    return e.what(); // a dtype lockstep does not read
  }
}

/// A digest of a checkpoint's contents (names and bytes), which workers
/// compare before resuming.
std::uint32_t digest_of(const loaded_checkpoint& checkpoint) {
  uLong crc = ::crc32(0, nullptr, 0);
  for (const auto& [name, value] : checkpoint.tensors) {
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(name.data()), static_cast<uInt>(name.size()));
    const auto* bytes = static_cast<const Bytef*>(value.raw_data());
    for (std::size_t done = 0, size = value.byte_size(); done < size;) {
      const auto part = std::min<std::size_t>(size - done, 1u << 30);
      crc = ::crc32(crc, bytes + done, static_cast<uInt>(part));
      done += part;
    }
  }
  return static_cast<std::uint32_t>(crc);
}

/// The workers of `strategy` when it has several, for the agreements.
std::optional<detail::worker_agreement> workers_of(const lockstep::strategy& strategy) {
  const auto& state = detail::strategy_access::state(strategy);
  auto sum = state.sum_over_workers();
  if (!sum)
    return std::nullopt;
  return detail::worker_agreement{std::move(sum), state.topology.workers,
                                  state.topology.worker_index};
}

/// lockstep::save, with `before_rename` run when the file is complete but
/// not yet in view.
void save_checkpoint(const std::filesystem::path& path, const std::vector<variable>& variables,
                     std::int64_t step, const std::function<void()>& before_rename) {
  check_unique_names(variables, "save");
  if (step < 0)
    throw value_error("save: the step must not be negative, got " + std::to_string(step));
  if (auto named = checkpoint_step(path.filename().string()); named && *named != step)
    throw value_error("save: " + in_quotes(path) + " is named for step " + std::to_string(*named)
                      + ", not the step " + std::to_string(step) + " being saved");
  std::vector<detail::named_tensor> tensors;
  std::size_t replicas = 1;
  std::string strategy_name = get_strategy().to_string();
  for (const auto& v : variables) {
    v.state().require_cross_replica_context();
    tensors.push_back({v.name(), saved_value(v)});
    check_finite(tensors.back().value, v.name());
    replicas = std::max(replicas, v.container().values().size());
    strategy_name = v.strategy().to_string();
  }
  const std::map<std::string, std::string> metadata{
    {"format", checkpoint_format},
    {"step", std::to_string(step)},
    {"strategy", strategy_name},
    {"replicas", std::to_string(replicas)},
  };
  detail::write_file_atomically(path, detail::encode_safetensors(tensors, metadata),
                                before_rename);
}

} // namespace

void save(const std::filesystem::path& path, const std::vector<variable>& variables,
          std::int64_t step) {
  save_checkpoint(path, variables, step, {});
}

checkpoint_info restore(const std::filesystem::path& path, const std::vector<variable>& variables) {
  check_unique_names(variables, "restore");
  require_cross_replica(variables);
  // Check everything first: a failed restore leaves every variable as it was.
  auto checkpoint = load(path);
  assign_all(path, checkpoint, variables);
  return std::move(checkpoint.info);
}

checkpoint_info read_checkpoint_info(const std::filesystem::path& path) {
  auto file = detail::safetensors_file::open(path);
  auto info = checked_info(file.header(), path);
  file.verify_tensors();
  return info;
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
  detail::remove_abandoned_temporaries(directory_); // left by saves that crashed
}

checkpoint_manager::checkpoint_manager(checkpoint_manager&&) noexcept = default;
checkpoint_manager& checkpoint_manager::operator=(checkpoint_manager&&) noexcept = default;
checkpoint_manager::~checkpoint_manager() = default;

std::optional<std::filesystem::path>
checkpoint_manager::save(const std::vector<variable>& variables, std::int64_t step) {
  const detail::timeline_scope span{
    detail::timeline_on() ? detail::timeline_track(detail::track_kind::process, 0) : 0,
    "checkpoint save", "checkpoint"};
  if (step < 0)
    throw value_error("checkpoint_manager: the step must not be negative, got "
                      + std::to_string(step));
  // Several workers: a two-phase commit (checkpoint_agreement.hpp). The
  // chief's file comes into view only once every worker has said it saves
  // this step, so a worker lost during the save leaves the previous
  // checkpoints the newest; every worker returns once it is in view.
  const auto workers = workers_of(strategy_);
  const auto agree = [&](std::exception_ptr failure) {
    if (workers)
      detail::agree_on_saved_step(*workers, step, std::move(failure));
  };
  const auto confirm = [&](std::exception_ptr failure) {
    if (workers)
      detail::confirm_saved_step(*workers, std::move(failure));
  };
  if (!strategy_.extended().should_checkpoint()) {
    agree(nullptr);
    confirm(nullptr);
    return std::nullopt;
  }
  const auto path = directory_ / ("ckpt-" + std::to_string(step) + ".safetensors");
  enum class stage { writing, agreeing, agreed } at = stage::writing;
  try {
    if (!writer_lock_)
      writer_lock_ = std::make_unique<detail::folder_lock>(
        detail::folder_lock::acquire(directory_, "checkpoint_manager"));
    save_checkpoint(path, variables, step, [&] {
      at = stage::agreeing;
      agree(nullptr);
      at = stage::agreed;
    });
    remove_beyond_max_to_keep(path);
  } catch (...) {
    // Every worker throws the chief's error, in the phase it failed in (a
    // failed agreement has already thrown on every worker).
    if (at == stage::writing)
      agree(std::current_exception());
    else if (at == stage::agreed)
      confirm(std::current_exception());
    throw;
  }
  confirm(nullptr);
  return path;
}

void checkpoint_manager::remove_beyond_max_to_keep(const std::filesystem::path& kept) const {
  // Delete the oldest others: a step saved after larger ones (a rerun
  // from an earlier checkpoint) is kept, as TF keeps the latest save.
  auto existing = checkpoints();
  std::erase(existing, kept);
  while (existing.size() + 1 > max_to_keep_) {
    std::error_code ec;
    std::filesystem::remove(existing.front(), ec);
    if (ec)
      throw io_error("checkpoint_manager: cannot delete " + existing.front().string() + ": "
                     + ec.message());
    existing.erase(existing.begin());
  }
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

std::optional<std::filesystem::path> checkpoint_manager::newest_readable() const {
  auto all = checkpoints();
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (!unreadable_reason([&] { read_checkpoint_info(*it); }))
      return *it;
  return std::nullopt;
}

std::optional<checkpoint_info>
checkpoint_manager::restore_latest(const std::vector<variable>& variables) const {
  const detail::timeline_scope span{
    detail::timeline_on() ? detail::timeline_track(detail::track_kind::process, 0) : 0,
    "checkpoint restore", "checkpoint"};
  check_unique_names(variables, "restore");
  require_cross_replica(variables);
  const auto path = latest();
  loaded_checkpoint checkpoint;
  const auto load_newest = [&] {
    const auto reason = unreadable_reason([&] { checkpoint = load(*path); });
    if (!reason)
      return;
    auto message = "checkpoint_manager: the newest checkpoint " + in_quotes(*path)
                   + " is unreadable (" + *reason + "); ";
    if (auto readable = newest_readable())
      message += "the newest readable checkpoint is " + in_quotes(*readable)
                 + "; restore it explicitly to resume from there, or remove the unreadable one";
    else
      message += "no checkpoint in " + in_quotes(directory_) + " is readable";
    throw data_loss_error(message);
  };
  const auto workers = workers_of(strategy_);
  std::exception_ptr failure;
  try {
    if (path)
      load_newest();
  } catch (...) {
    if (!workers)
      throw;
    failure = std::current_exception(); // every worker throws it, below
  }
  // Several workers resume together from one checkpoint or none.
  if (workers) {
    std::optional<detail::found_checkpoint> found;
    if (path && !failure)
      found = detail::found_checkpoint{checkpoint.info.step.value_or(-1), digest_of(checkpoint)};
    detail::agree_on_resume(*workers, found, failure, directory_);
  }
  if (!path)
    return std::nullopt;
  assign_all(*path, checkpoint, variables);
  return std::move(checkpoint.info);
}

} // namespace lockstep
