// The command line of the main job (examples/train_fashion_mnist), driven as
// a person drives it: the built program runs as a child process (its path
// in $TRAIN_FASHION_MNIST, set by tests/meson.build) on a few hundred
// made-up 28x28 images written here as IDX files, and each test checks its
// exit status, what it printed and the files it left. Bad options exit 2
// with the usage; --help states the defaults a run really uses; a plot path
// can never run a command; a diverging loss stops the run; the examples per
// second agree with the epoch's own figures; a resume refuses other
// settings and --resume-from resumes from the file named.

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "child_process.hpp"
#include "fashion_mnist_files.hpp"
#include "file_support.hpp"
#include "timeline_support.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <thread>
#include <csignal>
#include <sys/wait.h>
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

/// How a run of the program ended.
struct outcome {
  int status = -1; // the exit status; -1 if it did not exit normally
  std::string out;
  std::string err;
};

fs::path program() {
  const char* path = std::getenv("TRAIN_FASHION_MNIST");
  REQUIRE_MESSAGE(path != nullptr,
                  "set TRAIN_FASHION_MNIST to the built train_fashion_mnist (meson test does)");
  return fs::absolute(path);
}

/// Runs the program with `args` in the directory `cwd`, stdin from
/// /dev/null, stdout and stderr captured. A run that takes longer than
/// 120 s is killed and fails the test. `workers` > 0: `workers` copies
/// under lockstep-run (LOCKSTEP_RUN), with `launcher_options` and the
/// variables `environment` added.
outcome run(const std::vector<std::string>& args, const fs::path& cwd, int workers = 0,
            const std::vector<std::string>& launcher_options = {},
            const std::vector<std::string>& environment = {}) {
  static temporary_directory logs{"train_cli_logs"};
  static int count = 0;
  const auto out_path = logs.path() / ("out." + std::to_string(count));
  const auto err_path = logs.path() / ("err." + std::to_string(count++));
  const auto binary = program();
  std::vector<std::string> strings{binary.string()};
  if (workers > 0) {
    const char* launcher = std::getenv("LOCKSTEP_RUN");
    REQUIRE_MESSAGE(launcher != nullptr, "set LOCKSTEP_RUN to the built lockstep-run (meson does)");
    strings.insert(strings.begin(), {launcher, "-n", std::to_string(workers)});
    strings.insert(strings.begin() + 3, launcher_options.begin(), launcher_options.end());
  }
  strings.insert(strings.end(), args.begin(), args.end());

  const auto exit = run_child_process({.argv = strings,
                                       .extra_env = environment,
                                       .cwd = cwd,
                                       .out = out_path,
                                       .err = err_path,
                                       .limit = std::chrono::seconds(120)});
  if (exit.timed_out)
    FAIL("train_fashion_mnist ran for more than 120 s and was killed");
  outcome result;
  result.status = exit.status;
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  return result;
}

/// A directory with a data set of 256 training images (8 steps of the
/// tests' global batch 32) and 32 test images, and the options that train
/// on it with 2 replicas, writing the metrics and the plot in the directory.
struct workspace {
  temporary_directory dir{"train_cli"};
  workspace() { write_data(data(), 256, 32); }
  fs::path data() const { return dir.path() / "data"; }
  fs::path metrics() const { return dir.path() / "metrics.csv"; }
  std::vector<std::string> options(std::vector<std::string> more) const {
    std::vector<std::string> all{"--data-dir", data().string(), "--metrics", metrics().string(),
                                 "--replicas", "2", "--global-batch", "32"};
    all.insert(all.end(), more.begin(), more.end());
    return all;
  }
};

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The first match of `pattern`'s group 1 in `text`; fails the test if none.
std::string capture(const std::string& text, const std::string& pattern) {
  std::smatch match;
  REQUIRE_MESSAGE(std::regex_search(text, match, std::regex(pattern)),
                  "no match for " << pattern << " in:\n" << text);
  return match[1].str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream in{text};
  while (std::getline(in, line))
    lines.push_back(line);
  return lines;
}

