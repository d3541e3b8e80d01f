#pragma once

// Outputs checked before a long run: a typo in --metrics or --plot should
// cost a second, not the hours of training before the first write.

#include <filesystem>
#include <string_view>

namespace fashion_mnist {

/// Checks that `path` can be written, without changing what is there: an
/// existing file (or device, such as /dev/null) is opened for appending,
/// never truncated, and closed again, so a metrics file that a resumed run
/// will read keeps its rows; a missing one is created and removed again
/// (only if this call created it). A FIFO without a reader is refused
/// rather than waited on. io_error naming `what` ("metrics", "plot"), the
/// path (escaped as fashion_mnist::printable does) and the reason.
void check_output_writable(const std::filesystem::path& path, std::string_view what);

} // namespace fashion_mnist
