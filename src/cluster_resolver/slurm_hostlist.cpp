#include "cluster_resolver/slurm_hostlist.hpp"

#include "cluster_resolver/cluster_sources.hpp"
#include "runtime/error_text.hpp"

#include "lockstep/error.hpp"

namespace lockstep::detail {

namespace {

[[noreturn]] void malformed(std::string_view what, std::string_view list, const std::string& why) {
  throw value_error(std::string(what) + " = " + in_quotes(list) + " is not a Slurm list: " + why);
}

/// Splits `list` at the commas outside brackets.
std::vector<std::string_view> top_level_items(std::string_view list, std::string_view what) {
  std::vector<std::string_view> items;
  std::size_t depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') {
      if (++depth > 1)
        malformed(what, list, "nested '['");
    } else if (c == ']') {
      if (depth == 0)
        malformed(what, list, "']' without '['");
      --depth;
    } else if (c == ',' && depth == 0) {
      if (i == start)
        malformed(what, list, "an empty name");
      items.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0)
    malformed(what, list, "'[' without ']'");
  return items;
}

/// The names one bracket group stands for: "01-03,7" -> 01 02 03 7.
std::vector<std::string> expand_group(std::string_view group, std::string_view what,
                                      std::string_view list) {
  std::vector<std::string> names;
  std::size_t start = 0;
  while (start <= group.size()) {
    const auto comma = std::min(group.find(',', start), group.size());
    const auto range = group.substr(start, comma - start);
    if (range.empty())
      malformed(what, list, "an empty range in [" + std::string(group) + "]");
    const auto dash = range.find('-');
    const auto low_text = range.substr(0, dash);
    const auto high_text = dash == std::string_view::npos ? low_text : range.substr(dash + 1);
    const auto low = parse_count(low_text, what);
    const auto high = parse_count(high_text, what);
    if (high < low)
      malformed(what, list, "a descending range " + std::string(range));
    if (high - low >= max_hosts)
      malformed(what, list, "more than " + std::to_string(max_hosts) + " hosts");
    // Slurm pads every number to the width of the range's low end.
    const auto width = low_text.size();
    for (auto n = low; n <= high; ++n) {
      auto digits = std::to_string(n);
      if (digits.size() < width)
        digits.insert(0, width - digits.size(), '0');
      names.push_back(std::move(digits));
    }
    start = comma + 1;
  }
  return names;
}

} // namespace

std::vector<std::string> expand_hostlist(std::string_view list, std::string_view what) {
  std::vector<std::string> hosts;
  for (const auto item : top_level_items(list, what)) {
    // The cartesian product of the item's literal parts and bracket groups.
    std::vector<std::string> names{""};
    std::size_t at = 0;
    while (at < item.size()) {
      const auto open = item.find('[', at);
      const auto literal = item.substr(at, open - at);
      for (auto& name : names)
        name += literal;
      if (open == std::string_view::npos)
        break;
      const auto close = item.find(']', open);
      const auto choices = expand_group(item.substr(open + 1, close - open - 1), what, list);
      std::vector<std::string> product;
      if (names.size() * choices.size() > max_hosts)
        malformed(what, list, "more than " + std::to_string(max_hosts) + " hosts");
      for (const auto& name : names)
        for (const auto& choice : choices)
          product.push_back(name + choice);
      names = std::move(product);
      at = close + 1;
    }
    if (hosts.size() + names.size() > max_hosts)
      malformed(what, list, "more than " + std::to_string(max_hosts) + " hosts");
    hosts.insert(hosts.end(), names.begin(), names.end());
  }
  return hosts;
}

std::vector<std::size_t> expand_tasks_per_node(std::string_view list, std::string_view what) {
  std::vector<std::size_t> tasks;
  for (const auto item : top_level_items(list, what)) {
    const auto paren = item.find('(');
    const auto count = parse_count(item.substr(0, paren), what);
    std::size_t repeat = 1;
    if (paren != std::string_view::npos) {
      if (item.size() < paren + 4 || item.substr(paren, 2) != "(x" || item.back() != ')')
        malformed(what, list, "expected N or N(xM), got " + std::string(item));
      repeat = parse_count(item.substr(paren + 2, item.size() - paren - 3), what);
    }
    if (repeat > max_hosts - tasks.size())
      malformed(what, list, "more than " + std::to_string(max_hosts) + " hosts");
    tasks.insert(tasks.end(), repeat, count);
  }
  return tasks;
}

std::vector<std::uint16_t> expand_port_list(std::string_view list, std::string_view what) {
  std::vector<std::uint16_t> ports;
  for (const auto item : top_level_items(list, what)) {
    const auto dash = item.find('-');
    const auto low = parse_count(item.substr(0, dash), what);
    const auto high =
      dash == std::string_view::npos ? low : parse_count(item.substr(dash + 1), what);
    if (high < low)
      malformed(what, list, "a descending range " + std::string(item));
    if (low == 0 || high > 65535)
      malformed(what, list, std::string(item) + " is not within the ports 1 to 65535");
    if (ports.size() + (high - low) >= 65535)
      malformed(what, list, "more than 65535 ports");
    for (auto port = low; port <= high; ++port)
      ports.push_back(static_cast<std::uint16_t>(port));
  }
  return ports;
}

} // namespace lockstep::detail
