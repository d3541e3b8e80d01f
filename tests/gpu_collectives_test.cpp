// All-reduce across logical GPUs (suite 'gpu', skipped without a device):
// physical GPU 0 split into four logical GPUs (TF's logical devices) as
// the first thing the process does with a GPU; on_device_all_reduce and
// reduction_to_one_device on them against reduction_to_one_device on CPU
// copies, bit for bit, every dtype and op; choose_the_best's pick; a
// mirrored strategy on the four logical GPUs (replica all_reduce, a
// mirrored variable updated in replica context); GPU components reduced to
// a host destination (strategy::reduce's default).

#include "lockstep/lockstep.hpp"

#include "lockstep/config.hpp"
#include "lockstep/gpu.hpp"

#include "devices/cuda/cuda_check.hpp"

#include "gpu_support.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

using namespace lockstep;
using namespace gpu_test;

namespace {

/// The layout of this process, fixed by the first call, before any GPU
/// tensor: physical GPU 0 as four logical GPUs (/gpu:0../gpu:3), every
/// other physical GPU as one (/gpu:4, ...). Every test calls it first.
const std::vector<device_spec>& logical() {
  static const auto devices = gpu_devices(4, 0);
  return devices;
}

const device_spec host = cpu_device(0).canonical();

std::vector<device_spec> first_logical(int k) {
  const auto& all = logical();
  return {all.begin(), all.begin() + k};
}

purpose purpose_of(reduce_op op) {
  return op == reduce_op::prod ? purpose::product : purpose::general;
}

/// Element i of input r with exact reductions: -1 or 2 for PROD, small
/// integers otherwise.
double exact_value(reduce_op op, std::size_t i, int r) {
  if (op == reduce_op::prod)
    return (i + static_cast<std::size_t>(r)) % 3 == 0 ? -1.0 : 2.0;
  return static_cast<double>((r + 1) * (static_cast<int>(i % 9) - 4));
}

/// Input r of a reduction, on the host.
tensor host_input(dtype type, std::int64_t count, reduce_op op, int r) {
  return values(type, {count}, 100 + static_cast<std::uint64_t>(r), purpose_of(op),
                cpu_device(r));
}

} // namespace

TEST_CASE("four logical GPUs on physical GPU 0, fixed on first use") {
  const auto& devices = logical();
  REQUIRE(devices.size() == 4);
  for (int k = 0; k < 4; ++k)
    CHECK(devices[static_cast<std::size_t>(k)] == gpu(k));
  CHECK(physical_gpu_count() == detail::cuda_device_count());
  CHECK(gpu_count() == 4 + physical_gpu_count() - 1);
  CHECK(gpu_devices(4, 0) == devices);
  CHECK(has(error_of<device_error>([] { gpu_devices(1, 0); }), "cannot be changed"));
  // Each logical GPU has memory and statistics of its own.
  std::vector<tensor> one_each;
  for (const auto& d : devices) {
    const auto before = memory_stats(d);
    one_each.push_back(tensor::zeros(dtype::f32, {1000}, d));
    CHECK(memory_stats(d).bytes_in_use == before.bytes_in_use + 4096);
    CHECK(one_each.back().device() == d);
    CHECK(one_each.back().buffer().kind()->name == "cuda");
  }
  for (std::size_t a = 0; a < one_each.size(); ++a)
    for (std::size_t b = a + 1; b < one_each.size(); ++b)
      CHECK(one_each[a].buffer().data() != one_each[b].buffer().data());
}

