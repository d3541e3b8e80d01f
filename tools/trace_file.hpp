#pragma once

// Reading a trace-event file back, for the timeline tools (timeline-plot,
// lockstep-timeline). Header only: each tool is one program.

#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>
#include <string>

/// The events of the trace at `path`: a JSON array, or the "traceEvents"
/// of an object. std::invalid_argument naming the file when it cannot be
/// read or is not a trace.
inline nlohmann::json read_trace_file(const std::string& path) {
  std::ifstream in{path};
  if (!in)
    throw std::invalid_argument("cannot read " + path);
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(path + " is not JSON: " + e.what());
  }
  if (trace.is_object() && trace.contains("traceEvents"))
    trace = trace["traceEvents"];
  if (!trace.is_array())
    throw std::invalid_argument(path + " is not a trace-event array");
  return trace;
}
