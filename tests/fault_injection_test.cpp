// LOCKSTEP_FAULT (runtime/fault_injection.hpp): a malformed value is a
// value_error naming the variable; a valid one arms its phase and action
// alone, counts arrivals at that phase only, and fires on the n-th, for the
// worker that LOCKSTEP_FAULT_RANK / LOCKSTEP_FAULT_GENERATION name.
//
// The variables are read once per process, and a fault that fires kills or
// stops its process, so every armed case runs in a forked child of its own
// that walks a list of fault points, telling this process each point before
// it reaches it: the child's end (killed, stopped or finished), the points it
// reached and what it wrote to stderr show which arrival fired and how. This
// process itself never arms a valid value (a refused one is left unread),
// so each child starts unarmed, in any order of the test cases. The kills
// and stops in a real collective are exercised by the multi-worker test, on
// worker processes.

#include "runtime/fault_injection.hpp"

#include "lockstep/error.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

using lockstep::detail::fault_point;
using lockstep::detail::set_fault_worker;

namespace {

const char* const phases[] = {"agree", "reduce-scatter", "all-gather", "fan-out"};

/// One step of a child's walk: an arrival at `phase`, or (phase empty)
/// set_fault_worker(rank, generation).
struct step {
  std::string phase;
  std::size_t rank = 0;
  std::uint64_t generation = 0;
};

/// The one step that names this process's worker.
std::vector<step> worker(std::size_t rank, std::uint64_t generation) {
  return {{"", rank, generation}};
}

/// `rounds` times each of the four phases, in the order of `phases`.
std::vector<step> rounds_of_every_phase(int rounds) {
  std::vector<step> walk;
  for (int r = 0; r < rounds; ++r)
    for (const char* phase : phases)
      walk.push_back({phase});
  return walk;
}

/// `a`, then `b`.
std::vector<step> operator+(std::vector<step> a, const std::vector<step>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// The child's environment: the three variables, each unset when null.
struct fault_env {
  const char* fault = nullptr;
  const char* rank = nullptr;
  const char* generation = nullptr;
};

/// How a child's walk ended.
struct walk_end {
  /// The arrivals it started, in order: the last one is where it ended
  /// when a signal ended it.
  std::vector<std::string> arrivals;
  /// "killed" (SIGKILL), "stopped" (SIGSTOP), "finished" (every step
  /// done, exit 0), "threw" (exit 2, the message on stderr), or what else
  /// ended it.
  std::string how;
  std::string err; // what it wrote to stderr
};

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      ::_exit(3);
    done += static_cast<std::size_t>(n);
  }
}

std::string read_all(int fd) {
  std::string text;
  char buffer[512];
  for (;;) {
    const auto n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return text;
    text.append(buffer, static_cast<std::size_t>(n));
  }
}

void set_or_unset(const char* name, const char* value) {
  if (value == nullptr)
    ::unsetenv(name);
  else
    ::setenv(name, value, 1);
}

/// Walks `walk` in a forked child with `env`: before each arrival the child
/// writes the phase to a pipe; its stderr goes to another. An alarm ends a
/// child that blocks for 20 s, so the wait here is bounded.
walk_end walk_in_child(const fault_env& env, const std::vector<step>& walk) {
  int progress[2], err[2];
  REQUIRE(::pipe(progress) == 0);
  REQUIRE(::pipe(err) == 0);
  const pid_t child = ::fork();
  REQUIRE(child != -1);
  if (child == 0) {
    ::alarm(20);
    ::close(progress[0]);
    ::close(err[0]);
    ::dup2(err[1], STDERR_FILENO);
    ::close(err[1]);
    set_or_unset("LOCKSTEP_FAULT", env.fault);
    set_or_unset("LOCKSTEP_FAULT_RANK", env.rank);
    set_or_unset("LOCKSTEP_FAULT_GENERATION", env.generation);
    try {
      for (const auto& s : walk) {
        if (s.phase.empty()) {
          set_fault_worker(s.rank, s.generation);
          continue;
        }
        write_all(progress[1], s.phase + "\n");
        fault_point(s.phase);
      }
    } catch (const std::exception& e) {
      write_all(STDERR_FILENO, e.what());
      ::_exit(2);
    }
    ::_exit(0);
  }
  ::close(progress[1]);
  ::close(err[1]);
  int status = 0;
  pid_t waited = 0;
  while ((waited = ::waitpid(child, &status, WUNTRACED)) == -1 && errno == EINTR) {
  }
  REQUIRE(waited == child);
  walk_end end;
  if (WIFSTOPPED(status)) {
    end.how = WSTOPSIG(status) == SIGSTOP ? "stopped" : "stopped by signal "
                                                          + std::to_string(WSTOPSIG(status));
    ::kill(child, SIGKILL);
    while (::waitpid(child, &status, 0) == -1 && errno == EINTR) {
    }
  } else if (WIFSIGNALED(status)) {
    end.how = WTERMSIG(status) == SIGKILL ? "killed" : "signal "
                                                         + std::to_string(WTERMSIG(status));
  } else if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    end.how = code == 0 ? "finished" : code == 2 ? "threw" : "exit " + std::to_string(code);
  }
  std::istringstream arrivals(read_all(progress[0]));
  for (std::string phase; std::getline(arrivals, phase);)
    end.arrivals.push_back(phase);
  end.err = read_all(err[0]);
  ::close(progress[0]);
  ::close(err[0]);
  return end;
}

} // namespace

