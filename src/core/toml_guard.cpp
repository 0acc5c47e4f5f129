// toml_guard.cpp — the known toml++ 3.3.0 crash inputs (core/toml_guard.h).
#include "spikemesh/core/toml_guard.h"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <string>

namespace sm {

namespace {
bool key_start(unsigned char c) { return std::isalnum(c) || c == '_' || c == '-' || c == '"' || c == '\'' || c == ']'; }
}  // namespace

std::string toml_parser_bug_reason(const std::string& text) {
  bool line_start = true;
  // Where the parser may look for whitespace: outside comments and strings (basic "..",
  // literal '..', and their multi-line forms).
  enum class In { Code, Comment, Basic, Literal, MultiBasic, MultiLiteral } in = In::Code;
  auto starts = [&](size_t i, const char* tok) { return text.compare(i, std::char_traits<char>::length(tok), tok) == 0; };
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n' || c == '\r') {
      line_start = true;
      if (in == In::Comment || in == In::Basic || in == In::Literal) in = In::Code;
      continue;
    }
    switch (in) {
      case In::Comment: continue;
      case In::Basic:
        if (c == '\\') ++i;
        else if (c == '"') in = In::Code;
        continue;
      case In::Literal:
        if (c == '\'') in = In::Code;
        continue;
      case In::MultiBasic:
        if (c == '\\') ++i;
        else if (starts(i, "\"\"\"")) in = In::Code, i += 2;
        continue;
      case In::MultiLiteral:
        if (starts(i, "\'\'\'")) in = In::Code, i += 2;
        continue;
      case In::Code: break;
    }
    if (line_start && (c == ' ' || c == '\t')) continue;
    if (line_start && c == '[') {
      size_t j = i + 1;
      if (j < text.size() && text[j] == '[') ++j;
      while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
      if (j < text.size() && !key_start(static_cast<unsigned char>(text[j])))
        return "the table header at byte " + std::to_string(i) + " names no key";
    }
    line_start = false;
    if (c == '#') { in = In::Comment; continue; }
    if (starts(i, "\"\"\"")) { in = In::MultiBasic; i += 2; continue; }
    if (starts(i, "\'\'\'")) { in = In::MultiLiteral; i += 2; continue; }
    if (c == '"') { in = In::Basic; continue; }
    if (c == '\'') { in = In::Literal; continue; }
    // Two- and three-byte UTF-8 sequences: the code point's 1018-wide block of U+00A0..U+FEFF.
    uint32_t cp = 0;
    size_t len = 0;
    if ((c & 0xE0) == 0xC0) cp = c & 0x1F, len = 1;
    else if ((c & 0xF0) == 0xE0) cp = c & 0x0F, len = 2;
    if (len == 0 || i + len >= text.size()) continue;
    for (size_t k = 1; k <= len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    if (cp < 0xA0 || cp > 0xFEFF || cp == 0xA0 || cp == 0x3000 || cp == 0xFEFF) continue;
    const uint64_t block = (uint64_t(cp) - 0xA0) / 0x3FA;
    if (((uint64_t(1) << block) & 0x7FFFFFFFFFFFF75Eull) == 0 && block != 5 && block != 7) {
      char u[16];
      std::snprintf(u, sizeof u, "U+%04X", static_cast<unsigned>(cp));
      return std::string("the non-ASCII character ") + u + " at byte " + std::to_string(i) +
             " outside a string or comment (toml++ 3.3.0 cannot parse it safely)";
    }
  }
  return "";
}

}  // namespace sm
