// fuzz_safetensors.cpp — libFuzzer harness for the safetensors reader (src/io/safetensors.cpp):
// the input is a whole file image. Expected outcomes: a parsed header, or sm::Error naming the
// problem (never a crash, an out-of-bounds read or another exception). Properties of an accepted
// file: every tensor lies inside the data section and they tile it in offset order with the
// right byte count for dtype × shape; read_safetensors of the same bytes on disk gives the same
// tensors; the writer's file of those tensors and metadata reads back byte for byte the same
// (round trip). Seeds: tests/fuzz/corpus/fuzz_safetensors/ (files the writer made, a few with
// metadata, empty and scalar tensors, every dtype).
#include <cstring>
#include <map>
#include <string>

#include "fuzz_util.h"
#include "spikemesh/io/safetensors.h"

namespace {

void check_tiling(const sm::SafetensorsHeader& h, size_t size) {
  uint64_t at = 0;
  for (const sm::SafetensorsEntry& e : h.tensors) {
    if (e.begin != at || e.end < e.begin) fuzz::fail("accepted entries that do not tile the data section: " + e.name);
    if (static_cast<uint64_t>(sm::shape_numel(e.shape)) * sm::dtype_size(e.dtype) != e.end - e.begin)
      fuzz::fail("accepted an entry whose byte count is not dtype x shape: " + e.name);
    at = e.end;
  }
  if (h.data_start + at != size) fuzz::fail("accepted entries that do not cover the data section");
}

bool same(const sm::NamedTensors& a, const sm::NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const sm::Tensor &x = a[i].second, &y = b[i].second;
    if (a[i].first != b[i].first || x.dtype() != y.dtype() || x.shape() != y.shape()) return false;
    if (x.nbytes() && std::memcmp(x.raw(), y.raw(), x.nbytes()) != 0) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_path("fuzz.safetensors");
  static const std::string copy = fuzz::scratch_path("fuzz_copy.safetensors");
  static const bool quiet = (fuzz::quiet_logs(), true);
  (void)quiet;
  fuzz::expect_ok_or_input_error([&] {
    const sm::SafetensorsHeader h = sm::parse_safetensors(data, size, "input");
    check_tiling(h, size);
    fuzz::write_file(path, data, size);
    std::map<std::string, std::string> meta;
    const sm::NamedTensors t = sm::read_safetensors(path, &meta);
    if (t.size() != h.tensors.size() || meta != h.metadata) fuzz::fail("read_safetensors differs from the parsed header");
    sm::write_safetensors(copy, t, meta);
    std::map<std::string, std::string> meta2;
    const sm::NamedTensors back = sm::read_safetensors(copy, &meta2);
    if (!same(t, back) || meta2 != meta) fuzz::fail("written and read back, the tensors or metadata changed");
  });
  return 0;
}