TEST_CASE("malformed LOCKSTEP_FAULT values are refused naming the variable, then a valid one arms") {
  // The variable is read on the first call that parses it: a refused value
  // leaves it unread, so each case here is read afresh.
  for (const char* bad : {"agree", "join:kill", "agree:pause", "agree:kill:0", "agree:kill:x",
                          "all-gather:stop:-1", ":kill"}) {
    CAPTURE(std::string(bad));
    ::setenv("LOCKSTEP_FAULT", bad, 1);
    try {
      fault_point("agree");
      FAIL("accepted");
    } catch (const lockstep::value_error& e) {
      const std::string text = e.what();
      CHECK(text.find("LOCKSTEP_FAULT must be <phase>:<kill|stop>[:<n>]") != std::string::npos);
      CHECK(text.find(std::string("got '") + bad + "'") != std::string::npos);
    }
  }
  ::unsetenv("LOCKSTEP_FAULT");
  // Armed for the third arrival at fan-out (in a child, which it stops):
  // other phases, and the first two arrivals, pass.
  std::vector<step> walk;
  for (int i = 0; i < 5; ++i)
    walk.insert(walk.end(), {{"agree"}, {"reduce-scatter"}, {"all-gather"}});
  walk.insert(walk.end(), {{"fan-out"}, {"fan-out"}, {"fan-out"}, {"agree"}});
  const auto end = walk_in_child({.fault = "fan-out:stop:3"}, walk);
  CHECK(end.how == "stopped");
  CHECK(end.arrivals.size() == 18); // the third fan-out, after 15 others and two fan-outs
  CHECK(end.err == "LOCKSTEP_FAULT: stopped at fan-out\n");
}

TEST_CASE("unset or empty, LOCKSTEP_FAULT arms nothing") {
  const auto walk = worker(0, 0) + rounds_of_every_phase(3);
  for (const char* value : {static_cast<const char*>(nullptr), ""}) {
    CAPTURE(value == nullptr ? "unset" : "empty");
    const auto end = walk_in_child({.fault = value}, walk);
    CHECK(end.how == "finished");
    CHECK(end.arrivals.size() == 12);
    CHECK(end.err == "");
  }
}

TEST_CASE("each phase and action fires on the n-th arrival at that phase and at no other") {
  // Six rounds of all four phases: the n-th arrival at phases[p] is the
  // (4(n - 1) + p + 1)-th of the walk, whatever the other phases did.
  const auto walk = rounds_of_every_phase(6);
  for (std::size_t p = 0; p < 4; ++p)
    for (const char* action : {"kill", "stop"})
      for (const char* count : {"", "1", "2", "5"}) {
        const std::string value = std::string(phases[p]) + ":" + action
                                  + (*count == '\0' ? "" : std::string(":") + count);
        CAPTURE(value);
        const std::size_t n = *count == '\0' ? 1 : std::strtoul(count, nullptr, 10);
        const auto end = walk_in_child({.fault = value.c_str()}, walk);
        const std::string how = std::string(action) == "kill" ? "killed" : "stopped";
        CHECK(end.how == how);
        CHECK(end.arrivals.size() == 4 * (n - 1) + p + 1);
        if (!end.arrivals.empty())
          CHECK(end.arrivals.back() == phases[p]);
        CHECK(end.err == "LOCKSTEP_FAULT: " + how + " at " + phases[p] + "\n");
      }
  // Armed for an arrival the walk never makes: it finishes.
  for (const char* phase : phases) {
    const std::string value = std::string(phase) + ":kill:7";
    CAPTURE(value);
    const auto end = walk_in_child({.fault = value.c_str()}, walk);
    CHECK(end.how == "finished");
    CHECK(end.arrivals.size() == 24);
    CHECK(end.err == "");
  }
}

