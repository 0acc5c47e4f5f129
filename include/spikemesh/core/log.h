// log.h — logging: rank 0 prints by default, every rank prints at error level or when
// SPIKEMESH_LOG_ALL_RANKS=1. Lines go to stderr for warnings/errors, stdout otherwise.
#pragma once
#include <sstream>
#include <string>

namespace sm {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void log_set_level(LogLevel l);
void log_set_rank(int rank);
void log_message(LogLevel l, const std::string& msg);
int log_warning_count();  // warnings emitted by this process (bench records it)

}  // namespace sm

#define SM_LOG(level, expr)                                    \
  do {                                                         \
    std::ostringstream sm_log_os_;                             \
    sm_log_os_ << expr;                                        \
    ::sm::log_message(::sm::LogLevel::level, sm_log_os_.str()); \
  } while (0)
#define SM_INFO(expr) SM_LOG(Info, expr)
#define SM_WARN(expr) SM_LOG(Warn, expr)
#define SM_DEBUG(expr) SM_LOG(Debug, expr)
