// variable: reads and writes with TF's rules for each context (tables in
// docs/variables.md). Which copy a read or write touches:
//   component handle, or update context of copy i   -> that copy alone
//   replica r of the variable's strategy            -> copy r, except that
//       mirrored writes aggregate through merge_call (TF 2.0/2.1: with
//       aggregation NONE they are an error, as a write of one copy would
//       break mirroring)
//   cross-replica or default context                -> every copy (writes,
//       posted in order); the primary or the aggregate (reads)

#include "lockstep/variable.hpp"

#include "replication/thread_mode.hpp"
#include "variables/variable_state.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <cctype>

namespace lockstep {

namespace {

using detail::variable_kind;

enum class write_op { assign, add, sub };

const char* op_name(write_op op) {
  switch (op) {
    case write_op::assign:
      return "assign";
    case write_op::add:
      return "assign_add";
    case write_op::sub:
      return "assign_sub";
  }
  return "write";
}

void apply_op(write_op op, tensor& value, const tensor& x) {
  switch (op) {
    case write_op::assign:
      copy_into(value, x);
      break;
    case write_op::add:
      add_into(value, x);
      break;
    case write_op::sub:
      subtract_into(value, x);
      break;
  }
}

/// The same write of `x` (or of one value per copy) to every copy.
class op_write final : public detail::variable_write {
public:
  op_write(write_op op, std::vector<tensor> values) : op_(op), values_(std::move(values)) {}

  void apply(std::size_t copy, tensor& value) const override {
    apply_op(op_, value, values_.size() == 1 ? values_[0] : values_.at(copy));
  }
  bool reads_value() const noexcept override { return op_ != write_op::assign; }
  bool overwrites() const noexcept override { return op_ == write_op::assign; }

private:
  write_op op_;
  std::vector<tensor> values_;
};

void check_value(const detail::variable_state& s, const tensor& x, const char* what) {
  if (x.dtype() != s.type)
    throw dtype_error("variable '" + s.name + "': " + what + " got a "
                      + std::string(to_string(x.dtype())) + " tensor, but the variable is "
                      + std::string(to_string(s.type)));
  if (x.shape() != s.shape)
    throw shape_error("variable '" + s.name + "': " + what + " got shape "
                      + shape_to_string(x.shape()) + ", but the variable has shape "
                      + shape_to_string(s.shape));
}

/// The replica of `s`'s strategy this thread runs, if any.
std::optional<std::size_t> own_replica(const detail::variable_state& s) {
  const auto* mode = detail::current_mode();
  if (mode == nullptr || mode->replica == nullptr || mode->strategy != s.strategy.get())
    return std::nullopt;
  return mode->replica_index; // copy i is this worker's replica i's
}

reduce_op to_reduce_op(variable_aggregation aggregation) {
  switch (aggregation) {
    case variable_aggregation::sum:
      return reduce_op::sum;
    case variable_aggregation::mean:
      return reduce_op::mean;
    default:
      throw value_error("Could not convert from `lockstep::variable_aggregation` "
                        + std::string(to_string(aggregation))
                        + " to `lockstep::reduce_op` type");
  }
}

/// TF's cross-replica read of a mirrored value: the copy on the current
/// device if there is one, else the primary.
std::size_t closest_copy(const detail::variable_state& s) {
  const auto here = current_device().canonical();
  for (std::size_t i = 0; i < s.devices.size(); ++i)
    if (s.devices[i] == here)
      return i;
  return 0;
}

tensor read_copy(detail::variable_state& s, std::size_t i) {
  return s.copies[i]->read(s.issued.load(), s.deadline());
}

/// A sync-on-read variable's value in cross-replica context.
tensor aggregate(detail::variable_state& s) {
  if (s.aggregation == variable_aggregation::only_first_replica)
    return read_copy(s, 0);
  const auto op = to_reduce_op(s.aggregation);
  if (s.copies.size() == 1)
    return read_copy(s, 0);
  std::vector<tensor> parts;
  for (std::size_t i = 0; i < s.copies.size(); ++i)
    parts.push_back(read_copy(s, i));
  return s.strategy->ops->reduce(op, per_replica<tensor>{std::move(parts)},
                                 current_device())[0];
}

} // namespace

// -- enums --------------------------------------------------------------------

namespace {

std::string upper(std::string_view text) {
  std::string out{text};
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return out;
}

} // namespace

variable_synchronization parse_variable_synchronization(std::string_view text) {
  for (auto mode : {variable_synchronization::automatic, variable_synchronization::on_write,
                    variable_synchronization::on_read, variable_synchronization::none})
    if (upper(text) == to_string(mode))
      return mode;
  throw value_error("Invalid variable synchronization mode: " + std::string{text});
}

variable_aggregation parse_variable_aggregation(std::string_view text) {
  for (auto mode : {variable_aggregation::none, variable_aggregation::sum,
                    variable_aggregation::mean, variable_aggregation::only_first_replica})
    if (upper(text) == to_string(mode))
      return mode;
  throw value_error("Invalid variable aggregation mode: " + std::string{text});
}

std::string canonical_variable_name(std::string_view name) {
  if (name.empty())
    return "Variable";
  // Drops every "_<digits>" that ends a path component.
  std::string out;
  for (std::size_t i = 0; i < name.size();) {
    if (name[i] == '_') {
      auto j = i + 1;
      while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j])))
        ++j;
      if (j > i + 1 && (j == name.size() || name[j] == '/')) {
        i = j;
        continue;
      }
    }
    out += name[i++];
  }
  return out;
}