TEST_CASE("on_device_all_reduce on 2, 3 and 4 logical GPUs equals reduction_to_one_device on "
          "the CPU bit for bit") {
  logical();
  on_device_all_reduce on_device;
  reduction_to_one_device to_one;
  for (auto type : all_dtypes)
    for (auto op : all_ops)
      for (int n : {2, 3, 4})
        for (std::int64_t count : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7},
                                   std::int64_t{4099}, std::int64_t{65537}}) {
          INFO(name_of(type), ", ", to_string(op), ", ", n, " replicas, ", count, " elements");
          std::vector<tensor> on_host;
          std::vector<tensor> on_gpus;
          for (int r = 0; r < n; ++r) {
            on_host.push_back(host_input(type, count, op, r));
            on_gpus.push_back(on_host.back().to(logical()[static_cast<std::size_t>(r)]));
          }
          const per_replica<tensor> host_value{on_host};
          const per_replica<tensor> gpu_value{on_gpus};
          const auto expected = to_one.reduce(op, host_value, host_value);

          const auto result = on_device.reduce(op, gpu_value, gpu_value);
          REQUIRE(result.size() == static_cast<std::size_t>(n));
          for (std::size_t r = 0; r < result.size(); ++r) {
            CHECK(result[r].device() == logical()[r]);
            CHECK(result[r].buffer().kind()->name == "cuda");
            CHECK(same_bytes(result[r], expected[r]));
            for (const auto& x : on_gpus)
              CHECK_FALSE(result[r].same_buffer(x));
          }
          // The inputs are left as they were.
          for (std::size_t r = 0; r < on_gpus.size(); ++r)
            CHECK(same_bytes(on_gpus[r], on_host[r]));

          // reduction_to_one_device on the GPUs: the device's convert and
          // elementwise kernels, the same bits.
          const auto gathered = to_one.reduce(op, gpu_value, gpu_value);
          for (std::size_t r = 0; r < gathered.size(); ++r) {
            CHECK(gathered[r].device() == logical()[r]);
            CHECK(same_bytes(gathered[r], expected[r]));
          }
        }
}

TEST_CASE("on_device_all_reduce to one GPU, and across physical GPUs where there are two") {
  logical();
  on_device_all_reduce on_device;
  for (auto type : all_dtypes)
    for (auto op : all_ops) {
      INFO(name_of(type), ", ", to_string(op));
      std::vector<tensor> on_host;
      std::vector<tensor> on_gpus;
      for (int r = 0; r < 3; ++r) {
        on_host.push_back(host_input(type, 1001, op, r));
        on_gpus.push_back(on_host.back().to(gpu(r)));
      }
      const per_replica<tensor> host_value{on_host};
      const per_replica<tensor> gpu_value{on_gpus};
      // One destination: reduction_to_one_device's fallback, on the GPU.
      const auto one = on_device.reduce(op, gpu_value, "/gpu:3");
      REQUIRE(one.size() == 1);
      CHECK(one[0].device() == gpu(3));
      CHECK(one[0].buffer().kind()->name == "cuda");
      CHECK(same_bytes(one[0], reduction_to_one_device{}.reduce(op, host_value, host)[0]));

      if (physical_gpu_count() >= 2) {
        // Two replicas on physical GPU 0, one on physical GPU 1: a partial
        // result per physical GPU, then across. Exact values only: floating
        // sums and products associate differently there.
        std::vector<tensor> exact_host;
        std::vector<tensor> exact_gpus;
        const std::vector<device_spec> where{gpu(0), gpu(1), gpu(4)};
        for (int r = 0; r < 3; ++r) {
          auto t = tensor::zeros(type, {1001}, cpu_device(r));
          visit_dtype(type, [&]<class T>(T) {
            auto e = t.data<T>();
            for (std::size_t i = 0; i < e.size(); ++i)
              e[i] = static_cast<T>(static_cast<float>(exact_value(op, i, r)));
          });
          exact_host.push_back(t);
          exact_gpus.push_back(t.to(where[static_cast<std::size_t>(r)]));
        }
        const per_replica<tensor> exact_host_value{exact_host};
        const per_replica<tensor> exact_gpu_value{exact_gpus};
        const auto expected = reduction_to_one_device{}.reduce(op, exact_host_value,
                                                               exact_host_value);
        const auto across = on_device.reduce(op, exact_gpu_value, exact_gpu_value);
        REQUIRE(across.size() == 3);
        for (std::size_t r = 0; r < 3; ++r) {
          CHECK(across[r].device() == where[r]);
          CHECK(same_bytes(across[r], expected[r]));
        }
      }
    }
}

TEST_CASE("choose_the_best picks on_device_all_reduce for logical GPUs of one physical GPU") {
  logical();
  const auto all = choose_the_best(logical());
  CHECK(all->name() == "on_device_all_reduce");
  CHECK(std::dynamic_pointer_cast<on_device_all_reduce>(all) != nullptr);
  CHECK(choose_the_best(first_logical(2))->name() == "on_device_all_reduce");
  CHECK(choose_the_best({"/gpu:0"})->name() == "on_device_all_reduce");
  CHECK(choose_the_best({"/cpu:0", "/gpu:0"})->name() == "reduction_to_one_device");
  CHECK(choose_the_best(cpu_devices(2))->name() == "slice_all_reduce");
  if (physical_gpu_count() >= 2) {
    // One replica per physical GPU: NCCL where lockstep has it.
    CHECK(choose_the_best({"/gpu:0", "/gpu:4"})->name()
          == (LOCKSTEP_HAVE_NCCL ? "nccl_all_reduce" : "on_device_all_reduce"));
    CHECK(choose_the_best({"/gpu:0", "/gpu:1", "/gpu:4"})->name() == "on_device_all_reduce");
  }
}

