// safetensors.cpp — the safetensors reader and writer (io/safetensors.h): the header parsed
// with nlohmann-json and checked entry by entry before any tensor byte is touched.
#include "spikemesh/io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "spikemesh/core/error.h"

namespace sm {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data are little-endian");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u * 1000 * 1000;  // the reference implementation's limit

struct DtypeCode {
  const char* code;
  DType dtype;
};
constexpr DtypeCode kCodes[] = {{"F64", DType::F64}, {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
                                {"I64", DType::I64}, {"I32", DType::I32}, {"U8", DType::U8}};

DType dtype_of_code(const std::string& code, const std::string& where) {
  for (const DtypeCode& c : kCodes)
    if (code == c.code) return c.dtype;
  SM_INPUT_ERROR(where << ": dtype \"" << code << "\" is not one this program stores (F64, F32, F16, BF16, I64, I32, U8)");
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// One header entry checked against the data section's size.
SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& j, uint64_t data_size,
                             const std::string& origin) {
  const std::string where = origin + ": tensor '" + name + "'";
  if (name.empty()) SM_INPUT_ERROR(origin << ": a tensor has an empty name");
  if (!j.is_object() || !j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets"))
    SM_INPUT_ERROR(where << ": entry must be an object with dtype, shape and data_offsets");
  const nlohmann::json &jd = j["dtype"], &js = j["shape"], &jo = j["data_offsets"];
  if (!jd.is_string()) SM_INPUT_ERROR(where << ": dtype must be a string");
  SafetensorsEntry e;
  e.name = name;
  e.dtype = dtype_of_code(jd.get<std::string>(), where);
  if (!js.is_array()) SM_INPUT_ERROR(where << ": shape must be an array of non-negative integers");
  if (js.size() > static_cast<size_t>(kMaxDims))
    SM_INPUT_ERROR(where << ": shape " << js.dump() << " has more than " << kMaxDims << " dimensions");
  // The product of the non-zero dimensions must fit int64, so no partial product of the shape does.
  const uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t nonzero = 1;
  bool empty = false;
  for (const nlohmann::json& d : js) {
    if (!d.is_number_unsigned()) SM_INPUT_ERROR(where << ": shape must be an array of non-negative integers");
    const uint64_t v = d.get<uint64_t>();
    empty = empty || v == 0;
    if (v != 0 && nonzero > kMax / v) SM_INPUT_ERROR(where << ": shape " << js.dump() << " is too large");
    nonzero *= v ? v : 1;
    e.shape.push_back(static_cast<int64_t>(v));
  }
  const uint64_t numel = empty ? 0 : nonzero;
  if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
    SM_INPUT_ERROR(where << ": data_offsets must be [begin, end] (non-negative integers)");
  e.begin = jo[0].get<uint64_t>();
  e.end = jo[1].get<uint64_t>();
  if (e.begin > e.end) SM_INPUT_ERROR(where << ": data_offsets [" << e.begin << ", " << e.end << "] end before they begin");
  if (e.end > data_size)
    SM_INPUT_ERROR(where << ": data_offsets [" << e.begin << ", " << e.end << "] lie outside the data section ("
                         << data_size << " bytes; truncated file?)");
  const uint64_t size = dtype_size(e.dtype);
  if (numel > std::numeric_limits<uint64_t>::max() / size || numel * size != e.end - e.begin)
    SM_INPUT_ERROR(where << ": shape " << shape_str(e.shape) << " of " << jd.get<std::string>() << " needs "
                         << numel << " x " << size << " bytes, data_offsets give " << (e.end - e.begin));
  return e;
}

// The entries ordered by offset must tile [0, data_size).
void check_tiling(std::vector<SafetensorsEntry>& t, uint64_t data_size, const std::string& origin) {
  std::stable_sort(t.begin(), t.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].begin < at)
      SM_INPUT_ERROR(origin << ": tensors '" << t[i - 1].name << "' and '" << t[i].name << "' overlap (bytes "
                            << t[i].begin << ".." << at << " of the data section)");
    if (t[i].begin > at)
      SM_INPUT_ERROR(origin << ": bytes " << at << ".." << t[i].begin << " of the data section belong to no tensor");
    at = t[i].end;
  }
  if (at != data_size)
    SM_INPUT_ERROR(origin << ": the data section has " << data_size << " bytes, the tensors cover " << at);
}

}  // namespace

