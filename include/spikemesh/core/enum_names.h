// enum_names.h (core) — a small enum's names as one table of (name, value) rows, read both
// to parse a name and to name a value. A value's first row is its canonical name; later
// rows for the same value are aliases, accepted when parsing.
#pragma once
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace sm {

template <typename E>
using EnumName = std::pair<const char*, E>;

// The value of the row named exactly `name`, or nullopt.
template <typename E, size_t N>
std::optional<E> enum_from_name(const EnumName<E> (&rows)[N], const std::string& name) {
  for (const EnumName<E>& r : rows)
    if (name == r.first) return r.second;
  return std::nullopt;
}

// The canonical name of v, or "?" when no row has it.
template <typename E, size_t N>
const char* enum_name(const EnumName<E> (&rows)[N], E v) {
  for (const EnumName<E>& r : rows)
    if (r.second == v) return r.first;
  return "?";
}

// `s` with ASCII letters in lower case (for case-insensitive names).
inline std::string ascii_lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace sm
