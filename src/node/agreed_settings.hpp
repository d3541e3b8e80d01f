#pragma once

// The settings every worker of a job must share (multi_worker_options::
// agreed_settings, plus lockstep's own): the limits a declared list must
// keep, and the comparison the coordinator makes once every worker has
// joined, whose text names each setting that differs and each worker's
// value.

#include "node/wire_messages.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::detail {

inline constexpr std::size_t max_agreed_settings = 64;
inline constexpr std::size_t max_setting_name_bytes = 128;
inline constexpr std::size_t max_setting_value_bytes = 1024;

/// Throws value_error naming the setting when `settings` break the limits
/// above, name a setting twice, or name an empty one.
void check_agreed_settings(const std::vector<agreed_setting>& settings);

/// Nothing when every rank declared the same settings with the same values;
/// otherwise a sentence naming each setting that differs (up to 8, then "...
/// and N more") and which ranks hold which value: `by_rank[r]` is rank r's
/// list.
std::optional<std::string>
settings_disagreement(const std::vector<std::vector<agreed_setting>>& by_rank);

} // namespace lockstep::detail