/// "12,345" -> 12345.
double without_commas(std::string text) {
  std::erase(text, ',');
  return std::stod(text);
}

/// A metrics row's epoch, loss and accuracies: its first four fields (not
/// the times).
std::string figures(const std::string& row) {
  auto end = std::string::npos;
  for (std::size_t field = 0, at = 0; field < 4; ++field, at = end + 1)
    end = row.find(',', at);
  return row.substr(0, end);
}

/// The checkpoint files in `dir`, 0 if there is no such directory.
int checkpoints_in(const fs::path& dir) {
  int count = 0;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      count += e.path().extension() == ".safetensors" ? 1 : 0;
  return count;
}

bool gnuplot_installed() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs{path != nullptr ? path : ""};
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    if (!dir.empty() && ::access((fs::path(dir) / "gnuplot").c_str(), X_OK) == 0)
      return true;
  return false;
}

} // namespace

TEST_CASE("every bad option exits 2 with the usage, naming the option and the value") {
  const temporary_directory dir{"train_cli"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--replicas", "0"}, "--replicas: expected a whole number in [1, 4095], got '0'"},
      {{"--replicas", "4096"}, "--replicas: expected a whole number in [1, 4095], got '4096'"},
      {{"--replicas", "2x"}, "--replicas: expected a whole number in [1, 4095], got '2x'"},
      {{"--replicas"}, "--replicas: missing value"},
      {{"--epochs", "-1"}, "--epochs: expected a whole number"},
      {{"--epochs", " 3"}, "--epochs: expected a whole number in [1, 2147483647], got ' 3'"},
      {{"--epochs", ""}, "--epochs: expected a whole number in [1, 2147483647], got ''"},
      {{"--global-batch", "1.5"}, "--global-batch: expected a whole number"},
      {{"--seed", "-3"}, "--seed: expected a whole number"},
      {{"--seed", "99999999999999999999"}, "--seed: expected a whole number"},
      {{"--steps-per-call", "0"}, "--steps-per-call: expected a whole number"},
      {{"--lr", "0"}, "--lr: expected a positive number, got '0'"},
      {{"--lr", "nan"}, "--lr: expected a positive number, got 'nan'"},
      {{"--lr", "inf"}, "--lr: expected a positive number, got 'inf'"},
      {{"--lr", "1e999"}, "--lr: expected a positive number, got '1e999'"},
      {{"--lr-decay", "1.5"}, "--lr-decay: expected a number in (0, 1], got '1.5'"},
      {{"--optimizer", "rmsprop"}, "--optimizer: expected adam or sgd, got 'rmsprop'"},
      {{"--optimizer", "\xff\x1b[2J\n"}, "--optimizer: expected adam or sgd, got '\\xff\\x1b[2J\\n'"},
      {{"--bogus", "1"}, "unknown option '--bogus'"},
      {{"--epochs=3"}, "unknown option '--epochs=3'"},
      {{"--checkpoint-dir", ""}, "--checkpoint-dir: expected a path, got an empty one"},
      {{"--resume-from", ""}, "--resume-from: expected a path, got an empty one"},
      {{"--metrics", ""}, "--metrics: expected a path, got an empty one"},
      {{"--plot", ""}, "--plot: expected a path, got an empty one"},
      {{"--data-dir", ""}, "--data-dir: expected a path, got an empty one"},
      {{"--timeline", ""}, "--timeline: expected a path, got an empty one"},
      {{"--timeline-steps", "every:0"},
       "--timeline-steps: expected first:F,last:L, A-B or every:K, got 'every:0'"},
      {{"--slow-replica", "1"}, "--slow-replica: expected R:MS (a replica and milliseconds), got '1'"},
      {{"--slow-replica", "x:5"}, "--slow-replica: expected a whole number"},
      {{"--slow-input", "-1"}, "--slow-input: expected a whole number"},
  };
  for (const auto& [args, message] : cases) {
    CAPTURE(args.front());
    CAPTURE(message);
    const auto result = run(args, dir.path());
    CHECK(result.status == 2);
    CHECK(has(result.err, "train_fashion_mnist: " + message));
    CHECK(has(result.err, "usage: train_fashion_mnist [options]"));
    CHECK(result.out.empty());
  }
  // The largest replica count the library runs is accepted: the run goes
  // on to read the data (missing here, so it stops there, with status 1).
  const auto most = run({"--replicas", "4095", "--data-dir", "no-such-dir"}, dir.path());
  CHECK(most.status == 1);
  CHECK(has(most.err, "no-such-dir"));
  CHECK_FALSE(has(most.err, "usage:"));
  // Nothing was written where the program ran.
  CHECK(fs::is_empty(dir.path()));
}