const char* safetensors_dtype_code(DType dt) {
  for (const DtypeCode& c : kCodes)
    if (c.dtype == dt) return c.code;
  SM_INPUT_ERROR("safetensors cannot hold dtype " << dtype_name(dt));
}

SafetensorsHeader parse_safetensors(const uint8_t* bytes, size_t size, const std::string& origin) {
  if (size < 8) SM_INPUT_ERROR(origin << ": not a safetensors file (" << size << " bytes, shorter than its 8-byte header length)");
  const uint64_t n = read_u64_le(bytes);
  if (n > kMaxHeaderBytes) SM_INPUT_ERROR(origin << ": header length " << n << " exceeds the format's 100 MB limit (not a safetensors file?)");
  if (n > size - 8)
    SM_INPUT_ERROR(origin << ": header length " << n << " runs past the end of the file (" << size
                          << " bytes; truncated, or not a safetensors file)");
  if (n < 2 || bytes[8] != '{') SM_INPUT_ERROR(origin << ": not a safetensors file (its header is not a JSON object)");
  if (std::memchr(bytes + 8, 0, n))  // the JSON parser would stop there and ignore the rest
    SM_INPUT_ERROR(origin << ": the safetensors header holds a NUL byte (a header length that runs into the data?)");
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(bytes + 8, bytes + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    SM_INPUT_ERROR(origin << ": the safetensors header is not valid JSON (" << e.what() << ")");
  }
  if (!h.is_object()) SM_INPUT_ERROR(origin << ": the safetensors header is not a JSON object");
  SafetensorsHeader out;
  out.data_start = 8 + n;
  const uint64_t data_size = size - out.data_start;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) SM_INPUT_ERROR(origin << ": __metadata__ must be an object of strings");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) SM_INPUT_ERROR(origin << ": __metadata__ value of '" << m.key() << "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    out.tensors.push_back(parse_entry(it.key(), it.value(), data_size, origin));
  }
  check_tiling(out.tensors, data_size, origin);
  return out;
}

NamedTensors read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) SM_INPUT_ERROR(path << ": cannot open (" << std::strerror(errno) << ")");
  const std::streamoff len = in.tellg();
  if (len < 0) SM_INPUT_ERROR(path << ": cannot read its size");
  std::vector<uint8_t> bytes(static_cast<size_t>(len));
  in.seekg(0);
  if (len > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), len)) SM_INPUT_ERROR(path << ": read failed");
  const SafetensorsHeader h = parse_safetensors(bytes.data(), bytes.size(), path);
  NamedTensors out;
  for (const SafetensorsEntry& e : h.tensors) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (t.nbytes()) std::memcpy(t.raw(), bytes.data() + h.data_start + e.begin, t.nbytes());
    out.emplace_back(e.name, std::move(t));
  }
  if (metadata) *metadata = h.metadata;
  return out;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t at = 0;
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    SM_CHECK(!name.empty() && names.insert(name).second, "safetensors tensor name '" << name << "' empty or repeated");
    SM_CHECK(t.device().is_cpu(), "write_safetensors takes host tensors (" << name << ")");
    h[name] = {{"dtype", safetensors_dtype_code(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {at, at + t.nbytes()}}};
    at += t.nbytes();
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) SM_INPUT_ERROR(path << ": cannot write (" << std::strerror(errno) << ")");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const auto& entry : tensors) {
    const Tensor& t = entry.second;
    ok = ok && (t.nbytes() == 0 || std::fwrite(t.raw(), 1, t.nbytes(), f) == t.nbytes());
  }
  ok = (std::fflush(f) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    SM_INPUT_ERROR(path << ": cannot write (" << std::strerror(e) << "; disk full?)");
  }
}

}  // namespace sm
