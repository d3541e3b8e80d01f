// Distributed variables against TF's rules (TF 2.0/2.1): the tables of
// MirroredVariable and SyncOnReadVariable writes and reads in replica,
// cross-replica and update context, naming, creation inside replica
// functions, option validation, the variable methods of strategy_extended,
// the canonical training step, and failed posted updates. Every expected
// value is closed-form: integer-valued floats, or sums of them scaled by a
// power of two, so float results are exact.

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

using namespace lockstep;
using namespace std::chrono_literals;

namespace {

using synchronization = variable_synchronization;
using aggregation = variable_aggregation;

std::size_t id_of(replica_context& ctx) {
  return ctx.replica_id_in_sync_group();
}

tensor f32(double x) {
  return tensor::scalar(static_cast<float>(x));
}

double scalar_of(const tensor& t) {
  return t.as_double(0);
}

/// Each copy's value (first element), read through its component handle.
std::vector<double> copy_values(const variable& v) {
  std::vector<double> out;
  for (const auto& c : v.values())
    out.push_back(scalar_of(c.value()));
  return out;
}

std::vector<double> repeated(double x, std::size_t n) {
  return std::vector<double>(n, x);
}

variable_options options(std::string name, synchronization s, aggregation a) {
  return {.name = std::move(name), .synchronization = s, .aggregation = a};
}

/// Writes `values[i]` into copy i alone (through the component handles),
/// so that reads show which copy they see.
void set_copies(const variable& v, const std::vector<double>& values) {
  const auto copies = v.values();
  REQUIRE(copies.size() == values.size());
  for (std::size_t i = 0; i < copies.size(); ++i)
    copies[i].assign(tensor::filled(v.dtype(), v.shape(), values[i]));
}

} // namespace

// -- MirroredVariable -----------------------------------------------------------

TEST_CASE("mirrored MEAN in replica context: replica r assigns r, then adds and subtracts r") {
  mirrored_strategy s{cpu_devices(2)};
  variable v = [&] {
    auto scope = s.scope();
    return variable{f32(1.0), options("v", synchronization::on_write, aggregation::mean)};
  }();
  auto reads = s.run([&](replica_context& ctx) {
    const auto r = static_cast<double>(id_of(ctx));
    std::vector<double> seen;
    v.assign(f32(r)); // mean(0, 1) = 0.5
    seen.push_back(scalar_of(v.value()));
    v.assign_add(f32(r)); // + 0.5
    seen.push_back(scalar_of(v.value()));
    v.assign_sub(f32(4 * r)); // - 2
    seen.push_back(scalar_of(v.value()));
    return seen;
  });
  for (std::size_t r = 0; r < 2; ++r)
    CHECK(reads[r] == std::vector<double>{0.5, 1.0, -1.0});
  CHECK(copy_values(v) == repeated(-1.0, 2));
}

TEST_CASE("mirrored MEAN in replica context with double and int32 variables") {
  mirrored_strategy s{cpu_devices(4)};
  auto scope = s.scope();
  variable d{tensor::scalar(0.0), options("d", synchronization::automatic, aggregation::mean)};
  variable i{tensor::scalar(std::int32_t{100}),
             options("i", synchronization::on_write, aggregation::mean)};
  s.run([&](replica_context& ctx) {
    const auto r = id_of(ctx);
    d.assign(tensor::scalar(3.0 * static_cast<double>(r))); // (0+3+6+9)/4
    i.assign_add(tensor::scalar(static_cast<std::int32_t>(r))); // (0+1+2+3)/4 truncates to 1
  });
  CHECK(copy_values(d) == repeated(4.5, 4));
  CHECK(copy_values(i) == repeated(101, 4));
  CHECK(i.values()[3].value().dtype() == dtype::i32);
}

TEST_CASE("mirrored SUM in replica context sums the replicas' values") {
  mirrored_strategy s{cpu_devices(3)};
  auto scope = s.scope();
  variable f{f32(1.0), options("f", synchronization::on_write, aggregation::sum)};
  variable i{tensor::scalar(std::int32_t{0}),
             options("i", synchronization::on_write, aggregation::sum)};
  auto reads = s.run([&](replica_context& ctx) {
    const auto r = id_of(ctx);
    f.assign_add(f32(static_cast<double>(r + 1))); // 1 + 6
    const double after_add = scalar_of(f.value());
    f.assign_sub(f32(1.0)); // 7 - 3
    i.assign(tensor::scalar(static_cast<std::int32_t>(10 * (r + 1)))); // 60
    return std::vector<double>{after_add, scalar_of(f.value()), scalar_of(i.value())};
  });
  for (std::size_t r = 0; r < 3; ++r)
    CHECK(reads[r] == std::vector<double>{7.0, 4.0, 60.0});
  CHECK(copy_values(f) == repeated(4.0, 3));
  CHECK(copy_values(i) == repeated(60.0, 3));
}

TEST_CASE("mirrored ONLY_FIRST_REPLICA in replica context takes replica 0's value") {
  mirrored_strategy s{cpu_devices(3)};
  auto scope = s.scope();
  variable v{tensor::scalar(std::int64_t{5}),
             options("v", synchronization::on_write, aggregation::only_first_replica)};
  s.run([&](replica_context& ctx) {
    const auto r = static_cast<std::int64_t>(id_of(ctx));
    v.assign(tensor::scalar(10 + r)); // 10
    v.assign_add(tensor::scalar(r + 1)); // + 1
    v.assign_sub(tensor::scalar(3 * r + 4)); // - 4
  });
  CHECK(copy_values(v) == repeated(7.0, 3));
}

TEST_CASE("mirrored NONE in replica context: every write is an error with TF's text") {
  for (int n : {1, 2}) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto scope = s.scope();
    variable v{f32(1.0), {.name = "v"}};
    CHECK(v.aggregation() == aggregation::none);
    const std::string expected = "You must specify an aggregation method to update a "
                                 "mirrored_variable in replica context.";
    CHECK(error_of<value_error>([&] { s.run([&] { v.assign(f32(2.0)); }); }).starts_with(expected));
    CHECK(error_of<value_error>([&] { s.run([&] { v.assign_add(f32(2.0)); }); })
            .starts_with(expected));
    CHECK(error_of<value_error>([&] { s.run([&] { v.assign_sub(f32(2.0)); }); })
            .starts_with(expected));
    CHECK(copy_values(v) == repeated(1.0, static_cast<std::size_t>(n)));
  }
}

TEST_CASE("a replica-context write of one tensor shared by every replica is non-distributed") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  variable sum{f32(1.0), options("sum", synchronization::on_write, aggregation::sum)};
  variable mean{f32(1.0), options("mean", synchronization::on_write, aggregation::mean)};
  variable first{f32(1.0),
                 options("first", synchronization::on_write, aggregation::only_first_replica)};
  const auto shared = f32(5.0); // the same object in every replica
  CHECK_THROWS_WITH_AS(s.run([&] { sum.assign(shared); }),
                       doctest::Contains("A non-distributed value tensor<float32>[]{5}"),
                       value_error);
  CHECK(error_of<value_error>([&] { s.run([&] { sum.assign_add(shared); }); })
          .ends_with("cannot be reduced with the given reduce op sum."));
  CHECK(copy_values(sum) == repeated(1.0, 2));
  // MEAN and ONLY_FIRST_REPLICA pass the one value through.
  s.run([&] {
    mean.assign_add(shared);
    first.assign(shared);
  });
  CHECK(copy_values(mean) == repeated(6.0, 2));
  CHECK(copy_values(first) == repeated(5.0, 2));
}