TEST_CASE("a global batch larger than the training set is a bad option") {
  const workspace w;
  const auto result = run(w.options({"--global-batch", "257"}), w.dir.path());
  CHECK(result.status == 2);
  CHECK(has(result.err, "--global-batch: 257 is larger than the training set (256 examples in "));
  CHECK(has(result.err, "usage:"));
}

TEST_CASE("--help states the defaults that a run with no options uses") {
  const temporary_directory dir{"train_cli"};
  const auto help = run({"--help"}, dir.path());
  REQUIRE(help.status == 0);
  CHECK(help.err.empty());
  const auto replicas = capture(help.out, R"(--replicas N .*default: the number of cores \((\d+) here\))");
  const auto epochs = capture(help.out, R"(--epochs E .*default (\d+))");
  const auto batch = capture(help.out, R"(--global-batch B .*default (\d+))");
  const auto lr = capture(help.out, R"(--lr X .*default ([0-9.e-]+) \(adam\))");
  const auto decay = capture(help.out, R"(--lr-decay D .*default ([0-9.]+))");
  const auto seed = capture(help.out, R"(--seed S .*default (\d+))");
  const auto steps = capture(help.out, R"(--steps-per-call K .*default (\d+))");
  const auto metrics = capture(help.out, R"(--metrics FILE .*default (\S+))");
  CHECK(batch == "128"); // the issue: --help said 158

  // The run: only the data is given, 128 images so that the default batch
  // fits (one step an epoch).
  write_data(dir.path() / "data", 128, 16);
  const auto result = run({"--data-dir", (dir.path() / "data").string()}, dir.path());
  REQUIRE(result.status == 0);
  CHECK(has(result.out, "model MLP 784-256-128-100-10, adam lr " + lr + " (x" + decay
                            + " an epoch), " + replicas + " replicas, global batch " + batch
                            + ", " + epochs + " epochs, seed " + seed + ", " + steps
                            + " steps per call\n"));
  const auto rows = lines_of(read_file(dir.path() / metrics));
  CHECK(rows.size() == 1 + std::stoul(epochs));
  CHECK(has(result.out, "steps " + epochs + ", this run ")); // one step an epoch
  if (gnuplot_installed())
    CHECK(fs::is_regular_file(dir.path() / fs::path(metrics).replace_extension(".svg")));
}

TEST_CASE("a plot path is never a gnuplot command, and the plot lands at exactly that path") {
  if (!gnuplot_installed()) {
    MESSAGE("gnuplot is not installed: skipped (apt-get install gnuplot-nox)");
    return;
  }
  const workspace w;
  // Inside `set output '...'` this path would close the quote, run a
  // shell command on the next line, and open a quote again.
  const std::string name = "curves'\nsystem \"touch pwned\"\nset output 'x.svg";
  const auto plot = w.dir.path() / name;
  const auto result = run(w.options({"--epochs", "2", "--plot", plot.string()}), w.dir.path());
  INFO(result.err);
  REQUIRE(result.status == 0);
  CHECK_FALSE(fs::exists(w.dir.path() / "pwned"));
  REQUIRE(fs::is_regular_file(plot));
  CHECK(has(read_file(plot), "<svg"));
  // The path is printed escaped, on one line.
  CHECK(has(result.out, "plot: " + w.dir.path().string()
                            + "/curves'\\nsystem \"touch pwned\"\\nset output 'x.svg\n"));
  // Nothing else was left: no script or log next to the plot.
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(w.dir.path()))
    entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  CHECK(entries == std::vector<std::string>{name, "data", "metrics.csv"});
}

