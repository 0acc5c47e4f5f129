// npz_reader.cpp — .npz members through libzip (stored or deflated), .npy header parsing
// (format 1.0-3.0: magic, version, little-endian header length, a Python dict literal).
#include "spikemesh/data/npz_reader.h"

#include <zip.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>

#include "spikemesh/core/error.h"

namespace sm {

namespace {
struct ZipCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};

std::vector<uint8_t> read_member(zip_t* z, const std::string& path, const std::string& member) {
  zip_int64_t idx = zip_name_locate(z, member.c_str(), 0);
  if (idx < 0) SM_INPUT_ERROR(path << ": the archive has no member " << member << " (expected SpikingJelly's t, x, y, p)");
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(z, static_cast<zip_uint64_t>(idx), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
    SM_INPUT_ERROR(path << ": cannot stat member " << member << ": " << zip_strerror(z));
  // A damaged or hostile directory may claim any size: the compressed size cannot exceed the
  // archive, deflate expands at most ~1032x, and the data are read in pieces, so memory follows
  // what the member really holds, not what it claims.
  const bool comp_known = st.valid & ZIP_STAT_COMP_SIZE;
  std::error_code ec;
  const auto archive = std::filesystem::file_size(path, ec);
  if ((comp_known && !ec && st.comp_size > archive) || (comp_known && st.size > st.comp_size * 1100 + 4096))
    SM_INPUT_ERROR(path << ": member " << member << " claims " << st.size << " bytes"
                        << (comp_known ? " from " + std::to_string(st.comp_size) + " compressed" : std::string())
                        << " in a " << archive << "-byte archive: a damaged archive");
  std::unique_ptr<zip_file_t, int (*)(zip_file_t*)> f(zip_fopen_index(z, static_cast<zip_uint64_t>(idx), 0),
                                                      zip_fclose);
  if (!f) SM_INPUT_ERROR(path << ": cannot open member " << member << ": " << zip_strerror(z));
  std::vector<uint8_t> buf;
  constexpr size_t kPiece = size_t(1) << 20;
  while (buf.size() < st.size) {
    const size_t want = static_cast<size_t>(std::min<zip_uint64_t>(kPiece, st.size - buf.size()));
    const size_t at = buf.size();
    buf.resize(at + want);
    const zip_int64_t got = zip_fread(f.get(), buf.data() + at, want);
    if (got <= 0) {
      buf.resize(at);
      break;
    }
    buf.resize(at + static_cast<size_t>(got));
  }
  char extra = 0;  // libzip checks the member's CRC-32 only on a read that reaches its end
  if (buf.size() != st.size || zip_fread(f.get(), &extra, 1) != 0)
    SM_INPUT_ERROR(path << ": member " << member << " is truncated or corrupt (" << buf.size() << " of " << st.size
                        << " bytes, or a bad CRC-32)");
  return buf;
}

// The value text of 'key' in the .npy header dict ("'descr': '<u4', 'fortran_order': False, ...").
std::string dict_value(const std::string& hdr, const std::string& key, const std::string& what) {
  size_t k = hdr.find("'" + key + "'");
  if (k == std::string::npos) SM_INPUT_ERROR(what << ": the .npy header has no '" << key << "'");
  size_t colon = hdr.find(':', k);
  size_t b = hdr.find_first_not_of(" ", colon + 1);
  if (colon == std::string::npos || b == std::string::npos) SM_INPUT_ERROR(what << ": a malformed .npy header");
  if (hdr[b] == '\'') return hdr.substr(b + 1, hdr.find('\'', b + 1) - b - 1);
  if (hdr[b] == '(') return hdr.substr(b + 1, hdr.find(')', b) - b - 1);
  size_t e = hdr.find_first_of(",}", b);
  return hdr.substr(b, e - b);
}

// 2^28 events of one recording (CIFAR10-DVS's largest hold ~10^6): more is a damaged or
// hostile file, refused before the int64 widening allocates 8 bytes for each.
constexpr int64_t kMaxValues = int64_t(1) << 28;

NpyArray parse_npy(const std::vector<uint8_t>& buf, const std::string& what) {
  static const char magic[] = "\x93NUMPY";
  if (buf.size() < 10 || std::memcmp(buf.data(), magic, 6) != 0) SM_INPUT_ERROR(what << ": not an .npy array");
  const int major = buf[6];
  size_t hlen, hstart;
  if (major == 1) {
    hlen = buf[8] | (buf[9] << 8);
    hstart = 10;
  } else {
    if (buf.size() < 12) SM_INPUT_ERROR(what << ": truncated .npy header");
    hlen = buf[8] | (buf[9] << 8) | (buf[10] << 16) | (static_cast<size_t>(buf[11]) << 24);
    hstart = 12;
  }
  if (hstart + hlen > buf.size()) SM_INPUT_ERROR(what << ": truncated .npy header");
  std::string hdr(reinterpret_cast<const char*>(buf.data() + hstart), hlen);
  NpyArray a;
  a.descr = dict_value(hdr, "descr", what);
  if (dict_value(hdr, "fortran_order", what).find("True") != std::string::npos)
    SM_INPUT_ERROR(what << ": Fortran-ordered arrays are not supported");
  int64_t n = 1;
  std::string sh = dict_value(hdr, "shape", what);
  for (size_t i = 0; i < sh.size();) {
    size_t j = sh.find(',', i);
    std::string part = sh.substr(i, j == std::string::npos ? std::string::npos : j - i);
    if (part.find_first_of("0123456789") != std::string::npos) {
      int64_t d = 0;
      for (char c : part) {
        if (c == ' ' || c == 'L') continue;
        if (c < '0' || c > '9' || d > (int64_t(1) << 40)) SM_INPUT_ERROR(what << ": a malformed .npy shape");
        d = d * 10 + (c - '0');
      }
      a.shape.push_back(d);
      if (d > 0 && n > kMaxValues / d) SM_INPUT_ERROR(what << ": the .npy array has more than " << kMaxValues << " values");
      n *= d;
    }
    if (j == std::string::npos) break;
    i = j + 1;
  }
  if (a.descr.size() < 3 || a.descr.size() > 8) SM_INPUT_ERROR(what << ": an unsupported .npy dtype");
  const char order = a.descr[0], kind = a.descr[1];
  const int width = std::atoi(a.descr.c_str() + 2);
  if ((kind != 'u' && kind != 'i' && kind != 'b') || (width != 1 && width != 2 && width != 4 && width != 8))
    SM_INPUT_ERROR(what << ": its dtype is not an integer type (events need integer t, x, y, p)");
  const size_t data0 = hstart + hlen;
  if (buf.size() - data0 < static_cast<size_t>(n) * width)
    SM_INPUT_ERROR(what << ": truncated data (" << (buf.size() - data0) << " bytes for " << n << " x " << width << ")");
  const bool big = order == '>';
  a.values.resize(static_cast<size_t>(n));
  const uint8_t* d = buf.data() + data0;
  for (int64_t i = 0; i < n; ++i, d += width) {
    uint64_t u = 0;
    for (int b = 0; b < width; ++b) u |= static_cast<uint64_t>(d[big ? width - 1 - b : b]) << (8 * b);
    int64_t v = static_cast<int64_t>(u);
    if (kind == 'i' && width < 8 && (u >> (8 * width - 1)) & 1) v = static_cast<int64_t>(u | (~uint64_t(0) << (8 * width)));
    a.values[static_cast<size_t>(i)] = v;
  }
  return a;
}
}  // namespace

std::map<std::string, NpyArray> read_npz_integers(const std::string& path, const std::vector<std::string>& names) {
  int err = 0;
  std::unique_ptr<zip_t, ZipCloser> z(zip_open(path.c_str(), ZIP_RDONLY, &err));
  if (!z) {
    zip_error_t ze;
    zip_error_init_with_code(&ze, err);
    std::string msg = zip_error_strerror(&ze);
    zip_error_fini(&ze);
    SM_INPUT_ERROR(path << ": not a readable .npz (zip) archive: " << msg);
  }
  std::map<std::string, NpyArray> out;
  for (const std::string& n : names) out[n] = parse_npy(read_member(z.get(), path, n + ".npy"), path + ":" + n);
  return out;
}

}  // namespace sm