TEST_CASE("with one replica a shared tensor may be summed: it is broadcast") {
  mirrored_strategy s{cpu_devices(1)};
  auto scope = s.scope();
  variable sum{f32(1.0), options("sum", synchronization::on_write, aggregation::sum)};
  const auto shared = f32(5.0);
  s.run([&] { sum.assign_add(shared); });
  CHECK(copy_values(sum) == std::vector<double>{6.0});
}

TEST_CASE("mirrored writes in cross-replica context apply to every copy") {
  mirrored_strategy s{cpu_devices(2)};
  variable v = [&] {
    auto scope = s.scope();
    return variable{f32(1.0), {.name = "v"}};
  }();
  {
    auto scope = s.scope();
    v.assign_add(f32(6.0));
    CHECK(copy_values(v) == repeated(7.0, 2));
    v.assign_sub(f32(2.0));
    CHECK(copy_values(v) == repeated(5.0, 2));
    v.assign(f32(-3.0));
    CHECK(copy_values(v) == repeated(-3.0, 2));
    CHECK(scalar_of(v.value()) == -3.0);
  }
  // The default context writes the same way (TF enters the variable's strategy).
  v.assign_add(f32(10.0));
  CHECK(copy_values(v) == repeated(7.0, 2));

  auto scope = s.scope();
  variable i{tensor::from<std::int64_t>({1, 2, 3}), {.name = "i"}};
  i.assign_add(tensor::from<std::int64_t>({10, 20, 30}));
  for (const auto& c : i.values())
    CHECK(c.value() == tensor::from<std::int64_t>({11, 22, 33}));
}

TEST_CASE("mirrored reads: replica r sees copy r; cross-replica sees the closest copy") {
  mirrored_strategy s{cpu_devices(3)};
  auto scope = s.scope();
  variable v{f32(0.0), {.name = "v"}};
  set_copies(v, {10.0, 11.0, 12.0}); // copies diverge only to show which one a read sees
  auto reads = s.run([&] { return scalar_of(v.value()); });
  CHECK(reads.values() == std::vector<double>{10.0, 11.0, 12.0});
  CHECK(scalar_of(v.value()) == 10.0); // current device CPU:0
  {
    device_scope on{cpu_device(2)};
    CHECK(scalar_of(v.value()) == 12.0);
    CHECK(scalar_of(v.read_value()) == 12.0);
  }
  {
    device_scope on{cpu_device(5)}; // no copy there: the primary
    CHECK(scalar_of(v.value()) == 10.0);
  }
  CHECK(scalar_of(v.primary().value()) == 10.0);
}

TEST_CASE("mirrored writes inside update() touch that copy only") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  auto& ext = s.extended();
  variable v{f32(1.0), {.name = "v"}};

  SUBCASE("through the component handle") {
    ext.update(v, [](variable& c) { c.assign_add(f32(2.0)); });
    CHECK(copy_values(v) == repeated(3.0, 2));
    ext.update(v, [](variable& c) { c.assign_sub(f32(1.0)); });
    CHECK(copy_values(v) == repeated(2.0, 2));
    ext.update(v, [](variable& c) {
      CHECK(c.is_component());
      c.assign(f32(c.devices()[0] == cpu_device(0) ? 7.0 : 8.0));
    });
    CHECK(copy_values(v) == std::vector<double>{7.0, 8.0});
  }
  SUBCASE("through the whole variable: the update context picks the copy") {
    ext.update(v, [&](variable&) { v.assign_add(f32(5.0)); }); // once per copy, not 2x
    CHECK(copy_values(v) == repeated(6.0, 2));
    auto seen = ext.update(ungrouped, v, [&](variable&) {
      v.assign_sub(f32(1.0));
      return scalar_of(v.value());
    });
    CHECK(seen == std::vector<double>{5.0, 5.0});
    CHECK(copy_values(v) == repeated(5.0, 2));
  }
  SUBCASE("another variable: a colocated slot is written on the same copy") {
    variable slot = [&] {
      auto colocated = ext.colocate_vars_with(v);
      return variable{f32(0.0), {.name = "v/slot"}};
    }();
    CHECK(slot.devices() == v.devices());
    set_copies(v, {3.0, 4.0});
    ext.update(v, [&](tensor& x) {
      slot.assign_add(x); // slot copy i += v copy i
      add_into(x, f32(100.0));
    });
    ext.synchronize(); // the update was posted to v: wait before reading slot
    CHECK(copy_values(slot) == std::vector<double>{3.0, 4.0});
    CHECK(copy_values(v) == std::vector<double>{103.0, 104.0});
    // A read of the other variable inside the update sees that copy too.
    auto seen = ext.update(v, [&](tensor&) { return scalar_of(slot.value()); });
    CHECK(seen.values() == std::vector<double>{3.0, 4.0});
  }
}

// -- SyncOnReadVariable ---------------------------------------------------------

TEST_CASE("sync-on-read SUM: cross-replica reads sum the copies, assign divides") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  variable v{f32(1.0), options("v", synchronization::on_read, aggregation::sum)};
  CHECK(v.is_sync_on_read());
  CHECK(scalar_of(v.value()) == 2.0);
  v.assign(f32(6.0));
  CHECK(copy_values(v) == repeated(3.0, 2));
  CHECK(scalar_of(v.value()) == 6.0);
  CHECK(scalar_of(s.extended().read_var(v)) == 6.0);

  variable i{tensor::scalar(std::int64_t{0}),
             options("i", synchronization::on_read, aggregation::sum)};
  i.assign(tensor::scalar(std::int64_t{7})); // 7 / 2 truncates, as TF's cast
  CHECK(copy_values(i) == repeated(3.0, 2));
  CHECK(i.value() == tensor::scalar(std::int64_t{6}));
}

TEST_CASE("sync-on-read SUM: cross-replica assign_add and assign_sub are errors") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  variable v{f32(1.0), options("v", synchronization::on_read, aggregation::sum)};
  CHECK(error_of<value_error>([&] { v.assign_add(f32(1.0)); })
        == "sync_on_read_variable does not support `assign_add` in cross-replica context "
           "when aggregation is set to `variable_aggregation::sum` (variable 'v')");
  CHECK(error_of<value_error>([&] { v.assign_sub(f32(1.0)); })
        == "sync_on_read_variable does not support `assign_sub` in cross-replica context "
           "when aggregation is set to `variable_aggregation::sum` (variable 'v')");
  CHECK(copy_values(v) == repeated(1.0, 2));
}

TEST_CASE("sync-on-read MEAN, NONE, ONLY_FIRST_REPLICA: cross-replica writes go to every copy") {
  for (auto a : {aggregation::mean, aggregation::none, aggregation::only_first_replica}) {
    CAPTURE(to_string(a));
    mirrored_strategy s{cpu_devices(3)};
    auto scope = s.scope();
    variable v{tensor::scalar(2.0), options("v", synchronization::on_read, a)};
    v.assign_add(tensor::scalar(5.0));
    CHECK(copy_values(v) == repeated(7.0, 3));
    v.assign_sub(tensor::scalar(1.0));
    CHECK(copy_values(v) == repeated(6.0, 3));
    v.assign(tensor::scalar(9.0)); // not divided
    CHECK(copy_values(v) == repeated(9.0, 3));
  }
}

