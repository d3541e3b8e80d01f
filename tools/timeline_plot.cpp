// timeline-plot: renders a lockstep timeline (docs/timeline.md) as SVG:
// one row per track (replicas, the strategy, variables, input), each span
// a bar at its time, coloured by kind (collectives by op), with a time
// axis in milliseconds.
//
//   timeline-plot TRACE.json [--steps A-B] [--width PX] [--title TEXT] -o OUT.svg
//
// --steps keeps the spans whose step is in [A, B] (default: all). Exit
// status 0, or 2 with a message naming the problem (unreadable or
// malformed trace, bad option, nothing to draw).

#include "trace_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace {

using json = nlohmann::json;

struct options {
  std::string input;
  std::string output;
  std::string title;
  long long first_step = std::numeric_limits<long long>::min();
  long long last_step = std::numeric_limits<long long>::max();
  int width = 1200;
};

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument(what);
}

long long number(const std::string& flag, std::string_view text) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value < 0)
    fail(flag + ": expected a whole number, got '" + std::string{text} + "'");
  return value;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        fail(arg + ": missing value");
      return argv[++i];
    };
    if (arg == "-o")
      o.output = value();
    else if (arg == "--title")
      o.title = value();
    else if (arg == "--width") {
      o.width = static_cast<int>(number(arg, value()));
      if (o.width < 200 || o.width > 20000)
        fail("--width: from 200 to 20000 pixels");
    } else if (arg == "--steps") {
      const auto text = value();
      const auto dash = text.find('-');
      if (dash == std::string::npos)
        fail("--steps: expected A-B, got '" + text + "'");
      o.first_step = number(arg, std::string_view{text}.substr(0, dash));
      o.last_step = number(arg, std::string_view{text}.substr(dash + 1));
      if (o.last_step < o.first_step)
        fail("--steps: '" + text + "' ends before it starts");
    } else if (!arg.empty() && arg[0] == '-')
      fail("unknown option '" + arg + "'");
    else if (o.input.empty())
      o.input = arg;
    else
      fail("one trace file only, got '" + o.input + "' and '" + arg + "'");
  }
  if (o.input.empty() || o.output.empty())
    fail("usage: timeline-plot TRACE.json [--steps A-B] [--width PX] [--title TEXT] -o OUT.svg");
  return o;
}

std::string escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

/// A bar's colour: collectives by op, the other kinds by name.
std::string colour(const json& span) {
  const auto name = span.value("name", "");
  if (name == "all_reduce") {
    static const std::map<std::string, std::string> by_op{
      {"sum", "#d62728"}, {"mean", "#ff7f0e"}, {"min", "#8c564b"}, {"max", "#e377c2"},
      {"prod", "#bcbd22"}};
    const auto op = span.contains("args") ? span["args"].value("op", "") : "";
    const auto it = by_op.find(op);
    return it == by_op.end() ? "#d62728" : it->second;
  }
  static const std::map<std::string, std::string> by_name{
    {"run", "#c6dbef"},        {"merge_call wait", "#9467bd"}, {"merge_fn", "#2ca02c"},
    {"update", "#17becf"},     {"input wait", "#7f7f7f"},       {"produce", "#bdbdbd"},
    {"checkpoint save", "#1f77b4"}, {"checkpoint restore", "#1f77b4"}};
  const auto it = by_name.find(name);
  return it == by_name.end() ? "#aaaaaa" : it->second;
}

struct track {
  long long pid = 0;
  long long sort = 0;
  long long tid = 0;
  std::string name;
};

