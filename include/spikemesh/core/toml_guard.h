// toml_guard.h — inputs on which Debian 12's toml++ 3.3.0 (libtomlplusplus-dev) aborts or
// reaches undefined behaviour instead of throwing parse_error, found by fuzzing (tests/README.md). Every TOML text spikemesh parses (--config, model specs, a checkpoint's stored
// configuration) goes through this check first, so a damaged file is one message, never a
// crash inside the library.
#pragma once
#include <string>

namespace sm {

// Why toml++ 3.3.0 would crash on `text` ("" when it would not):
//  * a table header '[' or '[[' followed (after blanks) by a character that starts no key, e.g.
//    "[}" (its parse_key assertion: abort() without NDEBUG);
//  * a non-ASCII code point in U+00A1..U+FEFF, outside a string or comment (where the parser
//    asks whether it is whitespace), that its whitespace table mishandles
//    (__builtin_unreachable in impl::is_non_ascii_horizontal_whitespace).
std::string toml_parser_bug_reason(const std::string& text);

}  // namespace sm