TEST_CASE("sync-on-read cross-replica reads combine the copies by the aggregation") {
  mirrored_strategy s{cpu_devices(4)};
  auto scope = s.scope();
  variable mean{f32(0.0), options("mean", synchronization::on_read, aggregation::mean)};
  variable first{f32(0.0),
                 options("first", synchronization::on_read, aggregation::only_first_replica)};
  variable none{f32(0.0), options("none", synchronization::on_read, aggregation::none)};
  variable sum{tensor::scalar(std::int32_t{0}),
               options("sum", synchronization::on_read, aggregation::sum)};
  s.run([&](replica_context& ctx) {
    const auto r = static_cast<double>(id_of(ctx));
    mean.assign(f32(2 * r + 1)); // 1, 3, 5, 7
    first.assign(f32(r + 20));
    none.assign(f32(r));
    sum.assign_add(tensor::scalar(static_cast<std::int32_t>(r * r)));
  });
  CHECK(scalar_of(mean.value()) == 4.0);
  CHECK(scalar_of(first.value()) == 20.0);
  CHECK(sum.value() == tensor::scalar(std::int32_t{14}));
  CHECK(error_of<value_error>([&] { (void) none.value(); })
        == "Could not convert from `lockstep::variable_aggregation` NONE to "
           "`lockstep::reduce_op` type");
  CHECK_THROWS_WITH_AS(s.extended().read_var(none), doctest::Contains("Could not convert from"),
                       value_error);
  CHECK(scalar_of(s.extended().read_var(mean)) == 4.0);
  // The copies themselves stay readable.
  CHECK(copy_values(none) == std::vector<double>{0.0, 1.0, 2.0, 3.0});
}

TEST_CASE("sync-on-read writes in replica context touch only that replica's copy") {
  for (auto a : {aggregation::sum, aggregation::none, aggregation::mean}) {
    CAPTURE(to_string(a));
    mirrored_strategy s{cpu_devices(3)};
    auto scope = s.scope();
    variable v{f32(1.0), options("v", synchronization::on_read, a)};
    auto reads = s.run([&](replica_context& ctx) {
      const auto r = static_cast<double>(id_of(ctx));
      std::vector<double> seen{scalar_of(v.value())};
      v.assign_add(f32(r)); // 1 + r
      seen.push_back(scalar_of(v.value()));
      v.assign_sub(f32(1.0)); // r
      seen.push_back(scalar_of(v.value()));
      v.assign(f32(10 * r)); // 10 r
      seen.push_back(scalar_of(v.value()));
      return seen;
    });
    for (std::size_t r = 0; r < 3; ++r) {
      const auto x = static_cast<double>(r);
      CHECK(reads[r] == std::vector<double>{1.0, 1.0 + x, x, 10 * x});
    }
    CHECK(copy_values(v) == std::vector<double>{0.0, 10.0, 20.0});
  }
}

TEST_CASE("sync-on-read writes and reads inside update() touch that copy only") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  auto& ext = s.extended();
  variable v{f32(1.0), options("v", synchronization::on_read, aggregation::sum)};
  // assign_add is no error here: the update context makes it a local write.
  ext.update(v, [&](variable& c) {
    c.assign_add(f32(c.devices()[0] == cpu_device(1) ? 10.0 : 0.0));
    v.assign_sub(f32(1.0));
  });
  CHECK(copy_values(v) == std::vector<double>{0.0, 10.0});
  auto seen = ext.update(v, [&](variable&) { return scalar_of(v.value()); });
  CHECK(seen.values() == std::vector<double>{0.0, 10.0});
  ext.update(v, [&](variable&) { v.assign(f32(4.0)); }); // not divided by 2 here
  CHECK(copy_values(v) == repeated(4.0, 2));
  CHECK(scalar_of(v.value()) == 8.0);
}

// -- naming ---------------------------------------------------------------------

TEST_CASE("copy 0 has the variable's name, copy i is <name>/replica_<i>") {
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto scope = s.scope();
    variable v{f32(0.0), {.name = "dense/kernel"}};
    CHECK(v.name() == "dense/kernel");
    const auto copies = v.values();
    REQUIRE(copies.size() == static_cast<std::size_t>(n));
    CHECK(copies[0].name() == "dense/kernel");
    for (int i = 1; i < n; ++i)
      CHECK(copies[static_cast<std::size_t>(i)].name()
            == "dense/kernel/replica_" + std::to_string(i));
    CHECK(v.primary().name() == "dense/kernel");
  }
}

TEST_CASE("unnamed variables are called Variable; names are not made unique") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  variable unnamed{f32(0.0)};
  CHECK(unnamed.name() == "Variable");
  CHECK(unnamed.values()[1].name() == "Variable/replica_1");
  variable a{f32(1.0), {.name = "w"}};
  variable b{f32(2.0), {.name = "w"}};
  CHECK(a.name() == "w");
  CHECK(b.name() == "w");
  CHECK_FALSE(a == b);
  CHECK(scalar_of(a.value()) == 1.0);
  CHECK(scalar_of(b.value()) == 2.0);
  variable plain{f32(0.0)}; // still in scope: distributed, same rule
  CHECK(plain.name() == "Variable");
}

TEST_CASE("canonical_variable_name strips uniquifying suffixes") {
  CHECK(canonical_variable_name("dense_1/kernel") == "dense/kernel");
  CHECK(canonical_variable_name("w_3") == "w");
  CHECK(canonical_variable_name("") == "Variable");
  CHECK(canonical_variable_name("w") == "w");
  CHECK(canonical_variable_name("a_1/b_2/c_3") == "a/b/c");
  CHECK(canonical_variable_name("layer_x/w") == "layer_x/w");
}

// -- creation in replica context --------------------------------------------------

TEST_CASE("a variable created in a replica function is shared by every replica") {
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    std::atomic<int> initializer_calls{0};
    auto created = s.run([&](replica_context& ctx) {
      const auto r = static_cast<double>(id_of(ctx));
      // Replica r asks for initial value r: only replica 0's is used.
      variable v{f32(r), {.name = "v"}};
      variable w{{.name = "w",
                  .synchronization = synchronization::on_read,
                  .aggregation = aggregation::sum,
                  .initializer = [&] {
                    ++initializer_calls;
                    return tensor::scalar(std::int32_t{3});
                  }}};
      return std::vector<variable>{v, w};
    });
    CHECK(initializer_calls.load() == 1);
    const auto& first = created[0];
    const auto count = static_cast<std::size_t>(n);
    for (std::size_t r = 0; r < count; ++r) {
      CHECK(created[r][0] == first[0]);
      CHECK(created[r][1] == first[1]);
    }
    const auto& v = first[0];
    CHECK(v.is_mirrored());
    CHECK(first[1].is_sync_on_read());
    CHECK(v.name() == "v");
    CHECK(copy_values(v) == repeated(0.0, count));
    CHECK(copy_values(first[1]) == repeated(3.0, count));
    CHECK(v.devices() == cpu_devices(n));
    for (std::size_t i = 0; i < count; ++i)
      CHECK(v.values()[i].value().device() == cpu_device(static_cast<int>(i)));
    CHECK(v.strategy() == s);
    CHECK(s.extended().variable_created_in_scope(v));
  }
}

