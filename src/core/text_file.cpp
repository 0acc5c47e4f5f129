// text_file.cpp — bounded, text-only file reads and printable tokens (core/text_file.h).
#include "spikemesh/core/text_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "spikemesh/core/error.h"

namespace sm {

namespace {
std::string mib(std::size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g MiB", static_cast<double>(bytes) / (1 << 20));
  return b;
}
bool is_text_byte(unsigned char c) { return c >= 0x20 || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }
}  // namespace

std::string read_text_file(const std::string& path, const std::string& what, std::size_t max_bytes) {
  const std::string who = what + " " + path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    SM_INPUT_ERROR(who << ": cannot open (" << std::strerror(errno) << ")");
  if (S_ISDIR(st.st_mode)) SM_INPUT_ERROR(who << ": is a directory, not a file");
  if (S_ISREG(st.st_mode) && static_cast<unsigned long long>(st.st_size) > max_bytes)
    SM_INPUT_ERROR(who << ": " << mib(static_cast<std::size_t>(st.st_size)) << " is larger than the "
                       << mib(max_bytes) << " a " << what << " may be");
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) SM_INPUT_ERROR(who << ": cannot open (" << std::strerror(errno) << ")");
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f.get());
    text.append(buf, n);
    if (text.size() > max_bytes)  // not a regular file (a device, a FIFO), or it grew
      SM_INPUT_ERROR(who << ": more than " << mib(max_bytes) << " of data, the most a " << what
                         << " may hold (a device or FIFO? is it the right path?)");
    if (n < sizeof buf) break;
  }
  if (std::ferror(f.get())) SM_INPUT_ERROR(who << ": read error (" << std::strerror(errno) << ")");
  for (std::size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (!is_text_byte(c)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      SM_INPUT_ERROR(who << ": not a text file (byte " << i << " is " << hex << "); expected a " << what
                         << " in text form");
    }
  }
  return text;
}

std::string printable_token(const std::string& s, std::size_t max_chars) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= max_chars) return out + "...";
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace sm
