// run_dir.cpp — run directory creation, default names, durations and the run log (run_dir.h).
#include "spikemesh/train/run_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <cstring>
#include <ctime>
#include <iomanip>
#include <sstream>

#include "spikemesh/comm/agree.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"

namespace sm {

RunLog::RunLog(const std::string& path, bool active) {
  if (!active) return;
  f_.open(path, std::ios::app);
  if (!f_) SM_INPUT_ERROR(path << ": cannot write the run log (" << std::strerror(errno) << ")");
}

void RunLog::line(const std::string& s, bool to_stdout) {
  if (!f_.is_open()) return;
  if (to_stdout) SM_INFO(s);
  f_ << s << "\n";
  f_.flush();
}

void check_shared_directory(Comm* group, const std::string& dir, const std::string& flag) {
  if (!group || group->size() == 1) return;
  const std::string probe = dir + "/.spikemesh-shared-probe";
  std::string token;
  agree_on_error(group, [&] {
    if (group->rank() != 0) return;
    std::ostringstream t;
    t << std::hex << ::getpid() << "-" << std::chrono::steady_clock::now().time_since_epoch().count();
    token = t.str();
    std::ofstream f(probe);
    f << token;
    if (!(f << std::flush)) SM_INPUT_ERROR(flag << " " << dir << ": cannot write " << probe);
  });
  token = broadcast_string(*group, token, 0);
  agree_on_error(group, [&] {
    std::ifstream f(probe);
    std::string seen;
    std::getline(f, seen);
    if (seen != token)
      SM_INPUT_ERROR(flag << ": rank " << group->rank() << " (" << where_am_i() << ") does not see the directory "
                          << dir << " that rank 0 made (" << (f ? "another file is there" : "no such file")
                          << "): every rank must write into one shared directory (a node-local or relative path "
                             "in another working directory?)");
  });
  if (group->rank() == 0) std::remove(probe.c_str());
}

void make_dirs(const std::string& path, const std::string& flag) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (mkdir(cur.c_str(), 0775) != 0 && errno != EEXIST)
      SM_INPUT_ERROR(flag << " " << path << ": cannot create " << cur << " (" << std::strerror(errno) << ")");
  }
  if (access(path.c_str(), W_OK) != 0)
    SM_INPUT_ERROR(flag << " " << path << ": directory is not writable (" << std::strerror(errno) << ")");
}

std::string default_run_name(const std::string& model_name) {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&now));
  return model_name + "-" + buf;
}

std::string format_duration(double s) {
  std::ostringstream os;
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) os << t / 3600 << "h" << std::setw(2) << std::setfill('0') << (t % 3600) / 60 << "m";
  else if (t >= 60) os << t / 60 << "m" << std::setw(2) << std::setfill('0') << t % 60 << "s";
  else os << t << "s";
  return os.str();
}

}  // namespace sm
