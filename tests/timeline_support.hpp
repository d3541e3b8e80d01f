#pragma once

// What the timeline tests share: the options for one test, and reading a
// trace back.

#include "lockstep/runtime_options.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

/// Sets runtime_options::timeline (and timeline_steps) for one test and
/// puts the old options back.
struct timeline_options {
  explicit timeline_options(const std::string& path, const std::string& steps = "")
    : previous(lockstep::get_runtime_options()) {
    auto options = previous;
    options.timeline = path;
    options.timeline_steps = steps;
    lockstep::set_runtime_options(options);
  }
  ~timeline_options() { lockstep::set_runtime_options(previous); }
  timeline_options(const timeline_options&) = delete;
  timeline_options& operator=(const timeline_options&) = delete;
  lockstep::runtime_options previous;
};

/// The trace-event JSON at `path`; fails the test when it is missing, and
/// throws when it is not JSON.
inline nlohmann::json read_trace(const std::filesystem::path& path) {
  std::ifstream in{path};
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}
