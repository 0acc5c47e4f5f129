// error.h — spikemesh's error type and the check macros for every library call.
// Invariant: a failed check throws sm::Error carrying rank, host, file:line and the
// library's own message; the front end (app/) turns it into one message and a non-zero
// exit on every rank (collective errors) or MPI_Abort (one-rank failures).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace sm {

// Category decides how the front end reports it: Input errors are the user's
// (bad flag, file or spec) and print without a source location. RankInput is the user's too,
// but found by one rank alone where the ranks cannot agree first (a damaged sample read in
// training): that rank prints it (naming itself) and the job is aborted, so no rank waits.
enum class ErrorKind { Input, Internal, Library, RankInput };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  // How many ranks throw this same error (comm/agree.h agree_on_error over a group of that
  // size; 0: not agreed). When that is the whole job the front end prints it once, on rank 0,
  // whatever its kind, and no rank aborts.
  int agreed_ranks() const { return agreed_ranks_; }
  Error& mark_agreed(int ranks) {
    agreed_ranks_ = ranks;
    return *this;
  }

 private:
  ErrorKind kind_;
  int agreed_ranks_ = 0;
};

// "rank R on HOST" for messages; rank comes from the process-wide identity set at start-up.
std::string where_am_i();
void set_process_identity(int world_rank, const std::string& host);

[[noreturn]] void throw_library_error(const char* lib, const char* call, const std::string& msg,
                                      const char* file, int line);
[[noreturn]] void throw_internal_error(const std::string& msg, const char* file, int line);

}  // namespace sm

// User-facing input error (bad flag, file, spec entry): message must name the culprit.
#define SM_INPUT_ERROR(msg_expr)                                   \
  do {                                                             \
    std::ostringstream sm_os_;                                     \
    sm_os_ << msg_expr;                                            \
    throw ::sm::Error(::sm::ErrorKind::Input, sm_os_.str());       \
  } while (0)

// Input error found by this rank alone mid-run (see ErrorKind::RankInput); names the rank.
#define SM_RANK_INPUT_ERROR(msg_expr)                                           \
  do {                                                                          \
    std::ostringstream sm_os_;                                                  \
    sm_os_ << msg_expr << " (" << ::sm::where_am_i() << ")";                    \
    throw ::sm::Error(::sm::ErrorKind::RankInput, sm_os_.str());                \
  } while (0)

// Internal invariant; names file:line.
#define SM_CHECK(cond, msg_expr)                                                  \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::ostringstream sm_os_;                                                  \
      sm_os_ << "check failed: " #cond ": " << msg_expr;                         \
      ::sm::throw_internal_error(sm_os_.str(), __FILE__, __LINE__);              \
    }                                                                             \
  } while (0)

// Shared body of the status-code checks (SM_MPI_CHECK, SM_CUDA_CHECK, SM_CUDNN_CHECK, ...):
// evaluates `expr` once as a `status_t` and, unless it equals `ok`, calls
// thrower(rc, text, __FILE__, __LINE__). `text` is the caller's #call.
#define SM_STATUS_CHECK(status_t, ok, thrower, expr, text)                        \
  do {                                                                            \
    status_t sm_status_rc_ = (expr);                                              \
    if (sm_status_rc_ != (ok)) thrower(sm_status_rc_, text, __FILE__, __LINE__);  \
  } while (0)

// MPI: any call returning MPI_SUCCESS on success.
#define SM_MPI_CHECK(call) SM_STATUS_CHECK(int, 0, ::sm::throw_mpi_error, (call), #call)

// HDF5: calls returning negative on failure.
#define SM_H5_CHECK(call)                                                         \
  ([&]() {                                                                        \
    auto sm_rc_ = (call);                                                         \
    if (sm_rc_ < 0) ::sm::throw_hdf5_error(#call, __FILE__, __LINE__);            \
    return sm_rc_;                                                                \
  }())

namespace sm {
[[noreturn]] void throw_mpi_error(int rc, const char* call, const char* file, int line);
[[noreturn]] void throw_hdf5_error(const char* call, const char* file, int line);
}  // namespace sm
