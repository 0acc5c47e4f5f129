// event_formats.cpp — the decoders of event_formats.h. Each reads the whole file into
// memory (a CIFAR10-DVS recording is ~1 MB, a Gesture trial ~10-60 MB) and decodes it in
// one pass, in file order.
#include "spikemesh/data/event_formats.h"

#include <cstring>
#include <fstream>

#include "spikemesh/core/error.h"
#include "spikemesh/data/npz_reader.h"

namespace sm {

void EventStream::reserve(size_t n) {
  t.reserve(n);
  x.reserve(n);
  y.reserve(n);
  p.reserve(n);
}

void EventStream::push(int64_t tt, uint32_t xx, uint32_t yy, uint32_t pp) {
  t.push_back(tt);
  x.push_back(static_cast<uint16_t>(xx > 0xFFFF ? 0xFFFF : xx));
  y.push_back(static_cast<uint16_t>(yy > 0xFFFF ? 0xFFFF : yy));
  p.push_back(static_cast<uint8_t>(pp != 0));
}

const char* event_format_name(EventFileFormat f) {
  switch (f) {
    case EventFileFormat::Aedat2Cifar10Dvs: return "AEDAT 2.0 (CIFAR10-DVS)";
    case EventFileFormat::Aedat31: return "AEDAT 3.1";
    case EventFileFormat::AtisBin: return "ATIS .bin (N-MNIST, N-Caltech101)";
    case EventFileFormat::Npz: return "SpikingJelly events .npz";
  }
  return "?";
}

namespace {
std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) SM_INPUT_ERROR(path << ": cannot open the event file");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) SM_INPUT_ERROR(path << ": read error");
  return s;
}

uint32_t be32(const unsigned char* b) {
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}
uint32_t le32(const unsigned char* b) {
  return uint32_t(b[0]) | (uint32_t(b[1]) << 8) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 24);
}
uint16_t le16(const unsigned char* b) { return static_cast<uint16_t>(b[0] | (b[1] << 8)); }

// The next line of `s` from `pos` (with its terminator): [pos, end).
size_t line_end(const std::string& s, size_t pos) {
  size_t e = s.find('\n', pos);
  return e == std::string::npos ? s.size() : e + 1;
}

// Is s[b, e) valid UTF-8 (what Python's bytes.decode() accepts)?
bool valid_utf8(const std::string& s, size_t b, size_t e) {
  for (size_t i = b; i < e;) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (n < 0 || (n == 1 && c < 0xC2) || (n == 3 && c > 0xF4) || i + n >= e) return false;
    if (n == 0) {
      ++i;
      continue;
    }
    for (int k = 1; k <= n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F))
      return false;  // overlong, surrogate, or beyond U+10FFFF
    i += n + 1;
  }
  return true;
}

// SpikingJelly's CIFAR10-DVS header skip: the summed length of the leading lines whose
// stripped text starts with '#' (a line that is not UTF-8 ends the header, as its decode()
// failing does there; Python's strip() also strips \x1c-\x1f).
size_t aedat2_data_offset(const std::string& s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t e = line_end(s, pos);
    if (!valid_utf8(s, pos, e)) break;
    size_t b = s.find_first_not_of(" \t\r\n\v\f\x1c\x1d\x1e\x1f", pos);
    if (b == std::string::npos || b >= e || s[b] != '#') break;
    pos = e;
  }
  return pos;
}

EventStream read_aedat2(const std::string& path) {
  const std::string s = slurp(path);
  const size_t off = aedat2_data_offset(s);
  if (off == 0) SM_INPUT_ERROR(path << ": not an AEDAT file (no '#' header line)");
  const size_t bytes = s.size() - off;
  if (bytes % 8 != 0)
    SM_INPUT_ERROR(path << ": truncated AEDAT 2.0 data: " << bytes << " bytes after the header is not a whole "
                        << "number of 8-byte (address, timestamp) events");
  EventStream ev;
  ev.t_u32 = true;
  const size_t n = bytes / 8;
  ev.reserve(n);
  const auto* d = reinterpret_cast<const unsigned char*>(s.data() + off);
  for (size_t i = 0; i < n; ++i, d += 8) {
    const uint32_t a = be32(d), ts = be32(d + 4);
    ev.push(ts, 127 - ((a >> 8) & 0x7F), 127 - ((a >> 1) & 0x7F), 1 - (a & 1));
  }
  return ev;
}