TEST_CASE("a job killed while gnuplot runs leaves no gnuplot running and no plot folder") {
  const workspace w;
  // A gnuplot (first on PATH) that notes its pid, kills the job that
  // started it with SIGKILL, and would then run on for a minute.
  const auto bin = w.dir.path() / "bin";
  const auto tmp = w.dir.path() / "tmp"; // $TMPDIR: where a plot folder would go
  fs::create_directories(bin);
  fs::create_directories(tmp);
  const auto pid_file = w.dir.path() / "gnuplot.pid";
  write_file(bin / "gnuplot", "#!/bin/sh\necho $$ > '" + pid_file.string()
                                  + "'\nkill -9 $PPID\nexec sleep 60\n");
  fs::permissions(bin / "gnuplot", fs::perms::owner_all);
  const char* path = std::getenv("PATH");
  const auto result
    = run(w.options({"--epochs", "1", "--plot", (w.dir.path() / "plot.svg").string()}),
          w.dir.path(), 0, {},
          {"PATH=" + bin.string() + ":" + (path != nullptr ? path : ""), "TMPDIR=" + tmp.string()});
  CHECK(result.status == -1); // killed
  REQUIRE_MESSAGE(fs::exists(pid_file), result.err);
  const auto gnuplot = std::stoi(read_file(pid_file));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!has_ended(gnuplot) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_MESSAGE(has_ended(gnuplot), "gnuplot (pid " << gnuplot << ") outlived the job that started it");
  if (!has_ended(gnuplot))
    ::kill(gnuplot, SIGKILL);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp))
    left.push_back(e.path().filename().string());
  CHECK_MESSAGE(left.empty(), "left in $TMPDIR: " << left.front());
}

TEST_CASE("outputs such as /dev/null stay allowed") {
  const workspace w;
  const auto result = run(w.options({"--epochs", "1", "--metrics", "/dev/null", "--plot",
                                     "/dev/null"}),
                          w.dir.path());
  INFO(result.err);
  CHECK(result.status == 0);
  struct stat info {};
  REQUIRE(::stat("/dev/null", &info) == 0);
  CHECK(S_ISCHR(info.st_mode));
}

TEST_CASE("an unwritable metrics or plot path is reported before training, and nothing is truncated") {
  const workspace w;
  const auto no_dir = (w.dir.path() / "no-such-dir" / "metrics.csv").string();
  auto result = run(w.options({"--metrics", no_dir}), w.dir.path());
  CHECK(result.status == 1);
  CHECK(has(result.err, "cannot write the metrics to '" + no_dir
                            + "': No such file or directory"));
  CHECK_FALSE(has(result.out, "Fashion-MNIST from")); // before the data was read

  // A plot path that is a directory; the metrics of an earlier run stay.
  write_file(w.metrics(), "earlier rows\n");
  result = run(w.options({"--plot", w.data().string()}), w.dir.path());
  CHECK(result.status == 1);
  CHECK(has(result.err, "cannot write the plot to '" + w.data().string() + "': Is a directory"));
  CHECK(read_file(w.metrics()) == "earlier rows\n");
  // A path with bytes that are not UTF-8 is escaped in the message.
  result = run(w.options({"--metrics", (w.dir.path() / "\xff/m.csv").string()}), w.dir.path());
  CHECK(result.status == 1);
  CHECK(has(result.err, "/\\xff/m.csv'"));
}