TEST_CASE("a pod of four logical GPUs: 2 replicas of 2 logical cores, a part on core 1, a "
          "variable under core 1, MEAN across the replicas") {
  const auto topology = pod_topology::from_devices(logical());
  pod_strategy pod{topology, device_assignment::build(topology, {1, 1, 1, 2}, {}, 2)};
  REQUIRE(pod.num_replicas_in_sync() == 2);
  auto scope = pod.scope();
  auto w = [&] {
    auto core = pod.extended().experimental_logical_device(1);
    return variable{tensor::from<float>({1, 2, 3}, {3})};
  }();
  const auto& a = pod.device_assignment();
  CHECK(w.devices() == std::vector<device_spec>{a.device(0, 1), a.device(1, 1)});
  auto out = pod.run([&](replica_context& ctx) {
    const auto r = static_cast<float>(ctx.replica_id_in_sync_group());
    const auto x = tensor::from<float>({r + 1, r + 2, r + 3}, {3}, current_device());
    // On core 1: x (copied there) times the replica's copy of w, on the GPU.
    auto y = ctx.experimental_logical_device(1, [&w, x] {
      auto product = x.to(current_device());
      const auto wv = w.read_value();
      const auto ok = wv.device() == current_device();
      auto host_product = product.to(host);
      const auto host_w = wv.to(host);
      for (std::size_t k = 0; k < 3; ++k)
        host_product.data<float>()[k] *= host_w.data<float>()[k];
      return std::pair{host_product.to(current_device()), ok};
    });
    // Checked on the test's thread: doctest's checks are not for replicas'.
    return std::vector<tensor>{ctx.all_reduce(reduce_op::mean, y.first.to(current_device())),
                               tensor::scalar(y.second ? 1.0f : 0.0f)};
  });
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK(out[r][0].device() == a.device(r, 0));
    CHECK(out[r][1].to(host).at<float>(0) == 1.0f); // the part read its core's copy of w
    // mean over r of (r + 1 + k) * (k + 1): (1.5 + k) * (k + 1)
    CHECK(out[r][0].to(host) == tensor::from<float>({1.5f, 5, 10.5f}, {3}, host));
  }
}

TEST_CASE("a mirrored strategy on four logical GPUs: replica all_reduce SUM and MEAN") {
  logical();
  mirrored_strategy s{logical()};
  CHECK(s.num_replicas_in_sync() == 4);
  CHECK(s.extended().cross_device_ops().name() == "on_device_all_reduce");
  auto out = s.run([](replica_context& ctx) {
    const auto r = static_cast<float>(ctx.replica_id_in_sync_group());
    const auto here = current_device();
    const auto x = tensor::from<float>({r + 1, 2 * (r + 1), 0.5f * (r + 1)}, {3}, here);
    const auto h = tensor::from<std::int32_t>({static_cast<std::int32_t>(r), -7}, {2}, here);
    std::vector<tensor> results{x,
                                ctx.all_reduce(reduce_op::sum, x),
                                ctx.all_reduce(reduce_op::mean, x),
                                ctx.all_reduce(reduce_op::mean, h),
                                ctx.all_reduce(reduce_op::max, h)};
    // Several at once (one merge_call, a batch).
    for (auto& t : ctx.all_reduce(reduce_op::sum, std::vector<tensor>{x, h}))
      results.push_back(t);
    return results;
  });
  REQUIRE(out.size() == 4);
  for (std::size_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    const auto& mine = out[r];
    REQUIRE(mine.size() == 7);
    for (const auto& t : mine) {
      CHECK(t.device() == logical()[r]);
      CHECK(t.buffer().kind()->name == "cuda");
    }
    CHECK(mine[1].to(host) == tensor::from<float>({10, 20, 5}, {3}, host));
    CHECK(mine[2].to(host) == tensor::from<float>({2.5f, 5, 1.25f}, {3}, host));
    CHECK(mine[3].to(host) == tensor::from<std::int32_t>({1, -7}, {2}, host)); // 6 / 4
    CHECK(mine[4].to(host) == tensor::from<std::int32_t>({3, -7}, {2}, host));
    CHECK(mine[5].to(host) == tensor::from<float>({10, 20, 5}, {3}, host));
    CHECK(mine[6].to(host) == tensor::from<std::int32_t>({6, -28}, {2}, host));
  }
}