TEST_CASE("several variables created in a replica function come in creation order") {
  mirrored_strategy s{cpu_devices(3)};
  auto created = s.run([](replica_context& ctx) {
    const auto r = static_cast<double>(id_of(ctx));
    std::vector<variable> out;
    out.emplace_back(f32(1 + r), variable_options{.name = "a"});
    // Replicas may uniquify names differently: canonical names match.
    out.emplace_back(
      f32(2 + r),
      variable_options{.name = r == 0 ? "b" : "b_" + std::to_string(static_cast<int>(r))});
    ctx.merge_call([] {});
    out.emplace_back(f32(3 + r), variable_options{.name = "c"});
    return out;
  });
  const std::vector<std::string> names{"a", "b", "c"};
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t k = 0; k < 3; ++k) {
      CHECK(created[r][k] == created[0][k]);
      CHECK(created[r][k].name() == names[k]);
      CHECK(copy_values(created[r][k]) == repeated(static_cast<double>(k + 1), 3));
    }
  CHECK_FALSE(created[0][0] == created[0][1]);
}

TEST_CASE("a replica asking for a different name fails with TF's text") {
  mirrored_strategy s{cpu_devices(3), {.timeout = 5s}};
  CHECK(error_of<context_error>([&] {
          s.run([](replica_context& ctx) {
            variable v{f32(0.0), {.name = id_of(ctx) == 1 ? "b" : "a"}};
          });
        })
        == "Tried to create variable b with mismatching name on device "
           "/job:localhost/replica:0/task:0/device:CPU:1");
  // The strategy stays usable.
  auto created = s.run([] { return variable{f32(1.0), {.name = "ok"}}; });
  CHECK(created.is_single());
  CHECK(copy_values(created.primary()) == repeated(1.0, 3));
}

TEST_CASE("a replica creating more variables than replica 0 before a merge_call fails") {
  mirrored_strategy s{cpu_devices(2), {.timeout = 5s}};
  CHECK(error_of<context_error>([&] {
          s.run([](replica_context& ctx) {
            variable a{f32(0.0), {.name = "a"}};
            if (id_of(ctx) == 1)
              variable extra{f32(0.0), {.name = "extra"}};
            ctx.merge_call([] {});
          });
        })
        == "Tried to create variable extra with mismatching name on device "
           "/job:localhost/replica:0/task:0/device:CPU:1");
  auto created = s.run([](replica_context& ctx) {
    ctx.merge_call([] {});
    return variable{f32(2.0), {.name = "after"}};
  });
  CHECK(created.is_single());
}

TEST_CASE("variables can be created inside a run nested in a merge function") {
  mirrored_strategy s{cpu_devices(3)};
  auto result = s.run([](replica_context& ctx) {
    variable outer{f32(1.0), {.name = "outer"}};
    auto inner = ctx.merge_call([](strategy& st) {
      auto created = st.run([](replica_context& nested) {
        return variable{f32(static_cast<double>(id_of(nested)) + 5), {.name = "inner"}};
      });
      CHECK(created.is_single());
      return created.primary();
    });
    return std::vector<variable>{outer, inner};
  });
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(result[r][0] == result[0][0]);
    CHECK(result[r][1] == result[0][1]);
  }
  CHECK_FALSE(result[0][0] == result[0][1]);
  CHECK(result[0][1].name() == "inner");
  CHECK(copy_values(result[0][1]) == repeated(5.0, 3));
  CHECK(copy_values(result[0][0]) == repeated(1.0, 3));
}

// -- options ----------------------------------------------------------------------

TEST_CASE("synchronization NONE is not supported by a mirrored strategy") {
  mirrored_strategy s{cpu_devices(2)};
  {
    auto scope = s.scope();
    CHECK(error_of<value_error>([] {
            variable v{f32(0.0), {.name = "v", .synchronization = synchronization::none}};
          })
          == "`NONE` variable synchronization mode is not supported with "
             "`mirrored_strategy`. Please change the `synchronization` for variable: v");
  }
  CHECK_THROWS_AS(s.run([] { variable v{f32(0.0), {.synchronization = synchronization::none}}; }),
                  value_error);
  // The default strategy accepts it.
  variable plain{f32(0.0), {.name = "v", .synchronization = synchronization::none}};
  CHECK(plain.synchronization() == synchronization::none);
}

TEST_CASE("invalid synchronization and aggregation values are rejected") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  CHECK(error_of<value_error>([] {
          variable v{f32(0.0), {.name = "v", .synchronization = static_cast<synchronization>(9)}};
        })
        == "Invalid variable synchronization mode: 9 for variable: v");
  CHECK(error_of<value_error>([] {
          variable v{f32(0.0), {.name = "v", .aggregation = static_cast<aggregation>(9)}};
        })
        == "Invalid variable aggregation mode: 9 for variable: v");
  CHECK(error_of<value_error>([] {
          variable v{f32(0.0), {.aggregation = static_cast<aggregation>(4)}};
        })
        == "Invalid variable aggregation mode: 4 for variable: Variable");
}

TEST_CASE("on_read variables are not trainable; trainable defaults") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  CHECK(error_of<value_error>([] {
          variable v{f32(0.0),
                     {.name = "v", .synchronization = synchronization::on_read, .trainable = true}};
        })
          .starts_with("Synchronization value can be set to variable_synchronization::on_read "
                       "only for non-trainable variables."));
  CHECK(variable{f32(0.0)}.trainable());
  CHECK(variable{f32(0.0), {.synchronization = synchronization::on_write}}.trainable());
  CHECK_FALSE(variable{f32(0.0), {.synchronization = synchronization::on_read}}.trainable());
  CHECK_FALSE(variable{f32(0.0), {.trainable = false}}.trainable());
  CHECK_FALSE(variable{f32(0.0), {.synchronization = synchronization::on_read, .trainable = false}}
                .trainable());
}

TEST_CASE("dtype and shape options must match the initial value; writes must match too") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  CHECK_THROWS_WITH_AS(
    (variable{f32(0.0), {.name = "v", .dtype = dtype::f64}}),
    "variable 'v': the initial value is float32, but dtype float64 was requested", dtype_error);
  CHECK_THROWS_AS((variable{f32(0.0), {.shape = shape_t{2}}}), shape_error);
  variable ok{tensor::zeros(dtype::i32, {2, 3}), {.name = "ok", .dtype = dtype::i32,
                                                     .shape = shape_t{2, 3}}};
  CHECK(ok.dtype() == dtype::i32);
  CHECK(ok.shape() == shape_t{2, 3});
  CHECK_THROWS_AS(ok.assign(tensor::zeros(dtype::i64, {2, 3})), dtype_error);
  CHECK_THROWS_AS(ok.assign_add(tensor::zeros(dtype::i32, {3, 2})), shape_error);
  CHECK(ok.values()[1].value() == tensor::zeros(dtype::i32, {2, 3}));
}