int run(const options& o) {
  const auto trace = read_trace_file(o.input);

  std::map<std::pair<long long, long long>, track> tracks; // by (pid, tid)
  std::vector<json> spans;
  for (const auto& e : trace) {
    if (!e.is_object() || !e.contains("ph"))
      continue;
    const auto key = std::pair{e.value("pid", 0LL), e.value("tid", 0LL)};
    if (e["ph"] == "M") {
      auto& t = tracks[key];
      t.pid = key.first;
      t.tid = key.second;
      if (e.value("name", "") == "thread_name")
        t.name = e["args"].value("name", "");
      if (e.value("name", "") == "thread_sort_index")
        t.sort = e["args"].value("sort_index", 0LL);
      continue;
    }
    if (e["ph"] != "X")
      continue;
    const auto step = e.contains("args") ? e["args"].value("step", 0LL) : 0LL;
    if (step < o.first_step || step > o.last_step)
      continue;
    spans.push_back(e);
    tracks[key].pid = key.first;
    tracks[key].tid = key.second;
  }
  if (spans.empty())
    fail("no spans to draw in " + o.input + (o.first_step > 0 ? " for those steps" : ""));

  // Rows: tracks with spans, by worker, then sort index, then name.
  std::set<std::pair<long long, long long>> used;
  for (const auto& s : spans)
    used.insert({s.value("pid", 0LL), s.value("tid", 0LL)});
  std::vector<track> rows;
  for (const auto& key : used)
    rows.push_back(tracks[key]);
  std::sort(rows.begin(), rows.end(), [](const track& a, const track& b) {
    return std::tie(a.pid, a.sort, a.name) < std::tie(b.pid, b.sort, b.name);
  });
  std::map<std::pair<long long, long long>, std::size_t> row_of;
  for (std::size_t r = 0; r < rows.size(); ++r)
    row_of[{rows[r].pid, rows[r].tid}] = r;

  double begin = std::numeric_limits<double>::max();
  double end = 0;
  for (const auto& s : spans) {
    begin = std::min(begin, s.value("ts", 0.0));
    end = std::max(end, s.value("ts", 0.0) + s.value("dur", 0.0));
  }
  const double span_us = std::max(end - begin, 1.0);
  const int label_width = 260;
  const int row_height = 22;
  const int top = o.title.empty() ? 10 : 34;
  const int plot_width = o.width - label_width - 20;
  const int height = top + static_cast<int>(rows.size()) * row_height + 64;
  const auto x_of = [&](double ts) { return label_width + (ts - begin) / span_us * plot_width; };

  std::ofstream out{o.output};
  if (!out)
    fail("cannot write " + o.output);
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << o.width << "\" height=\""
      << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!o.title.empty())
    out << "<text x=\"10\" y=\"22\" font-size=\"15\">" << escaped(o.title) << "</text>\n";
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const int y = top + static_cast<int>(r) * row_height;
    if (r % 2 == 0)
      out << "<rect x=\"0\" y=\"" << y << "\" width=\"" << o.width << "\" height=\""
          << row_height << "\" fill=\"#f4f4f4\"/>\n";
    auto name = rows[r].name.empty() ? "track " + std::to_string(rows[r].tid) : rows[r].name;
    if (used.size() > 1 && rows.front().pid != rows.back().pid)
      name = "w" + std::to_string(rows[r].pid) + " " + name;
    if (name.size() > 40)
      name = "..." + name.substr(name.size() - 37);
    out << "<text x=\"6\" y=\"" << y + 15 << "\">" << escaped(name) << "</text>\n";
  }
  // Longer spans first, so that the spans nested in them are drawn on top.
  std::sort(spans.begin(), spans.end(), [](const json& a, const json& b) {
    return a.value("dur", 0.0) > b.value("dur", 0.0);
  });
  for (const auto& s : spans) {
    const auto r = row_of.at({s.value("pid", 0LL), s.value("tid", 0LL)});
    const int y = top + static_cast<int>(r) * row_height;
    const auto x = x_of(s.value("ts", 0.0));
    const auto w = std::max(0.5, s.value("dur", 0.0) / span_us * plot_width);
    const bool outer = s.value("name", "") == "run";
    char box[160];
    std::snprintf(box, sizeof box,
                  "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\">", x,
                  y + (outer ? 2 : 5), w, outer ? row_height - 4 : row_height - 10,
                  colour(s).c_str());
    out << box << "<title>" << escaped(s.value("name", "")) << " "
        << escaped(s.contains("args") ? s["args"].dump() : "") << "</title></rect>\n";
  }
  // The time axis, in milliseconds from the first span.
  const int axis = top + static_cast<int>(rows.size()) * row_height + 4;
  out << "<line x1=\"" << label_width << "\" y1=\"" << axis << "\" x2=\""
      << label_width + plot_width << "\" y2=\"" << axis << "\" stroke=\"black\"/>\n";
  for (int tick = 0; tick <= 10; ++tick) {
    const double at = begin + span_us * tick / 10;
    char label[120];
    std::snprintf(label, sizeof label,
                  "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.1f ms</text>\n", x_of(at),
                  axis + 16, (at - begin) / 1e3);
    out << label;
  }
  // The legend: the kinds drawn.
  std::map<std::string, std::string> kinds;
  for (const auto& s : spans)
    kinds.emplace(s.value("name", "") == "all_reduce"
                    ? "all_reduce " + (s.contains("args") ? s["args"].value("op", "") : "")
                    : s.value("name", ""),
                  colour(s));
  double x = label_width;
  for (const auto& [kind, fill] : kinds) {
    out << "<rect x=\"" << x << "\" y=\"" << axis + 30 << "\" width=\"12\" height=\"12\" fill=\""
        << fill << "\"/><text x=\"" << x + 16 << "\" y=\"" << axis + 41 << "\">" << escaped(kind)
        << "</text>\n";
    x += 30 + 7.0 * static_cast<double>(kind.size());
  }
  out << "</svg>\n";
  if (!out.flush())
    fail("writing " + o.output + " failed");
  std::cout << "timeline-plot: " << spans.size() << " spans on " << rows.size() << " rows, "
            << (span_us / 1e3) << " ms, to " << o.output << "\n";
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "timeline-plot: " << e.what() << "\n";
    return 2;
  }
}