TEST_CASE("--slow-replica and --slow-input show in the timeline as a straggler and input waits") {
  const workspace w;
  const auto spans_of = [](const fs::path& path) {
    const auto trace = read_trace(path);
    std::map<int, std::string> rows;
    for (const auto& e : trace)
      if (e["ph"] == "M" && e["name"] == "thread_name")
        rows[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
    // (row, name) -> the spans, in the order written
    std::map<std::pair<std::string, std::string>, std::vector<nlohmann::json>> spans;
    for (const auto& e : trace)
      if (e["ph"] == "X")
        spans[{rows.at(e["tid"].get<int>()), e["name"].get<std::string>()}].push_back(e);
    return spans;
  };
  const double delay_us = 20'000;
  SUBCASE("a straggler: replica 1 reaches each all_reduce at least 20 ms into its run") {
    const auto trace = w.dir.path() / "straggler.json";
    const auto result = run(w.options({"--epochs", "1", "--steps-per-call", "1", "--slow-replica", "1:20",
                                       "--timeline", trace.string()}),
                            w.dir.path());
    REQUIRE(result.status == 0);
    auto spans = spans_of(trace);
    std::map<std::int64_t, double> run_start; // replica 1's runs by step
    for (const auto& r : spans[{"replica 1", "run"}])
      run_start[r["args"]["step"].get<std::int64_t>()] = r["ts"].get<double>();
    const auto& late = spans[{"replica 1", "all_reduce"}];
    const auto& waiting = spans[{"replica 0", "all_reduce"}];
    REQUIRE(late.size() == 8); // 256 examples, batch 32: 8 steps, all in the window
    REQUIRE(waiting.size() == late.size());
    for (std::size_t s = 0; s < late.size(); ++s) {
      CAPTURE(s);
      const auto step = late[s]["args"]["step"].get<std::int64_t>();
      REQUIRE(run_start.count(step) == 1);
      CHECK(late[s]["ts"].get<double>() - run_start[step] >= delay_us);
      // Replica 0 waited in its all_reduce until replica 1 came.
      CHECK(waiting[s]["args"]["step"] == step);
      CHECK(waiting[s]["ts"].get<double>() + waiting[s]["dur"].get<double>()
            >= late[s]["ts"].get<double>());
    }
  }
  SUBCASE("input-bound: every batch takes at least 20 ms to make") {
    const auto trace = w.dir.path() / "input.json";
    const auto result = run(w.options({"--epochs", "1", "--steps-per-call", "1", "--slow-input", "20",
                                       "--timeline", trace.string()}),
                            w.dir.path());
    REQUIRE(result.status == 0);
    auto spans = spans_of(trace);
    // The training set's 8 batches each took the delay (the test set's
    // pipeline takes none, unless a busy host stalls it as long).
    const auto& made = spans[{"input actor", "produce"}];
    const auto slow = std::count_if(made.begin(), made.end(), [&](const nlohmann::json& p) {
      return p["dur"].get<double>() >= delay_us;
    });
    CHECK(slow >= 8);
    CHECK(spans[{"input wait", "input wait"}].size() >= 8);
  }
}

TEST_CASE("SIGUSR1 makes a running job write its flight recorders, and it goes on") {
  const workspace w;
  const auto args = w.options({"--epochs", "1", "--steps-per-call", "1", "--slow-input", "400"});
  std::vector<std::string> argv_text{program().string()};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_text)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The flight recorders go to the current folder (no timeline).
    if (::chdir(w.dir.path().c_str()) != 0)
      ::_exit(127);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  // Eight batches of 400 ms: the job runs about 3 s; it watches SIGUSR1
  // from its first line, and has run steps after 2 s.
  std::this_thread::sleep_for(std::chrono::seconds{2});
  REQUIRE(::kill(child, SIGUSR1) == 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0); // the signal stopped nothing
  const auto dump = w.dir.path() / ("flight-" + std::to_string(child) + "-0.json");
  REQUIRE(fs::exists(dump));
  const auto events = read_trace(dump);
  const auto collectives = std::count_if(events.begin(), events.end(), [](const auto& e) {
    return e["name"] == "collective";
  });
  CHECK(collectives >= 1);
}