TEST_CASE("a variable needs an initial value or an initializer, called once") {
  mirrored_strategy s{cpu_devices(3)};
  auto scope = s.scope();
  CHECK(error_of<value_error>([] { variable v{variable_options{.name = "v"}}; })
        == "initial_value must be specified (variable: v)");
  int calls = 0;
  variable v{variable_options{.name = "v", .initializer = [&] {
                                ++calls;
                                return tensor::from<double>({1, 2});
                              }}};
  CHECK(calls == 1);
  for (const auto& c : v.values())
    CHECK(c.value() == tensor::from<double>({1, 2}));
  CHECK(v.shape() == shape_t{2});
  CHECK(v.dtype() == dtype::f64);
}

TEST_CASE("parse and print synchronization and aggregation modes with TF's names") {
  CHECK(parse_variable_synchronization("AUTO") == synchronization::automatic);
  CHECK(parse_variable_synchronization("on_write") == synchronization::on_write);
  CHECK(parse_variable_synchronization("On_Read") == synchronization::on_read);
  CHECK(parse_variable_synchronization("none") == synchronization::none);
  CHECK(error_of<value_error>([] { (void) parse_variable_synchronization("sometimes"); })
        == "Invalid variable synchronization mode: sometimes");
  CHECK(parse_variable_aggregation("NONE") == aggregation::none);
  CHECK(parse_variable_aggregation("sum") == aggregation::sum);
  CHECK(parse_variable_aggregation("Mean") == aggregation::mean);
  CHECK(parse_variable_aggregation("only_first_replica") == aggregation::only_first_replica);
  CHECK(error_of<value_error>([] { (void) parse_variable_aggregation("max"); })
        == "Invalid variable aggregation mode: max");
  CHECK(to_string(synchronization::automatic) == "AUTO");
  CHECK(to_string(synchronization::on_write) == "ON_WRITE");
  CHECK(to_string(synchronization::on_read) == "ON_READ");
  CHECK(to_string(synchronization::none) == "NONE");
  CHECK(to_string(aggregation::none) == "NONE");
  CHECK(to_string(aggregation::sum) == "SUM");
  CHECK(to_string(aggregation::mean) == "MEAN");
  CHECK(to_string(aggregation::only_first_replica) == "ONLY_FIRST_REPLICA");
  for (auto m : {synchronization::automatic, synchronization::on_write, synchronization::on_read,
                 synchronization::none})
    CHECK(parse_variable_synchronization(to_string(m)) == m);
  for (auto m :
       {aggregation::none, aggregation::sum, aggregation::mean, aggregation::only_first_replica})
    CHECK(parse_variable_aggregation(to_string(m)) == m);
}

TEST_CASE("mirrored_variable and sync_on_read_variable views check the kind") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  variable m{f32(0.0), {.name = "m"}};
  variable r{f32(0.0), {.name = "r", .synchronization = synchronization::on_read}};
  CHECK(mirrored_variable{m} == m);
  CHECK(sync_on_read_variable{r} == r);
  CHECK(error_of<type_error>([&] { sync_on_read_variable view{m}; })
        == "variable 'm' is not a sync_on_read_variable");
  CHECK(error_of<type_error>([&] { mirrored_variable view{r}; })
        == "variable 'r' is not a mirrored_variable");
}

TEST_CASE("a variable and its views are destinations: the devices of its copies") {
  mirrored_strategy s{cpu_devices(3)};
  auto scope = s.scope();
  variable m{f32(0.0), {.name = "m"}};
  variable r{f32(0.0), {.name = "r", .synchronization = synchronization::on_read}};
  CHECK(destinations{m}.devices() == cpu_devices(3));
  CHECK(destinations{mirrored_variable{m}}.devices() == cpu_devices(3));
  CHECK(destinations{sync_on_read_variable{r}}.devices() == cpu_devices(3));
  // A variable converts where destinations are asked for.
  const auto copies = s.extended().broadcast_to(tensor::scalar(2.0f), m).values();
  REQUIRE(copies.size() == 3);
  for (std::size_t d = 0; d < 3; ++d)
    CHECK(copies[d].device() == cpu_device(d));
}

TEST_CASE("outside a mirrored strategy variables are plain, with one copy") {
  SUBCASE("the default strategy keeps the caller's device") {
    variable v{f32(1.0), {.name = "v", .synchronization = synchronization::on_read}};
    CHECK_FALSE(v.is_mirrored());
    CHECK_FALSE(v.is_sync_on_read());
    CHECK(v.values().size() == 1);
    CHECK(v.devices() == std::vector<device_spec>{cpu_device(0)});
    CHECK(v.strategy() == get_strategy());
    CHECK_THROWS_AS(mirrored_variable{v}, type_error);
    CHECK_THROWS_AS(sync_on_read_variable{v}, type_error);
    v.assign_add(f32(2.0));
    CHECK(scalar_of(v.value()) == 3.0);
    device_scope on{cpu_device(2)};
    variable w{f32(0.0)};
    CHECK(w.devices() == std::vector<device_spec>{cpu_device(2)});
    CHECK(w.value().device() == cpu_device(2));
  }
  SUBCASE("a one-device strategy places it on its device") {
    one_device_strategy s{cpu_device(1)};
    auto scope = s.scope();
    variable v{f32(1.0), {.name = "v", .aggregation = aggregation::sum}};
    CHECK_FALSE(v.is_mirrored());
    CHECK(v.values().size() == 1);
    CHECK(v.devices() == std::vector<device_spec>{cpu_device(1)});
    CHECK(v.value().device() == cpu_device(1));
    CHECK(v.strategy() == s);
    auto created = s.run([] { return variable{f32(2.0), {.name = "in_run"}}; });
    CHECK(created.primary().devices() == std::vector<device_spec>{cpu_device(1)});
    s.run([&] { v.assign_add(f32(4.0)); }); // one replica: a plain write
    CHECK(scalar_of(v.value()) == 5.0);
  }
}

// -- strategy_extended ----------------------------------------------------------

TEST_CASE("update returns a mirrored value of per-copy results, or a vector with ungrouped") {
  mirrored_strategy s{cpu_devices(3)};
  auto scope = s.scope();
  auto& ext = s.extended();
  variable v{tensor::scalar(std::int32_t{1}), {.name = "v"}};
  auto grouped = ext.update(v, [](tensor& x) {
    add_into(x, tensor::scalar(std::int32_t{2}));
    return current_device();
  });
  static_assert(std::is_same_v<decltype(grouped), mirrored<device_spec>>);
  CHECK(grouped.values() == cpu_devices(3));
  auto flat = ext.update(ungrouped, v, [](tensor& x, int k) {
    add_into(x, tensor::scalar(std::int32_t{k}));
    return x.at<std::int32_t>(0);
  }, 4);
  static_assert(std::is_same_v<decltype(flat), std::vector<std::int32_t>>);
  CHECK(flat == std::vector<std::int32_t>{7, 7, 7});
  // A returned tensor is a snapshot: later writes leave it alone.
  auto snapshots = ext.update(v, [](tensor& x) { return x; });
  v.assign(tensor::scalar(std::int32_t{0}));
  for (const auto& t : snapshots.values())
    CHECK(t == tensor::scalar(std::int32_t{7}));
  CHECK(copy_values(v) == repeated(0.0, 3));
}

