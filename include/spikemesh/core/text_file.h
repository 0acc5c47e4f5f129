// text_file.h — the one way spikemesh reads a text file a user names (configs, model specs,
// pipeline schedules, benchmark logs): size-bounded, refused when it is not text, every
// message naming the file and the flag or role it was given as.
// Invariants: never reads more than `max_bytes` + 1 bytes (so /dev/zero, a FIFO or a huge
// file ends with an error instead of exhausting memory); never echoes the file's bytes into a
// message (a binary byte is named by its offset and hex value, not printed).
#pragma once
#include <cstddef>
#include <string>

namespace sm {

// Default bound for configuration-like text files (TOML configs, model specs, schedules).
constexpr std::size_t kMaxTextFileBytes = std::size_t(16) << 20;  // 16 MiB

// Reads `path` whole. `what` names it for messages, e.g. "--pp-schedule-file" or "model spec".
// Input errors (each naming `what` and `path`): cannot open, a directory, larger than
// `max_bytes`, a read error, or binary content (a NUL byte or a control character other than
// tab, CR, LF, FF; invalid UTF-8 is not checked here — parsers report it).
std::string read_text_file(const std::string& path, const std::string& what,
                           std::size_t max_bytes = kMaxTextFileBytes);

// Printable form of an untrusted token for a message: at most `max_chars` characters,
// control and non-ASCII bytes as \xHH, an ellipsis when cut.
std::string printable_token(const std::string& s, std::size_t max_chars = 40);

}  // namespace sm