// -- variable -----------------------------------------------------------------

variable::variable(tensor initial_value, variable_options options)
  : variable(detail::create_variable(std::move(initial_value), std::move(options))) {}

variable::variable(variable_options options)
  : variable(detail::create_variable(std::nullopt, std::move(options))) {}

const std::string& variable::name() const {
  return state_->copy_names[component_.value_or(0)];
}

lockstep::dtype variable::dtype() const {
  return state_->type;
}

const shape_t& variable::shape() const {
  return state_->shape;
}

variable_synchronization variable::synchronization() const {
  return state_->synchronization;
}

variable_aggregation variable::aggregation() const {
  return state_->aggregation;
}

bool variable::trainable() const {
  return state_->trainable;
}

bool variable::is_mirrored() const {
  return state_->kind == variable_kind::mirrored;
}

bool variable::is_sync_on_read() const {
  return state_->kind == variable_kind::sync_on_read;
}

bool variable::is_component() const {
  return component_.has_value();
}

std::vector<device_spec> variable::devices() const {
  if (component_)
    return {state_->devices[*component_]};
  return state_->devices;
}

std::vector<variable> variable::values() const {
  if (component_)
    return {*this};
  std::vector<variable> out;
  for (std::size_t i = 0; i < state_->copies.size(); ++i)
    out.push_back(variable{state_, i});
  return out;
}

variable variable::primary() const {
  return variable{state_, 0};
}

variable variable::container() const {
  return variable{state_, std::nullopt};
}

std::optional<variable>
component_traits<variable>::container(const std::vector<variable>& values) {
  if (values.empty())
    return std::nullopt;
  const auto& state = values[0].state();
  if (state.copies.size() != values.size())
    return std::nullopt;
  for (std::size_t r = 0; r < values.size(); ++r)
    if (&values[r].state() != &state || values[r].component() != r)
      return std::nullopt;
  return values[0].container();
}

tensor variable::value() const {
  auto& s = *state_;
  s.await_posted(); // a posted write that failed on any copy fails this read
  s.check_failures();
  if (auto copy = detail::local_copy(*this))
    return read_copy(s, *copy);
  if (s.kind == variable_kind::sync_on_read)
    return aggregate(s);
  return read_copy(s, closest_copy(s));
}