TEST_CASE("update unwraps mirrored arguments per copy") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  auto& ext = s.extended();
  variable v{f32(1.0), {.name = "v"}};
  per_replica<tensor> grads{
    {tensor::scalar(2.0f, cpu_device(0)), tensor::scalar(3.0f, cpu_device(1))}};
  auto reduced = ext.reduce_to(reduce_op::sum, grads, v);
  auto placed = ext.update(v, [](tensor& x, const tensor& g) {
    add_into(x, g);
    return g.device() == current_device();
  }, reduced);
  CHECK(placed.values() == std::vector<bool>{true, true});
  CHECK(copy_values(v) == repeated(6.0, 2));
  // Component i goes to copy i.
  mirrored<tensor> different{{f32(10.0), f32(20.0)}};
  ext.update(v, [](tensor& x, const tensor& d, double scale) { axpy_into(x, scale, d); },
             different, 0.5);
  CHECK(copy_values(v) == std::vector<double>{11.0, 16.0});
  mirrored<tensor> too_many{{f32(1.0), f32(1.0), f32(1.0)}};
  CHECK(error_of<value_error>([&] { ext.update(v, [](tensor&, const tensor&) {}, too_many); })
        == "update: a mirrored argument has 3 components for 2 copies");
}

TEST_CASE("update rejects per-replica arguments, foreign variables, components, replica context") {
  mirrored_strategy s{cpu_devices(2)};
  mirrored_strategy other{cpu_devices(2)};
  variable v = [&] {
    auto scope = s.scope();
    return variable{f32(1.0), {.name = "v"}};
  }();
  auto& ext = s.extended();
  per_replica<tensor> per{{f32(1.0), f32(2.0)}};
  CHECK(error_of<type_error>([&] { ext.update(v, [](tensor&, const tensor&) {}, per); })
          .starts_with("Expected value to be mirrored across replicas: "));
  // One object on every replica is what TF's regroup collapses: accepted.
  ext.update(v, [](tensor& x, const tensor& d) { add_into(x, d); },
             per_replica<tensor>::single(f32(1.0), 2));
  CHECK(copy_values(v) == repeated(2.0, 2));
  CHECK(error_of<value_error>([&] { other.extended().update(v, [](tensor&) {}); })
          .starts_with("update: variable 'v' was created by mirrored_strategy("));
  CHECK_THROWS_AS(ext.update(v.values()[1], [](tensor&) {}), value_error);
  CHECK(error_of<context_error>([&] {
          s.run([&] { ext.update(v, [](tensor& x) { add_into(x, f32(1.0)); }); });
        })
        == "Method requires being in cross-replica context, use "
           "get_replica_context()->merge_call()");
  CHECK(copy_values(v) == repeated(2.0, 2));
}

TEST_CASE("update_non_slot runs once per device of non_slot_devices") {
  for (int n : {1, 2, 4}) {
    CAPTURE(n);
    const auto count = static_cast<std::size_t>(n);
    mirrored_strategy s{cpu_devices(n)};
    auto scope = s.scope();
    auto& ext = s.extended();
    variable v{f32(0.0), {.name = "v"}};
    variable counter{tensor::scalar(std::int32_t{0}),
                     {.name = "counter",
                      .synchronization = synchronization::on_read,
                      .aggregation = aggregation::sum}};
    const auto devices = ext.non_slot_devices({v});
    CHECK(devices == cpu_devices(n));
    auto where = ext.update_non_slot(devices, [&] {
      counter.assign_add(tensor::scalar(std::int32_t{1})); // this device's copy
      return current_device();
    });
    static_assert(std::is_same_v<decltype(where), mirrored<device_spec>>);
    CHECK(where.values() == cpu_devices(n));
    CHECK(copy_values(counter) == repeated(1.0, count));
    CHECK(counter.value() == tensor::scalar(static_cast<std::int32_t>(n)));
    auto scaled = ext.update_non_slot(ungrouped, devices, [&](int k) {
      counter.assign_add(tensor::scalar(std::int32_t{k}));
      return counter.value().at<std::int32_t>(0);
    }, 10);
    CHECK(scaled == std::vector<std::int32_t>(count, 11));
    ext.update_non_slot(devices, [&] { counter.assign(tensor::scalar(std::int32_t{2})); });
    CHECK(counter.value() == tensor::scalar(static_cast<std::int32_t>(2 * n)));
  }
}

TEST_CASE("non_slot_devices of a one-device strategy: the smallest-named variable's") {
  one_device_strategy s{cpu_device(3)};
  auto scope = s.scope();
  variable b{f32(0.0), {.name = "b"}};
  variable a{f32(0.0), {.name = "a"}};
  CHECK(s.extended().non_slot_devices({b, a}) == std::vector<device_spec>{cpu_device(3)});
  CHECK_THROWS_AS((void) s.extended().non_slot_devices({}), value_error);
  auto where = s.extended().update_non_slot(s.extended().non_slot_devices({a}),
                                            [] { return current_device(); });
  CHECK(where.values() == std::vector<device_spec>{cpu_device(3)});
}

TEST_CASE("read_var: the aggregate of a sync-on-read variable, the value of others") {
  mirrored_strategy s{cpu_devices(3)};
  auto scope = s.scope();
  auto& ext = s.extended();
  variable m{f32(4.0), {.name = "m"}};
  variable sum{f32(2.0), options("sum", synchronization::on_read, aggregation::sum)};
  variable mean{tensor::scalar(std::int64_t{9}),
                options("mean", synchronization::on_read, aggregation::mean)};
  CHECK(scalar_of(ext.read_var(m)) == 4.0);
  CHECK(scalar_of(ext.read_var(sum)) == 6.0);
  CHECK(ext.read_var(mean) == tensor::scalar(std::int64_t{9}));
  CHECK(scalar_of(ext.read_var(sum.values()[2])) == 6.0); // a component: its variable
  CHECK_THROWS_AS(s.run([&] { (void) ext.read_var(m); }), context_error);
}

TEST_CASE("colocate_vars_with places new variables on the variable's devices") {
  mirrored_strategy s{cpu_devices(3)};
  mirrored_strategy other{cpu_devices(2)};
  variable foreign = [&] {
    auto scope = other.scope();
    return variable{f32(0.0), {.name = "foreign"}};
  }();
  auto scope = s.scope();
  auto& ext = s.extended();
  variable v{f32(1.0), {.name = "v"}};
  variable slot = [&] {
    auto colocated = ext.colocate_vars_with(v);
    return variable{f32(0.0), {.name = "v/momentum"}};
  }();
  CHECK(slot.devices() == v.devices());
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(slot.values()[i].value().device() == cpu_device(static_cast<int>(i)));
  CHECK(error_of<value_error>([&] { auto g = ext.colocate_vars_with(foreign); })
        == "`colocate_vars_with` must only be passed a variable created in this "
           "lockstep::strategy.scope(), not: foreign");
}