TEST_CASE("a mirrored variable on four logical GPUs, updated in replica context") {
  logical();
  mirrored_strategy s{logical()};
  auto scope = s.scope();
  variable sum{tensor::from<float>({1, 2, 3}),
               {.name = "w", .synchronization = variable_synchronization::on_write,
                .aggregation = variable_aggregation::sum}};
  variable mean{tensor::from<double>({0, 0}),
                {.name = "m", .synchronization = variable_synchronization::on_write,
                 .aggregation = variable_aggregation::mean}};
  REQUIRE(sum.values().size() == 4);
  for (std::size_t r = 0; r < 4; ++r) {
    const auto copy = sum.values()[r].value();
    CHECK(copy.device() == logical()[r]);
    CHECK(copy.buffer().kind()->name == "cuda");
    CHECK(copy.to(host) == tensor::from<float>({1, 2, 3}, {3}, host));
  }
  auto reads = s.run([&](replica_context& ctx) {
    const auto r = static_cast<float>(ctx.replica_id_in_sync_group());
    sum.assign_add(tensor::from<float>({r + 1, 0, -1}, {3}, current_device()));
    mean.assign_add(tensor::from<double>({r + 1, -2 * r}, {2}, current_device()));
    return std::vector<tensor>{sum.value(), mean.value()};
  });
  const auto expected_sum = tensor::from<float>({11, 2, -1}, {3}, host);    // + 10, 0, -4
  const auto expected_mean = tensor::from<double>({2.5, -3}, {2}, host); // mean of r+1, -2r
  for (std::size_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(reads[r][0].device() == logical()[r]);
    CHECK(reads[r][0].to(host) == expected_sum);
    CHECK(reads[r][1].to(host) == expected_mean);
    CHECK(sum.values()[r].value().to(host) == expected_sum);
    CHECK(mean.values()[r].value().to(host) == expected_mean);
  }
  // A second step builds on the first.
  s.run([&](replica_context&) { sum.assign_add(tensor::from<float>({1, 1, 1}, {3}, current_device())); });
  for (std::size_t r = 0; r < 4; ++r)
    CHECK(sum.values()[r].value().to(host) == tensor::from<float>({15, 6, 3}, {3}, host));
}

TEST_CASE("GPU components reduced to a host destination (strategy::reduce's current device)") {
  // TF's strategy.reduce(SUM, per_replica) reduces to the current device,
  // the CPU by default, from replicas on GPUs.
  logical();
  for (auto type : all_dtypes)
    for (auto op : all_ops) {
      INFO(name_of(type), ", ", to_string(op));
      std::vector<tensor> on_host;
      std::vector<tensor> on_gpus;
      for (int r = 0; r < 4; ++r) {
        on_host.push_back(host_input(type, 1001, op, r));
        on_gpus.push_back(on_host.back().to(gpu(r)));
      }
      const auto expected =
        reduction_to_one_device{}.reduce(op, per_replica<tensor>{on_host}, host)[0];
      for (const std::shared_ptr<cross_device_ops>& ops :
           {std::shared_ptr<cross_device_ops>(std::make_shared<reduction_to_one_device>()),
            std::shared_ptr<cross_device_ops>(std::make_shared<on_device_all_reduce>())}) {
        INFO(ops->name());
        const auto result = ops->reduce(op, per_replica<tensor>{on_gpus}, host);
        REQUIRE(result.size() == 1);
        CHECK(result[0].device() == host);
        CHECK(same_bytes(result[0], expected));
      }
    }
  mirrored_strategy s{logical()};
  const auto parts = s.run([](replica_context& ctx) {
    const auto r = static_cast<float>(ctx.replica_id_in_sync_group());
    return tensor::from<float>({r, 1}, {2}, current_device());
  });
  const auto total = s.reduce(reduce_op::sum, parts);
  CHECK(total.to(host) == tensor::from<float>({6, 4}, {2}, host));
}
