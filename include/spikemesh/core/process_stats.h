// process_stats.h — what this process holds right now, from /proc/self (Linux): resident memory,
// open file descriptors and threads; and its peak resident memory. A run records them every step (metrics.h5 /step/rss_mb,
// /step/open_fds, /step/threads) so a long run shows that none of them grows (`make soak`).
// Local; each read costs tens of microseconds. A field that cannot be read is -1.
#pragma once

namespace sm {

struct ProcessStats {
  double rss_mb = -1;    // resident set size now (not the peak), MiB
  double open_fds = -1;  // entries of /proc/self/fd
  double threads = -1;   // the Threads: line of /proc/self/status
};

ProcessStats process_stats();

// The process's peak resident set size since it started (getrusage ru_maxrss), MiB.
double peak_rss_mb();

}  // namespace sm