TEST_CASE("the default strategy's colocate_vars_with places a variable with another") {
  variable v = [] {
    device_scope on{cpu_device(1)};
    return variable{f32(1.0), {.name = "v"}};
  }();
  CHECK(v.devices() == std::vector<device_spec>{cpu_device(1)});
  variable slot = [&] {
    auto colocated = get_strategy().extended().colocate_vars_with(v);
    return variable{f32(0.0), {.name = "slot"}};
  }();
  CHECK(slot.devices() == std::vector<device_spec>{cpu_device(1)});
  CHECK(slot.value().device() == cpu_device(1));
  variable after{f32(0.0)};
  CHECK(after.devices() == std::vector<device_spec>{cpu_device(0)});
}

TEST_CASE("value_container, variable_created_in_scope and local_results") {
  mirrored_strategy s{cpu_devices(2)};
  mirrored_strategy other{cpu_devices(2)};
  variable foreign = [&] {
    auto scope = other.scope();
    return variable{f32(0.0), {.name = "foreign"}};
  }();
  variable plain{f32(0.0)};
  auto scope = s.scope();
  auto& ext = s.extended();
  variable v{f32(3.0), {.name = "v"}};
  const auto copies = local_results(v);
  REQUIRE(copies.size() == 2);
  CHECK(s.experimental_local_results(v) == copies);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(copies[i].is_component());
    CHECK(copies[i].devices() == std::vector<device_spec>{cpu_device(static_cast<int>(i))});
    CHECK(ext.value_container(copies[i]) == v);
    CHECK(scalar_of(copies[i].value()) == 3.0);
    CHECK(local_results(copies[i]) == std::vector<variable>{copies[i]});
  }
  CHECK_FALSE(copies[0] == v);
  CHECK(ext.value_container(v) == v);
  CHECK(v.primary() == copies[0]);
  CHECK(copies[1].container() == v);
  CHECK(ext.variable_created_in_scope(v));
  CHECK(ext.variable_created_in_scope(copies[1]));
  CHECK_FALSE(ext.variable_created_in_scope(foreign));
  CHECK_FALSE(ext.variable_created_in_scope(plain));
  CHECK(get_strategy().extended().variable_created_in_scope(v));
}

// -- the canonical training step -------------------------------------------------

TEST_CASE("training steps keep every copy bit-identical and equal to the hand-computed value") {
  constexpr int steps = 4;
  constexpr double learning_rate = 0.25;
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    auto scope = s.scope();
    std::vector<float> w0(12);
    for (std::size_t i = 0; i < w0.size(); ++i)
      w0[i] = static_cast<float>(i) - 4.0f;
    variable w{tensor::from(w0, {4, 3}), {.name = "dense/kernel"}};
    variable b{tensor::from<float>({1, 2, 3}), {.name = "dense/bias"}};

    // Replica r's gradients at step t: integers, so every sum is exact.
    auto grad_w = [](int r, int t, std::size_t i) {
      return static_cast<float>((r + 1) * (static_cast<int>(i % 5) + 1) - t);
    };
    auto grad_b = [](int r, int t, std::size_t j) {
      return static_cast<float>(r * 3 - static_cast<int>(j) + 2 * t);
    };
    for (int t = 0; t < steps; ++t) {
      s.run([&](replica_context& ctx) {
        const int r = static_cast<int>(id_of(ctx));
        std::vector<float> gw(12), gb(3);
        for (std::size_t i = 0; i < gw.size(); ++i)
          gw[i] = grad_w(r, t, i);
        for (std::size_t j = 0; j < gb.size(); ++j)
          gb[j] = grad_b(r, t, j);
        ctx.merge_call(
          [&](strategy& st, const per_replica<tensor>& dw, const per_replica<tensor>& db) {
            auto& ext = st.extended();
            auto reduced = ext.batch_reduce_to(reduce_op::sum, {{dw, w}, {db, b}});
            auto apply = [&](tensor& value, const tensor& grad) {
              axpy_into(value, -learning_rate, grad);
            };
            ext.update(w, apply, reduced[0]);
            ext.update(b, apply, reduced[1]);
          },
          tensor::from(gw, {4, 3}), tensor::from(gb, {3}));
      });
    }

    std::vector<float> w_expected = w0;
    std::vector<float> b_expected{1, 2, 3};
    for (int t = 0; t < steps; ++t) {
      for (std::size_t i = 0; i < 12; ++i) {
        double total = 0;
        for (int r = 0; r < n; ++r)
          total += grad_w(r, t, i);
        w_expected[i] = static_cast<float>(w_expected[i] - learning_rate * total);
      }
      for (std::size_t j = 0; j < 3; ++j) {
        double total = 0;
        for (int r = 0; r < n; ++r)
          total += grad_b(r, t, j);
        b_expected[j] = static_cast<float>(b_expected[j] - learning_rate * total);
      }
    }
    for (const auto& [var, expected] : {std::pair{w, tensor::from(w_expected, {4, 3})},
                                        std::pair{b, tensor::from(b_expected, {3})}}) {
      const auto name = var.name();
      CAPTURE(name);
      const auto copies = var.values();
      REQUIRE(copies.size() == static_cast<std::size_t>(n));
      const auto first = copies[0].value();
      CHECK(first == expected);
      for (std::size_t i = 0; i < copies.size(); ++i) {
        const auto value = copies[i].value();
        CHECK(value.device() == cpu_device(static_cast<int>(i)));
        REQUIRE(value.byte_size() == first.byte_size());
        CHECK(std::memcmp(value.raw_data(), first.raw_data(), first.byte_size()) == 0);
        if (i > 0)
          CHECK_FALSE(value.same_buffer(first));
      }
    }
    // Every replica reads the trained value on its own copy.
    auto reads = s.run([&] { return w.value(); });
    for (const auto& x : reads.values())
      CHECK(x == tensor::from(w_expected, {4, 3}));
  }
}

// -- failures ---------------------------------------------------------------------

TEST_CASE("an update that throws on one copy surfaces at the next read, then as divergence") {
  mirrored_strategy s{cpu_devices(2), {.timeout = 10s}};
  auto scope = s.scope();
  auto& ext = s.extended();
  variable v{f32(1.0), {.name = "v"}};
  ext.update(v, [](tensor& x) {
    if (current_device() == cpu_device(1))
      throw std::out_of_range("copy 1 refuses");
    add_into(x, f32(1.0));
  });
  CHECK_THROWS_WITH_AS(v.value(), "copy 1 refuses", std::out_of_range);
  const auto divergence = error_of<value_error>([&] { (void) v.value(); });
  CHECK(divergence.starts_with("variable 'v': write 1 failed on variable 'v/replica_1' copy 1"));
  CHECK(divergence.find("(copy 1 refuses), so its copies may differ") != std::string::npos);
  CHECK_THROWS_AS(v.values()[0].value(), value_error);
  CHECK_THROWS_AS(v.assign_add(f32(1.0)), value_error);
  CHECK_THROWS_AS(ext.update(v, [](tensor&) {}), value_error);
  // An assign of the whole variable in cross-replica context makes the copies equal again.
  v.assign(f32(5.0));
  CHECK(scalar_of(v.value()) == 5.0);
  CHECK(copy_values(v) == repeated(5.0, 2));
  v.assign_add(f32(1.0));
  CHECK(copy_values(v) == repeated(6.0, 2));
  // synchronize() reports every failed posted write once, too.
  CHECK_THROWS_AS(ext.synchronize(), std::out_of_range);
  ext.synchronize();
}