TEST_CASE("a loss that is not finite stops training with an error naming the epoch and step") {
  const workspace w;
  for (const char* steps_per_call : {"1", "8"}) {
    CAPTURE(steps_per_call);
    const auto checkpoints = w.dir.path() / ("ckpt-" + std::string(steps_per_call));
    const auto result = run(w.options({"--lr", "1e30", "--steps-per-call", steps_per_call,
                                       "--checkpoint-dir", checkpoints.string()}),
                            w.dir.path());
    CHECK(result.status == 1);
    CHECK(has(result.err, "the loss is not finite"));
    CHECK(has(result.err, "at epoch 1, step "));
    CHECK(has(result.err, "try a lower learning rate"));
    // Nothing diverged was saved.
    CHECK(checkpoints_in(checkpoints) == 0);
  }
}

TEST_CASE("two workers under lockstep-run: the chief alone reports, with one process's results") {
  const workspace alone;
  auto options = alone.options({"--epochs", "2", "--seed", "3"});
  const auto single = run(options, alone.dir.path());
  REQUIRE_MESSAGE(single.status == 0, single.err);

  const workspace cluster;
  options = cluster.options({"--epochs", "2", "--seed", "3", "--replicas", "1"}); // 2 x 1
  const auto workers = run(options, cluster.dir.path(), 2);
  REQUIRE_MESSAGE(workers.status == 0, workers.out << workers.err);
  CHECK(has(workers.out, "[0] model MLP"));
  CHECK(has(workers.out, "2 workers x 1 replicas"));
  CHECK(has(workers.out, "[0] steps 16,"));
  CHECK_FALSE(has(workers.out + workers.err, "[1] ")); // worker 1 trains in silence
  // The same global batches, split alike, summed in the same order.
  const auto accuracy = [](const std::string& out) {
    return std::stod(capture(out, R"(final test accuracy ([0-9.]+))"));
  };
  CHECK(std::abs(accuracy(workers.out) - accuracy(single.out)) <= 0.01);
  const auto rows = lines_of(read_file(cluster.metrics()));
  REQUIRE(rows.size() == 3);
  const auto expected = lines_of(read_file(alone.metrics()));
  for (std::size_t i = 1; i < rows.size(); ++i) // the same to the last digit
    CHECK(figures(rows[i]) == figures(expected[i]));
}

TEST_CASE("two workers: the chief alone writes checkpoints, and every worker resumes from them") {
  const std::vector<std::string> settings{"--seed", "3", "--replicas", "1"};
  const auto with = [&](std::vector<std::string> more) {
    more.insert(more.end(), settings.begin(), settings.end());
    return more;
  };
  const workspace straight;
  const auto whole = run(straight.options(with({"--epochs", "2"})), straight.dir.path(), 2);
  REQUIRE_MESSAGE(whole.status == 0, whole.out << whole.err);

  const workspace w;
  const auto checkpoints = (w.dir.path() / "ckpt").string();
  const auto first =
    run(w.options(with({"--epochs", "1", "--checkpoint-dir", checkpoints})), w.dir.path(), 2);
  REQUIRE_MESSAGE(first.status == 0, first.out << first.err);
  CHECK(checkpoints_in(checkpoints) == 1);
  CHECK(has(first.err, "[0] saved " + checkpoints + "/ckpt-8.safetensors"));
  CHECK_FALSE(has(first.out + first.err, "[1] "));
  // Worker 1 must resume too: had it started again from step 0, the
  // workers' collectives would not match and the run would fail.
  const auto second =
    run(w.options(with({"--epochs", "2", "--checkpoint-dir", checkpoints})), w.dir.path(), 2);
  REQUIRE_MESSAGE(second.status == 0, second.out << second.err);
  CHECK(has(second.err, "[0] resumed from " + checkpoints + "/ckpt-8.safetensors at step 8"));
  CHECK(checkpoints_in(checkpoints) == 2);
  const auto rows = lines_of(read_file(w.metrics()));
  const auto expected = lines_of(read_file(straight.metrics()));
  REQUIRE(rows.size() == expected.size());
  for (std::size_t i = 1; i < rows.size(); ++i) // the same to the last digit
    CHECK(figures(rows[i]) == figures(expected[i]));
}

