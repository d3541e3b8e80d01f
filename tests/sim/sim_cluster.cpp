#include "sim_cluster.hpp"

#include "lockstep/error.hpp"

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <xbt/log.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace lockstep::detail::sim {

namespace sg4 = simgrid::s4u;

namespace {

// -- what the child sends back: per rank, length-prefixed fields -------------

void put_text(std::string& out, const std::string& text) {
  out += std::to_string(text.size()) + ":" + text;
}

std::string take_text(const std::string& in, std::size_t& at) {
  const auto colon = in.find(':', at);
  if (colon == std::string::npos)
    throw std::runtime_error("simulation: malformed result from the child");
  const auto length = std::stoull(in.substr(at, colon - at));
  at = colon + 1 + length;
  if (at > in.size())
    throw std::runtime_error("simulation: truncated result from the child");
  return in.substr(colon + 1, length);
}

std::string encode(const simulation& sim) {
  std::string out;
  for (const auto& r : sim.ranks) {
    char end[64];
    std::snprintf(end, sizeof end, "%a", r.end_s);
    put_text(out, r.stopped ? "1" : "0");
    put_text(out, r.error_type);
    put_text(out, r.error);
    put_text(out, r.problem);
    put_text(out, end);
  }
  return out;
}

simulation decode(const std::string& in, std::size_t ranks) {
  simulation sim;
  std::size_t at = 0;
  for (std::size_t r = 0; r < ranks; ++r) {
    rank_outcome o;
    o.stopped = take_text(in, at) == "1";
    o.error_type = take_text(in, at);
    o.error = take_text(in, at);
    o.problem = take_text(in, at);
    o.end_s = std::strtod(take_text(in, at).c_str(), nullptr);
    sim.ranks.push_back(std::move(o));
  }
  return sim;
}

/// The child: the engine, the platform, one actor per host.
std::string run_child(const platform_spec& spec, sim_network network, const rank_work& work) {
  std::vector<std::string> args{"lockstep-sim", "--log=root.thresh:critical"};
  for (const auto& setting : engine_settings())
    args.push_back("--cfg=" + setting);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  sg4::Engine engine(&argc, argv.data());
  const auto hosts = build_platform(spec);
  simulation sim;
  sim.ranks.resize(spec.hosts);
  network.actor_ids.resize(spec.hosts);
  for (std::size_t r = 0; r < spec.hosts; ++r)
    network.actor_ids[r] = sg4::Actor::create("rank" + std::to_string(r), hosts[r], [&, r] {
      auto& outcome = sim.ranks[r];
      try {
        sim_link link(network, r);
        link.pace_from(paced_from_bytes(costs_of(spec))); // as a communicator paces
        outcome.problem = work(link);
      } catch (const host_stopped&) {
        outcome.stopped = true;
      } catch (const link_deadline_passed& e) {
        outcome.error_type = "link_deadline_passed";
        outcome.error = e.what();
      } catch (const link_closed& e) {
        outcome.error_type = "link_closed";
        outcome.error = e.what();
      } catch (const value_error& e) {
        outcome.error_type = "value_error";
        outcome.error = e.what();
      } catch (const std::exception& e) {
        outcome.error_type = "other";
        outcome.error = e.what();
      }
      outcome.end_s = sg4::Engine::get_clock();
    })->get_pid();
  engine.run();
  return encode(sim);
}

void write_all(int fd, const std::string& text) {
  for (std::size_t at = 0; at < text.size();) {
    const auto n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    at += static_cast<std::size_t>(n);
  }
}

} // namespace

double simulation::seconds() const {
  double latest = 0;
  for (const auto& r : ranks)
    if (!r.stopped)
      latest = std::max(latest, r.end_s);
  return latest;
}

std::string simulation::first_problem() const {
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].problem.empty())
      return "rank " + std::to_string(r) + ": " + ranks[r].problem;
    if (!ranks[r].error_type.empty())
      return "rank " + std::to_string(r) + " threw " + ranks[r].error_type + ": "
             + ranks[r].error;
  }
  return "";
}

simulation simulate(const platform_spec& spec, sim_network network, const rank_work& work) {
  network.size = spec.hosts;
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0)
    throw std::runtime_error(std::string("simulation: pipe: ") + std::strerror(errno));
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0)
    throw std::runtime_error(std::string("simulation: fork: ") + std::strerror(errno));
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::string result;
    int status = 0;
    try {
      result = "ok " + run_child(spec, network, work);
    } catch (const std::exception& e) {
      result = std::string("error ") + e.what();
      status = 1;
    }
    write_all(pipe_fds[1], result);
    ::close(pipe_fds[1]);
    ::_exit(status);
  }
  ::close(pipe_fds[1]);
  std::string result;
  char buffer[65536];
  for (;;) {
    const auto n = ::read(pipe_fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    result.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (result.rfind("ok ", 0) != 0) {
    const auto how = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                         : "exit status " + std::to_string(WEXITSTATUS(status));
    throw std::runtime_error("simulation of " + std::to_string(spec.hosts) + " hosts ("
                             + to_string(spec.shape) + ") failed (" + how + ")"
                             + (result.empty() ? "" : ": " + result));
  }
  return decode(result.substr(3), spec.hosts);
}

} // namespace lockstep::detail::sim