TEST_CASE("synchronize() rethrows a posted update's failure") {
  mirrored_strategy s{cpu_devices(3), {.timeout = 10s}};
  auto scope = s.scope();
  auto& ext = s.extended();
  variable v{f32(0.0), {.name = "v"}};
  ext.update(v, [](tensor& x) {
    if (current_device() == cpu_device(0))
      throw std::invalid_argument("copy 0 refuses");
    add_into(x, f32(1.0));
  });
  CHECK_THROWS_WITH_AS(ext.synchronize(), "copy 0 refuses", std::invalid_argument);
  ext.synchronize(); // reported once
  // The variable reports it at its own next synchronisation point.
  CHECK_THROWS_AS(v.value(), std::invalid_argument);
  CHECK_THROWS_AS(v.value(), value_error);
  v.assign(f32(2.0));
  CHECK(copy_values(v) == repeated(2.0, 3));
}

TEST_CASE("an update that returns a value throws at once, and only there") {
  mirrored_strategy s{cpu_devices(2), {.timeout = 10s}};
  auto scope = s.scope();
  auto& ext = s.extended();
  variable v{f32(0.0), {.name = "v"}};
  CHECK_THROWS_WITH_AS(ext.update(v,
                                  [](tensor& x) {
                                    if (current_device() == cpu_device(1))
                                      throw std::invalid_argument("copy 1 refuses");
                                    add_into(x, f32(1.0));
                                    return 1;
                                  }),
                       "copy 1 refuses", std::invalid_argument);
  ext.synchronize(); // the caller saw it already: not reported again
  // The copies differ now (copy 0 added 1): the variable says so.
  CHECK_THROWS_AS(v.value(), value_error);
}

TEST_CASE("an update that throws on a one-device variable throws at once") {
  one_device_strategy s{cpu_device(0)};
  auto scope = s.scope();
  variable v{f32(1.0), {.name = "v"}};
  CHECK_THROWS_WITH_AS(s.extended().update(v, [](tensor&) { throw std::out_of_range("no"); }),
                       "no", std::out_of_range);
  CHECK(scalar_of(v.value()) == 1.0);
  v.assign_add(f32(1.0));
  CHECK(scalar_of(v.value()) == 2.0);
}

TEST_CASE("1000 posted updates on 4 devices are all seen by the next read") {
  mirrored_strategy s{cpu_devices(4)};
  auto scope = s.scope();
  auto& ext = s.extended();
  variable v{tensor::scalar(std::int64_t{0}), {.name = "v"}};
  const auto one = tensor::scalar(std::int64_t{1});
  for (int k = 0; k < 1000; ++k) {
    if (k % 10 == 9)
      v.assign_add(tensor::scalar(std::int64_t{2})); // posted plain writes interleave
    else
      ext.update(v, [&one](tensor& x) { add_into(x, one); });
  }
  CHECK(v.value() == tensor::scalar(std::int64_t{1100}));
  CHECK(copy_values(v) == repeated(1100.0, 4));
  ext.synchronize();
}

TEST_CASE("reads are snapshots that later writes do not change") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  variable m{tensor::from<float>({1, 2}), {.name = "m"}};
  variable r{f32(1.0), options("r", synchronization::on_read, aggregation::sum)};
  const auto before = m.value();
  const auto copy1 = m.values()[1].value();
  m.assign_add(tensor::from<float>({10, 10}));
  s.extended().update(m, [](tensor& x) { scale_into(x, 2.0); });
  CHECK(before == tensor::from<float>({1, 2}));
  CHECK(copy1 == tensor::from<float>({1, 2}));
  CHECK(m.value() == tensor::from<float>({22, 24}));
  auto seen = s.run([&](replica_context& ctx) {
    const auto snapshot = r.value();
    r.assign_add(f32(static_cast<double>(id_of(ctx)) + 1));
    return std::vector<double>{scalar_of(snapshot), scalar_of(r.value())};
  });
  CHECK(seen[0] == std::vector<double>{1.0, 2.0});
  CHECK(seen[1] == std::vector<double>{1.0, 3.0});
  CHECK(scalar_of(r.value()) == 5.0);
}

TEST_CASE("a variable of the default strategy is usable inside another strategy's scope") {
  variable counter{tensor::scalar(1.0f), {.name = "counter"}};
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  counter.assign_add(tensor::scalar(2.0f));
  CHECK(counter.value() == tensor::scalar(3.0f));
  CHECK_FALSE(s.extended().variable_created_in_scope(counter));
  // A variable of the mirrored strategy still refuses another strategy's scope.
  variable mirrored_one{tensor::scalar(1.0f), {.name = "m"}};
  mirrored_strategy other{cpu_devices(2)};
  const auto message = error_of<context_error>([&] {
    auto other_scope = other.scope();
    mirrored_one.assign(tensor::scalar(5.0f));
  });
  CHECK(message.find("Mixing different") != std::string::npos);
}

// -- regroup of components (TF's regroup) -----------------------------------------

TEST_CASE("run: replica r returning copy r of a variable gives back the variable") {
  mirrored_strategy s{cpu_devices(3)};
  auto scope = s.scope();
  for (auto sync : {synchronization::on_write, synchronization::on_read}) {
    CAPTURE(static_cast<int>(sync));
    variable v{f32(1.0), options("v", sync, aggregation::sum)};
    auto result = s.run([&](replica_context& ctx) { return v.values()[id_of(ctx)]; });
    CHECK(result.is_single());
    CHECK(result.primary() == v);
    CHECK_FALSE(result.primary().is_component());
    for (const auto& component : result.values())
      CHECK(component == v);
  }
}

TEST_CASE("run: copies of a variable in another order, or of two variables, stay per_replica") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  variable a{f32(1.0), options("a", synchronization::on_write, aggregation::sum)};
  variable b{f32(2.0), options("b", synchronization::on_write, aggregation::sum)};
  auto swapped = s.run([&](replica_context& ctx) { return a.values()[1 - id_of(ctx)]; });
  CHECK_FALSE(swapped.is_single());
  CHECK(swapped[0] == a.values()[1]);
  auto mixed = s.run([&](replica_context& ctx) {
    return id_of(ctx) == 0 ? a.values()[0] : b.values()[1];
  });
  CHECK_FALSE(mixed.is_single());
  CHECK(mixed[1] == b.values()[1]);
  // Copy 0 on every replica is one object, collapsed as before.
  auto first = s.run([&](replica_context&) { return a.values()[0]; });
  CHECK(first.is_single());
  CHECK(first.primary() == a.values()[0]);
}

TEST_CASE("regroup of nested values collapses each variable's components") {
  mirrored_strategy s{cpu_devices(2)};
  auto scope = s.scope();
  variable v{f32(1.0), options("v", synchronization::on_write, aggregation::sum)};
  const auto copies = v.values();
  // Replica r returned {copy r, copy 1-r}: the first column is the variable.
  auto grouped = regroup(
    std::vector<std::vector<variable>>{{copies[0], copies[1]}, {copies[1], copies[0]}});
  REQUIRE(grouped.size() == 2);
  CHECK(grouped[0].is_single());
  CHECK(grouped[0].primary() == v);
  CHECK_FALSE(grouped[1].is_single());
}
