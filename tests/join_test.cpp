// Joining a multi-worker job as users meet it, with the main job
// (examples/train_fashion_mnist, $TRAIN_FASHION_MNIST) run as two real
// worker processes on loopback from TF_CONFIG: strangers on the
// coordinator's port during the join change nothing; a worker started with
// another --lr fails the join on every worker, naming the setting, each
// value and each rank, with a status lockstep-run does not restart; Ctrl-C
// during the join ends it at once on the coordinator and on a worker.

#include "fashion_mnist_files.hpp"
#include "worker_processes.hpp"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// Two workers of the main job on ports `base` and `base + 1`, training on
/// the data in `folder`; worker i gets `extra[i]` after the common options.
struct main_job {
  const temp_folder& folder;
  int base = free_ports(2);

  std::filesystem::path metrics() const { return folder.path() / "metrics.csv"; }

  process start(int rank, const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> argv{test_program("TRAIN_FASHION_MNIST"),
                                  "--data-dir", (folder.path() / "data").string(),
                                  "--metrics", metrics().string(),
                                  "--replicas", "1", "--global-batch", "32",
                                  "--epochs", "1", "--seed", "3"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto config = "TF_CONFIG={\"cluster\":{\"worker\":[\"127.0.0.1:" + std::to_string(base)
                        + "\",\"127.0.0.1:" + std::to_string(base + 1)
                        + "\"]},\"task\":{\"type\":\"worker\",\"index\":" + std::to_string(rank)
                        + "}}";
    return spawn(argv,
                 environment_with({config, "LOCKSTEP_CLUSTER_TOKEN=join-test-token-0123456789",
                                   "LOCKSTEP_JOB_ID=join-test"}),
                 folder.path() / ("worker" + std::to_string(rank) + ".txt"));
  }
};

/// A TCP connection to 127.0.0.1:`port` that sends `bytes` and then
/// nothing, or -1 when nobody listens there.
int connect_and_send(int port, const std::string& bytes = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  if (!bytes.empty())
    REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  return fd;
}

/// Waits (at most 60 s) until the coordinator listens on `port`.
void await_listener(int port, const process& coordinator) {
  for (int attempt = 0; attempt < 6000; ++attempt) {
    if (const int fd = connect_and_send(port); fd >= 0) {
      ::close(fd);
      return;
    }
    std::this_thread::sleep_for(10ms);
  }
  FAIL("the coordinator never listened on port " << port << ":\n" << coordinator.text());
}

/// Waits (at most 60 s) until `p` has printed `text`.
void await_output(const process& p, const std::string& text) {
  for (int attempt = 0; attempt < 6000; ++attempt) {
    if (has(p.text(), text))
      return;
    std::this_thread::sleep_for(10ms);
  }
  FAIL("no '" << text << "' in:\n" << p.text());
}

/// The metrics file's rows without their times: epoch, loss and accuracies.
std::vector<std::string> figures(const std::filesystem::path& metrics) {
  std::vector<std::string> rows;
  std::istringstream lines(read_file(metrics));
  for (std::string line; std::getline(lines, line);) {
    std::size_t end = 0;
    for (int field = 0; field < 4 && end != std::string::npos; ++field)
      end = line.find(',', end == 0 ? 0 : end + 1);
    rows.push_back(line.substr(0, end));
  }
  return rows;
}

} // namespace

TEST_CASE("the main job: 16 idle and 16 garbage connections during the join change nothing") {
  temp_folder quiet_folder;
  write_data(quiet_folder.path() / "data", 256, 32);
  const main_job quiet{quiet_folder};
  std::vector<process> quiet_workers{quiet.start(0), quiet.start(1)};
  wait_all(quiet_workers, 120s);
  require_all_ok(quiet_workers, "");

  temp_folder folder;
  write_data(folder.path() / "data", 256, 32);
  const main_job job{folder};
  std::vector<process> workers{job.start(0)};
  await_listener(job.base, workers[0]);
  std::vector<int> strangers;
  for (int i = 0; i < 16; ++i)
    strangers.push_back(connect_and_send(job.base));
  for (int i = 0; i < 16; ++i)
    strangers.push_back(connect_and_send(job.base, i % 2 == 0 ? "GET / HTTP/1.0\r\n\r\n"
                                                              : std::string(100, '\x7f')));
  workers.push_back(job.start(1));
  wait_all(workers, 120s);
  for (const int fd : strangers)
    ::close(fd);
  require_all_ok(workers, "");
  CHECK(has(workers[0].text(), "final test accuracy"));
  CHECK(figures(job.metrics()) == figures(quiet.metrics()));
}

TEST_CASE("the main job: a worker with another --lr fails the join on every worker, naming it") {
  temp_folder folder;
  write_data(folder.path() / "data", 256, 32);
  const main_job job{folder};
  std::vector<process> workers{job.start(0), job.start(1, {"--lr", "0.05", "--seed", "4"})};
  wait_all(workers, 120s);
  for (const auto& worker : workers) {
    const auto text = worker.text();
    CHECK_MESSAGE(worker.exited_with(1), worker.how() << "\n" << text); // not 75: no restart
    CHECK_MESSAGE(has(text, "the workers' settings differ (every worker must run with the same): "
                            "--lr is \"0.001\" on worker 0; \"0.05\" on worker 1. --seed is \"3\" "
                            "on worker 0; \"4\" on worker 1"),
                  text);
  }
}

TEST_CASE("the main job: Ctrl-C while joining ends the join at once, on the coordinator and on a "
          "worker") {
  temp_folder folder;
  write_data(folder.path() / "data", 256, 32);
  const main_job job{folder};
  // Each waits for a peer that never comes; the join timeout is 300 s.
  std::vector<process> coordinator{job.start(0)};
  await_listener(job.base, coordinator[0]);
  ::kill(coordinator[0].pid, SIGINT);
  std::vector<process> worker{job.start(1)};
  // Its warning comes once the coordinator has been missing for 5 s.
  await_output(worker[0], "dialing the coordinator at 127.0.0.1:" + std::to_string(job.base));
  ::kill(worker[0].pid, SIGINT);
  wait_all(coordinator, 60s);
  wait_all(worker, 60s);
  for (const auto& p : {coordinator[0], worker[0]}) {
    CHECK_MESSAGE(p.exited_with(130), p.how() << "\n" << p.text());
    CHECK_MESSAGE(has(p.text(), "interrupted: "), p.text());
    CHECK_MESSAGE(has(p.text(), "was cancelled"), p.text());
  }
}
