#pragma once

// Slurm's compressed lists, as srun sets them in SLURM_STEP_NODELIST and
// SLURM_STEP_TASKS_PER_NODE.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::detail {

/// "gpu[01-03,7],login2" -> gpu01 gpu02 gpu03 gpu7 login2, in order; a name
/// may hold several bracket groups ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2),
/// and zero padding is kept. value_error (naming `what`) on unbalanced
/// brackets, empty names, descending ranges or more than `max_hosts` hosts.
std::vector<std::string> expand_hostlist(std::string_view list, std::string_view what);

/// "2(x3),1" -> 2 2 2 1. value_error (naming `what`) on anything else.
std::vector<std::size_t> expand_tasks_per_node(std::string_view list, std::string_view what);

/// "12000-12002,12005" -> 12000 12001 12002 12005: the ports of `srun
/// --resv-ports` as SLURM_STEP_RESV_PORTS lists them (Slurm writes its
/// ranged list without brackets). value_error (naming `what`) on anything
/// else, a descending range, or a port outside 1 to 65535.
std::vector<std::uint16_t> expand_port_list(std::string_view list, std::string_view what);

/// The most hosts a list may expand to.
inline constexpr std::size_t max_hosts = 1 << 20;

} // namespace lockstep::detail