EventStream read_aedat31(const std::string& path) {
  const std::string s = slurp(path);
  if (s.compare(0, 10, "#!AER-DAT3") != 0) SM_INPUT_ERROR(path << ": not an AEDAT 3.x file (no #!AER-DAT3 header)");
  size_t pos = 0;
  bool ended = false;
  while (pos < s.size() && s[pos] == '#') {
    size_t e = line_end(s, pos);
    if (s.compare(pos, e - pos, "#!END-HEADER\r\n") == 0) {
      ended = true;
      pos = e;
      break;
    }
    pos = e;
  }
  if (!ended) SM_INPUT_ERROR(path << ": AEDAT 3.1 header has no #!END-HEADER line");
  EventStream ev;
  ev.reserve((s.size() - pos) / 8);  // at most one event per 8 bytes: one allocation, not one per packet
  const auto* d = reinterpret_cast<const unsigned char*>(s.data());
  while (pos < s.size()) {
    if (s.size() - pos < 28)
      SM_INPUT_ERROR(path << ": truncated AEDAT 3.1 packet header at byte " << pos << " (" << s.size() - pos
                          << " of 28 bytes)");
    const uint16_t type = le16(d + pos);
    const uint32_t size = le32(d + pos + 4), overflow = le32(d + pos + 12), capacity = le32(d + pos + 16);
    pos += 28;
    const uint64_t payload = uint64_t(capacity) * size;
    if (payload > s.size() - pos)
      SM_INPUT_ERROR(path << ": truncated AEDAT 3.1 packet at byte " << pos - 28 << ": " << capacity << " events of "
                          << size << " bytes announced, " << s.size() - pos << " bytes left");
    if (type == 1) {
      if (size < 8) SM_INPUT_ERROR(path << ": polarity packet at byte " << pos - 28 << " has eventSize " << size);
      for (uint32_t k = 0; k < capacity; ++k) {
        const unsigned char* e = d + pos + uint64_t(k) * size;
        const uint32_t a = le32(e), ts = le32(e + 4);
        ev.push(static_cast<int64_t>(ts) | (static_cast<int64_t>(overflow) << 31), (a >> 17) & 0x7FFF,
                (a >> 2) & 0x7FFF, (a >> 1) & 1);
      }
    }
    pos += payload;
  }
  return ev;
}

EventStream read_atis_bin(const std::string& path) {
  const std::string s = slurp(path);
  if (s.size() % 5 != 0)
    SM_INPUT_ERROR(path << ": truncated ATIS .bin event file (the N-MNIST / N-Caltech101 layout): " << s.size()
                        << " bytes is not a whole number of 5-byte events");
  EventStream ev;
  ev.t_u32 = true;
  const size_t n = s.size() / 5;
  ev.reserve(n);
  const auto* d = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < n; ++i, d += 5)
    ev.push((int64_t(d[2] & 127) << 16) | (int64_t(d[3]) << 8) | d[4], d[0], d[1], d[2] >> 7);
  return ev;
}

EventStream read_npz(const std::string& path) {
  auto a = read_npz_integers(path, {"t", "x", "y", "p"});
  const size_t n = a["t"].values.size();
  for (const char* k : {"x", "y", "p"})
    if (a[k].values.size() != n)
      SM_INPUT_ERROR(path << ": " << k << " has " << a[k].values.size() << " events but t has " << n);
  EventStream ev;
  ev.t_u32 = a["t"].descr.substr(1) == "u4";
  ev.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = a["x"].values[i], y = a["y"].values[i], t = a["t"].values[i];
    if (x < 0 || y < 0) SM_INPUT_ERROR(path << ": event " << i << " has a negative coordinate (" << x << ", " << y << ")");
    if (t < 0 || t >= (int64_t(1) << 62))  // keeps every timestamp difference and frame bound in int64
      SM_INPUT_ERROR(path << ": event " << i << " has timestamp " << t << ", outside [0, 2^62) us");
    ev.push(t, static_cast<uint32_t>(std::min<int64_t>(x, 0xFFFF)),
            static_cast<uint32_t>(std::min<int64_t>(y, 0xFFFF)), a["p"].values[i] != 0);
  }
  return ev;
}
}  // namespace

EventFileFormat sniff_aedat_version(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) SM_INPUT_ERROR(path << ": cannot open the event file");
  char head[12] = {};
  f.read(head, sizeof head);
  if (std::strncmp(head, "#!AER-DAT3", 10) == 0) return EventFileFormat::Aedat31;
  if (head[0] == '#') return EventFileFormat::Aedat2Cifar10Dvs;
  SM_INPUT_ERROR(path << ": not an AEDAT file (it does not start with a '#' header line)");
}

EventStream read_event_file(const std::string& path, EventFileFormat format) {
  switch (format) {
    case EventFileFormat::Aedat2Cifar10Dvs: return read_aedat2(path);
    case EventFileFormat::Aedat31: return read_aedat31(path);
    case EventFileFormat::AtisBin: return read_atis_bin(path);
    case EventFileFormat::Npz: return read_npz(path);
  }
  SM_INPUT_ERROR(path << ": unknown event format");
}

void check_events_on_sensor(const EventStream& ev, int h, int w, const std::string& path) {
  for (int64_t i = 0; i < ev.size(); ++i)
    if (ev.x[i] >= w || ev.y[i] >= h)
      SM_INPUT_ERROR(path << ": event " << i << " at (x " << ev.x[i] << ", y " << ev.y[i] << ") is outside the " << w
                          << "x" << h << " sensor");
}

}  // namespace sm
