// replay_main.cpp — a stand-in for libFuzzer's driver, so that `make fuzz-replay` (a step of
// `make test`) runs a harness's LLVMFuzzerTestOneInput over committed inputs with the normal
// g++/mpicxx build, no clang needed. Usage: fuzz_replay/<harness> DIR_OR_FILE... — every
// regular file (directories: recursively, sorted) is one input; a missing directory is
// skipped; prints how many inputs ran. A harness that crashes, aborts or lets an exception
// escape fails the run (non-zero exit). Zero inputs in total is a failure too (a corpus that
// went missing must not pass silently).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    const fs::path p(argv[i]);
    if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(p, ec))
        if (e.is_regular_file(ec) && e.path().filename().string()[0] != '.') files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  const char* name = argc > 0 ? argv[0] : "replay";
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "%s: cannot read %s\n", name, f.c_str());
      return 1;
    }
    // A fresh heap copy of exactly the input's size (like libFuzzer), so overreads can show.
    std::vector<uint8_t> copy(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(copy.empty() ? nullptr : copy.data(), copy.size());
  }
  std::printf("%s: %zu inputs replayed, no crash\n", fs::path(name).filename().c_str(), files.size());
  if (files.empty()) {
    std::fprintf(stderr, "%s: no inputs found in the given directories\n", name);
    return 1;
  }
  return 0;
}