TEST_CASE("a worker killed after the first checkpoint: lockstep-run restarts the world, "
          "which ends with the weights of a run never interrupted, bit for bit") {
  const auto options = [](const workspace& w) {
    return w.options({"--epochs", "2", "--seed", "3", "--replicas", "1", "--checkpoint-dir",
                      (w.dir.path() / "ckpt").string()});
  };
  const workspace straight;
  const auto whole = run(options(straight), straight.dir.path(), 2);
  REQUIRE_MESSAGE(whole.status == 0, whole.out << whole.err);

  // Worker 1 of the first generation kills itself in the 12th all-reduce's
  // reduce-scatter: step 12 of 16, after the checkpoint of step 8.
  const workspace w;
  const auto restarted
    = run(options(w), w.dir.path(), 2, {"--max-restarts", "1"},
          {"LOCKSTEP_FAULT=reduce-scatter:kill:12", "LOCKSTEP_FAULT_RANK=1",
           "LOCKSTEP_FAULT_GENERATION=0"});
  REQUIRE_MESSAGE(restarted.status == 0, restarted.out << restarted.err);
  CHECK(has(restarted.err, "worker 1 failed (killed by signal 9 (SIGKILL))"));
  CHECK(has(restarted.err, "restart 1 of 1 (generation 1)"));
  const auto checkpoints = (w.dir.path() / "ckpt").string();
  CHECK(has(restarted.err, "[0] resumed from " + checkpoints + "/ckpt-8.safetensors at step 8"));
  // The same weights, optimizer slots and step: the same file.
  const auto last = [](const workspace& run) {
    return read_file(run.dir.path() / "ckpt" / "ckpt-16.safetensors");
  };
  CHECK(last(w) == last(straight));
  const auto rows = lines_of(read_file(w.metrics()));
  const auto expected = lines_of(read_file(straight.metrics()));
  REQUIRE(rows.size() == expected.size());
  for (std::size_t i = 1; i < rows.size(); ++i)
    CHECK(figures(rows[i]) == figures(expected[i]));
}

TEST_CASE("examples per second count the steps this process ran, timed from before the first call") {
  const workspace w;
  // One call takes a whole epoch: its steps were once counted without
  // their time (hundreds of millions of examples per second).
  const auto result
      = run(w.options({"--epochs", "2", "--steps-per-call", "1000"}), w.dir.path());
  REQUIRE(result.status == 0);
  const auto progress = lines_of(result.err);
  const auto csv = lines_of(read_file(w.metrics()));
  REQUIRE(csv.size() == 3);
  const auto run_seconds = std::stod(capture(result.out, R"(this run ([0-9.e+-]+) s)"));
  int epoch = 0;
  for (const auto& line : progress) {
    if (!has(line, " ex/s"))
      continue;
    ++epoch;
    CAPTURE(line);
    REQUIRE(epoch <= 2);
    CHECK(has(line, "epoch " + std::to_string(epoch) + "/2 "));
    const auto rate = without_commas(capture(line, R"(([0-9,]+) ex/s)"));
    // The epoch's row: its examples per second, over the same steps.
    const auto row = csv[static_cast<std::size_t>(epoch)];
    const auto row_rate = std::stod(row.substr(row.rfind(',') + 1));
    CAPTURE(row_rate);
    CHECK(rate > 0);
    CHECK(rate <= 2 * row_rate);
    CHECK(rate >= 0.5 * row_rate);
    // 256 examples took at most the whole run.
    CHECK(rate * run_seconds >= 0.5 * 256);
  }
  CHECK(epoch == 2);
}