namespace {

void write(const variable& var, write_op op, const tensor& x) {
  auto& s = var.state();
  check_value(s, x, op_name(op));
  const auto copy = detail::local_copy(var);
  if (copy || op != write_op::assign) // an assign of every copy ends a divergence
    s.check_failures();
  // One copy: a component, an update context, a sync-on-read replica.
  const bool aggregated = own_replica(s) && s.kind == variable_kind::mirrored
                          && !var.is_component() && detail::current_update_context() == nullptr;
  if (copy && !aggregated) {
    s.copies[*copy]->apply_local([&](tensor& value) { apply_op(op, value, x); },
                                 s.issued.load(), s.deadline());
    return;
  }
  if (aggregated) {
    if (s.aggregation == variable_aggregation::none)
      throw value_error("You must specify an aggregation method to update a "
                        "mirrored_variable in replica context. You can do so by "
                        "passing an explicit value for argument `aggregation` to "
                        "the variable's constructor, e.g. variable_aggregation::sum "
                        "(variable '" + s.name + "', " + op_name(op) + ")");
    const auto reduce = s.aggregation == variable_aggregation::only_first_replica
                          ? std::nullopt
                          : std::optional<reduce_op>{to_reduce_op(s.aggregation)};
    s.strategy->merge_write(var.container(), reduce, x,
                            [op](const variable& whole, std::vector<tensor> values) {
                              whole.state().post(
                                std::make_shared<op_write>(op, std::move(values)));
                            });
    return;
  }
  // Cross-replica (or default) context: every copy.
  s.require_cross_replica_context();
  auto value = x;
  if (s.kind == variable_kind::sync_on_read && s.aggregation == variable_aggregation::sum) {
    if (op != write_op::assign)
      throw value_error("sync_on_read_variable does not support `" + std::string{op_name(op)}
                        + "` in cross-replica context when aggregation is set to "
                          "`variable_aggregation::sum` (variable '" + s.name + "')");
    value = x.copy();
    divide_into(value, static_cast<std::int64_t>(s.copies.size()));
  }
  const auto seq = s.post(std::make_shared<op_write>(op, std::vector<tensor>{value}));
  if (s.copies.size() == 1)
    s.check_write(seq);
}

} // namespace

void variable::assign(const tensor& x) const {
  write(*this, write_op::assign, x);
}

void variable::assign_add(const tensor& x) const {
  write(*this, write_op::add, x);
}

void variable::assign_sub(const tensor& x) const {
  write(*this, write_op::sub, x);
}

mirrored_variable::mirrored_variable(const variable& v) : variable(v) {
  if (!v.is_mirrored())
    throw type_error("variable '" + v.name() + "' is not a mirrored_variable");
}

sync_on_read_variable::sync_on_read_variable(const variable& v) : variable(v) {
  if (!v.is_sync_on_read())
    throw type_error("variable '" + v.name() + "' is not a sync_on_read_variable");
}

} // namespace lockstep

namespace lockstep::detail {

std::uint64_t variable_state::post(std::shared_ptr<const detail::variable_write> write) {
  const auto seq = ++issued;
  for (const auto& copy : copies)
    copy->post(seq, write);
  return seq;
}

void variable_state::require_cross_replica_context() const {
  // A variable of the default strategy is a plain tf.Variable: usable in
  // any strategy's scope.
  if (strategy.get() != &default_strategy_state())
    require_cross_replica_or_default_context(*strategy);
}

void variable_state::await_posted() {
  if (current_update_context() != nullptr)
    return;
  const auto seq = issued.load();
  const auto until = deadline();
  for (const auto& copy : copies)
    copy->wait_applied(seq, until);
}

void variable_state::check_failures() {
  // Every write checks: a lock-free look at each copy's flag first, so the
  // caller does not take the copies' locks (which their executors hold
  // while applying writes) on every update.
  for (const auto& copy : copies) {
    if (!copy->has_failure())
      continue;
    auto failure = copy->failure();
    if (!failure)
      continue;
    if (copies.size() == 1) { // one copy cannot diverge: report once
      copy->clear_failure();
      std::rethrow_exception(failure->error);
    }
    if (!failure_reported.exchange(true))
      std::rethrow_exception(failure->error);
    std::string what = "unknown error";
    try {
      std::rethrow_exception(failure->error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    throw value_error("variable '" + name + "': write " + std::to_string(failure->seq)
                      + " failed on " + copy->describe() + " (" + what
                      + "), so its copies may differ; assign it in cross-replica "
                        "context or restore it from a checkpoint");
  }
  if (failure_reported.load(std::memory_order_relaxed))
    failure_reported.store(false);
}

void variable_state::check_write(std::uint64_t seq) {
  const auto until = deadline();
  for (const auto& copy : copies)
    copy->wait_applied(seq, until);
  for (const auto& copy : copies)
    if (auto failure = copy->failure(); failure && failure->seq == seq) {
      failure_reported.store(true);
      if (copies.size() == 1)
        copy->clear_failure();
      std::rethrow_exception(failure->error);
    }
}

std::optional<std::size_t> local_copy(const variable& var) {
  if (var.component())
    return var.component();
  const auto& s = var.state();
  if (const auto* update = current_update_context();
      update != nullptr && update->strategy == s.strategy.get() && update->copy < s.copies.size())
    return update->copy;
  if (auto replica = own_replica(s))
    return s.copies.size() == 1 ? 0 : *replica;
  return std::nullopt;
}

} // namespace lockstep::detail