TEST_CASE("LOCKSTEP_FAULT_RANK and LOCKSTEP_FAULT_GENERATION: only that worker counts and acts") {
  struct filter_case {
    const char* what;
    fault_env env;
    std::vector<step> walk;
    std::string how;      // "killed" or "finished"
    std::size_t arrivals; // the walk's arrivals until it ended
  };
  const auto three = rounds_of_every_phase(3); // 12 arrivals, agree at 1, 5 and 9
  const std::vector<filter_case> cases = {
      {"no filter: any worker, or none named", {.fault = "agree:kill:2"}, three, "killed", 5},
      {"no filter, a worker named", {.fault = "agree:kill:2"}, worker(3, 9) + three, "killed", 5},
      {"an empty rank is no filter", {.fault = "agree:kill:2", .rank = ""}, three, "killed", 5},
      {"a rank, the worker never named", {.fault = "agree:kill", .rank = "1"}, three,
       "finished", 12},
      {"a generation, the worker never named", {.fault = "agree:kill", .generation = "0"}, three,
       "finished", 12},
      {"another rank", {.fault = "agree:kill", .rank = "1"}, worker(0, 0) + three, "finished", 12},
      {"that rank", {.fault = "agree:kill:2", .rank = "1"}, worker(1, 7) + three, "killed", 5},
      {"another generation", {.fault = "agree:kill", .generation = "2"}, worker(1, 1) + three,
       "finished", 12},
      {"that generation", {.fault = "agree:kill:2", .generation = "2"}, worker(0, 2) + three,
       "killed", 5},
      {"that rank in another generation",
       {.fault = "agree:kill", .rank = "1", .generation = "2"}, worker(1, 1) + three, "finished",
       12},
      {"that generation on another rank",
       {.fault = "agree:kill", .rank = "1", .generation = "2"}, worker(0, 2) + three, "finished",
       12},
      {"that rank and generation",
       {.fault = "agree:kill:2", .rank = "1", .generation = "2"}, worker(1, 2) + three, "killed",
       5},
      // Arrivals before the worker is named, or as another worker, do not
      // count: the second as rank 1 fires, the 12 + 12 before it passed.
      {"arrivals before and as another worker do not count",
       {.fault = "agree:kill:2", .rank = "1"}, three + worker(0, 0) + three + worker(1, 0) + three,
       "killed", 29},
  };
  for (const auto& c : cases) {
    CAPTURE(std::string(c.what));
    const auto end = walk_in_child(c.env, c.walk);
    CHECK(end.how == c.how);
    CHECK(end.arrivals.size() == c.arrivals);
    CHECK(end.err == (c.how == "killed" ? "LOCKSTEP_FAULT: killed at agree\n" : ""));
  }
}

TEST_CASE("a malformed LOCKSTEP_FAULT_RANK or LOCKSTEP_FAULT_GENERATION is refused naming it") {
  for (const char* name : {"LOCKSTEP_FAULT_RANK", "LOCKSTEP_FAULT_GENERATION"})
    for (const char* bad : {"x", "-1", "1x", " 1", "1.5", "99999999999999999999"}) {
      CAPTURE(std::string(name));
      CAPTURE(std::string(bad));
      fault_env env{.fault = "agree:kill"};
      (std::string(name) == "LOCKSTEP_FAULT_RANK" ? env.rank : env.generation) = bad;
      const auto end = walk_in_child(env, worker(0, 0) + rounds_of_every_phase(1));
      CHECK(end.how == "threw");
      CHECK(end.arrivals.size() == 1); // the first arrival reads the variables
      CHECK(end.err == std::string(name) + " must be a whole number, got '" + bad + "'");
    }
}

TEST_CASE("ring-connect, outside any collective, fires on its own arrivals only") {
  // A worker connects its ring once per start: the phases of collectives
  // before it (none in a real start) do not count for it.
  const std::vector<step> walk{{"agree"}, {"ring-connect"}, {"fan-out"}, {"ring-connect"}};
  const auto end = walk_in_child({.fault = "ring-connect:kill:2"}, walk);
  CHECK(end.how == "killed");
  CHECK(end.arrivals.size() == 4);
  CHECK(end.err == "LOCKSTEP_FAULT: killed at ring-connect\n");
}
