// process_stats.cpp — /proc/self readings (core/process_stats.h).
#include "spikemesh/core/process_stats.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sm {

namespace {
double resident_mb() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long size = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0 : -1;
}

double open_fds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  double n = 0;
  while (const dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - 1;  // the descriptor of the listing itself
}

double thread_count() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  double n = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "Threads:", 8) == 0) {
      n = std::atof(line + 8);
      break;
    }
  std::fclose(f);
  return n;
}
}  // namespace

ProcessStats process_stats() { return ProcessStats{resident_mb(), open_fds(), thread_count()}; }

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

}  // namespace sm
