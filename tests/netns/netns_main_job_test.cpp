// The main job (examples/train_fashion_mnist) on two workers, each on a
// host of its own, on a few made-up images. Under 1 ms ± 0.5 ms of delay on
// every connection between them (the fault proxy's, per chunk, the bytes
// kept in order) its first steps give the numbers it gives straight from
// host to host, to the last bit: the metrics and the checkpoint's bytes.
// A port already in use is a clear error at the start, naming the port.

#include <doctest/doctest.h>

#include "../fashion_mnist_files.hpp"
#include "worker_pair.hpp"

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr auto hang_limit = 90s;

/// A metrics row's epoch, loss and accuracies: its first four fields (not
/// the times).
std::string figures(const std::string& row) {
  std::size_t at = 0;
  for (int field = 0; field < 4 && at != std::string::npos; ++field)
    at = row.find(',', at + 1);
  return row.substr(0, at);
}

std::vector<std::string> figures_of(const fs::path& metrics) {
  std::istringstream in(read_file(metrics));
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);)
    rows.push_back(figures(line));
  return rows;
}

/// The main job's options for a run whose outputs go to `dir`: 128
/// training images in global batches of 32 (4 steps), 32 test images.
std::vector<std::string> main_job(const fs::path& data, const fs::path& dir, std::size_t rank) {
  return {test_program("TRAIN_FASHION_MNIST"),
          "--data-dir", data.string(),
          "--metrics", (dir / ("metrics" + std::to_string(rank) + ".csv")).string(),
          "--checkpoint-dir", (dir / "ckpt").string(),
          "--replicas", "1", "--global-batch", "32", "--epochs", "1", "--seed", "3"};
}

/// Runs the main job on both workers into `dir`; both must succeed.
void train(worker_pair& pair, const fs::path& data, const fs::path& dir) {
  fs::create_directories(dir);
  std::vector<process> workers{pair.start(0, main_job(data, dir, 0)),
                               pair.start(1, main_job(data, dir, 1))};
  wait_all(workers, hang_limit);
  for (std::size_t rank = 0; rank < 2; ++rank)
    REQUIRE_MESSAGE(workers[rank].exited_ok(), "worker " << rank << " (" << workers[rank].how()
                                                          << "):\n" << workers[rank].text());
}

} // namespace

TEST_CASE("under 1 ms +- 0.5 ms of delay the main job's first steps give the same numbers, bit "
          "for bit") {
  worker_pair pair;
  const auto data = pair.folder() / "data";
  write_data(data, 128, 32);
  const auto straight = pair.folder() / "straight";
  train(pair, data, straight);

  auto& proxy = pair.start_proxy({"--delay", "1", "--jitter", "0.5", "--seed", "7"});
  const auto delayed = pair.folder() / "delayed";
  train(pair, data, delayed);
  // Every connection went through the proxy: worker 1's control connection
  // and both ring connections.
  for (const auto port : {worker_pair::coordinator_port, worker_pair::ring_port_0,
                          worker_pair::ring_port_1})
    CHECK_MESSAGE(proxy.lines_starting("accepted " + std::to_string(port) + " ") >= 1,
                  "nothing went through the proxy's port " << port << ":\n" << proxy.text());

  const auto rows = figures_of(straight / "metrics0.csv");
  REQUIRE(rows.size() == 2); // the header and epoch 1
  CHECK(figures_of(delayed / "metrics0.csv") == rows);
  const auto checkpoint = fs::path("ckpt") / "ckpt-4.safetensors";
  REQUIRE(fs::is_regular_file(straight / checkpoint));
  CHECK(read_file(delayed / checkpoint) == read_file(straight / checkpoint));
  MESSAGE("epoch 1, straight and delayed: " << rows[1]);
}

TEST_CASE("a port already in use is a clear error at the start, naming the port") {
  worker_pair pair;
  const auto data = pair.folder() / "data";
  write_data(data, 128, 32);
  // Something else listens at each worker's port on its host (the proxy
  // will do): the coordinator's, then worker 1's ring port.
  for (const auto& [rank, port] : {std::pair<std::size_t, int>{0, worker_pair::coordinator_port},
                                   std::pair<std::size_t, int>{1, worker_pair::ring_port_1}}) {
    CAPTURE(port);
    fault_proxy_process holder(
      pair.lab().on_host(rank, {test_program("FAULT_PROXY"), "--forward",
                                std::to_string(port) + "=" + network_lab::address(rank) + ":9"}),
      pair.folder() / ("holder" + std::to_string(port) + ".txt"));
    const auto dir = pair.folder() / ("taken" + std::to_string(port));
    fs::create_directories(dir);
    std::vector<process> worker{pair.start(rank, main_job(data, dir, rank))};
    wait_all(worker, hang_limit);
    const auto text = worker[0].text();
    INFO("worker " << rank << " (" << worker[0].how() << "):\n" << text);
    CHECK(worker[0].exited_with(1));
    CHECK(text.find(":" + std::to_string(port) + ": ") != std::string::npos);
    CHECK(text.find("in use") != std::string::npos);
    MESSAGE(text);
  }
}