TEST_CASE("a resume refuses other settings, and accepts other replicas and steps per call") {
  const workspace w;
  const auto checkpoints = (w.dir.path() / "checkpoints").string();
  const auto first = run(w.options({"--epochs", "1", "--checkpoint-dir", checkpoints}),
                         w.dir.path());
  REQUIRE(first.status == 0);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--seed", "7"}, "it was saved with seed 42, this run has 7"},
      {{"--lr", "0.002"}, "it was saved with learning rate 0.001, this run has 0.002"},
      {{"--lr-decay", "0.5"}, "it was saved with learning-rate decay 0.85, this run has 0.5"},
      {{"--optimizer", "sgd"}, "it was saved with optimizer adam, this run has sgd"},
      {{"--global-batch", "16"}, "it was saved with global batch 32, this run has 16"},
  };
  for (const auto& [args, message] : cases) {
    CAPTURE(message);
    auto options = w.options({"--epochs", "2", "--checkpoint-dir", checkpoints});
    options.insert(options.end(), args.begin(), args.end());
    const auto result = run(options, w.dir.path());
    CHECK(result.status == 1);
    CHECK(has(result.err, "cannot resume from " + checkpoints + "/ckpt-8.safetensors: "
                              + message));
  }
  const auto resumed = run(w.options({"--epochs", "2", "--checkpoint-dir", checkpoints,
                                      "--replicas", "1", "--steps-per-call", "3"}),
                           w.dir.path());
  INFO(resumed.err);
  CHECK(resumed.status == 0);
  CHECK(has(resumed.err, "resumed from " + checkpoints + "/ckpt-8.safetensors at step 8"));
  CHECK(lines_of(read_file(w.metrics())).size() == 3); // the first run's row kept
}

TEST_CASE("--resume-from resumes from the file named when the newest cannot be read") {
  const workspace w;
  const auto checkpoints = w.dir.path() / "checkpoints";
  REQUIRE(run(w.options({"--epochs", "2", "--checkpoint-dir", checkpoints.string()}),
              w.dir.path())
              .status
          == 0);
  const auto newest = checkpoints / "ckpt-16.safetensors";
  const auto older = checkpoints / "ckpt-8.safetensors";
  REQUIRE(fs::is_regular_file(newest));
  REQUIRE(fs::is_regular_file(older));
  fs::resize_file(newest, fs::file_size(newest) / 2);

  const auto refused = run(w.options({"--epochs", "3", "--checkpoint-dir", checkpoints.string()}),
                           w.dir.path());
  CHECK(refused.status == 1);
  CHECK(has(refused.err, "ckpt-16.safetensors"));
  CHECK(has(refused.err, "--resume-from FILE"));

  const auto resumed = run(w.options({"--epochs", "3", "--checkpoint-dir", checkpoints.string(),
                                      "--resume-from", older.string()}),
                           w.dir.path());
  INFO(resumed.err);
  CHECK(resumed.status == 0);
  CHECK(has(resumed.err, "resumed from " + older.string() + " at step 8"));
  CHECK(has(resumed.err, "later checkpoints go to " + checkpoints.string()));
  CHECK(has(resumed.out, "steps 24, "));
  CHECK(fs::is_regular_file(checkpoints / "ckpt-24.safetensors"));

  const auto missing = run(w.options({"--resume-from", (w.dir.path() / "none").string()}),
                           w.dir.path());
  CHECK(missing.status == 1);
  CHECK(has(missing.err, (w.dir.path() / "none").string()));
}
