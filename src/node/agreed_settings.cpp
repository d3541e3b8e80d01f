#include "node/agreed_settings.hpp"

#include "runtime/error_text.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace lockstep::detail {

namespace {

const std::string* value_of(const std::vector<agreed_setting>& settings,
                            const std::string& name) {
  const auto found = std::find_if(settings.begin(), settings.end(),
                                  [&](const auto& s) { return s.name == name; });
  return found == settings.end() ? nullptr : &found->value;
}

} // namespace

void check_agreed_settings(const std::vector<agreed_setting>& settings) {
  if (settings.size() > max_agreed_settings)
    throw value_error("agreed_settings: " + std::to_string(settings.size())
                      + " settings, at most " + std::to_string(max_agreed_settings));
  std::set<std::string> names;
  for (const auto& [name, value] : settings) {
    if (name.empty() || name.size() > max_setting_name_bytes)
      throw value_error("agreed_settings: a setting's name must have 1 to "
                        + std::to_string(max_setting_name_bytes) + " bytes, got "
                        + in_quotes(name.substr(0, max_setting_name_bytes)));
    if (value.size() > max_setting_value_bytes)
      throw value_error("agreed_settings: the value of " + in_quotes(name) + " has "
                        + std::to_string(value.size()) + " bytes, at most "
                        + std::to_string(max_setting_value_bytes));
    if (!names.insert(name).second)
      throw value_error("agreed_settings: " + in_quotes(name) + " is declared twice");
  }
}

std::optional<std::string>
settings_disagreement(const std::vector<std::vector<agreed_setting>>& by_rank) {
  // Every name any rank declared, in the order of the first rank that has it.
  std::vector<std::string> names;
  for (const auto& settings : by_rank)
    for (const auto& setting : settings)
      if (std::find(names.begin(), names.end(), setting.name) == names.end())
        names.push_back(setting.name);
  std::vector<std::string> differences;
  for (const auto& name : names) {
    // Each value (or none: not declared) with the ranks that hold it, in the
    // order of their lowest rank.
    std::vector<std::pair<const std::string*, std::vector<std::string>>> groups;
    for (std::uint32_t rank = 0; rank < by_rank.size(); ++rank) {
      const auto* value = value_of(by_rank[rank], name);
      const auto same = [&](const auto& group) {
        return group.first == value || (group.first && value && *group.first == *value);
      };
      if (auto group = std::find_if(groups.begin(), groups.end(), same); group != groups.end())
        group->second.push_back(std::to_string(rank));
      else
        groups.push_back({value, {std::to_string(rank)}});
    }
    if (groups.size() < 2)
      continue;
    std::vector<std::string> parts;
    for (const auto& [value, ranks] : groups)
      parts.push_back((value ? in_quotes(*value) : std::string("not declared")) + " on "
                      + workers_text(ranks));
    differences.push_back(name + " is " + joined_list(parts, 4, 0, "; "));
  }
  if (differences.empty())
    return std::nullopt;
  return "the workers' settings differ (every worker must run with the same): "
         + joined_list(differences, items_in_errors, 0, ". ");
}

} // namespace lockstep::detail
