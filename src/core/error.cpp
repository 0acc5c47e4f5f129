// error.cpp — process identity for messages and the library-error constructors.
#include "spikemesh/core/error.h"

#include <hdf5.h>
#include <mpi.h>

namespace sm {
namespace {
int g_rank = -1;
std::string g_host;
}  // namespace

void set_process_identity(int world_rank, const std::string& host) {
  g_rank = world_rank;
  g_host = host;
}

std::string where_am_i() {
  std::ostringstream os;
  os << "rank " << (g_rank < 0 ? 0 : g_rank);
  if (!g_host.empty()) os << " on " << g_host;
  return os.str();
}

void throw_library_error(const char* lib, const char* call, const std::string& msg, const char* file,
                         int line) {
  std::string one_line = msg;  // library messages may span lines; ours are one line
  for (char& c : one_line)
    if (c == '\n' || c == '\r') c = ' ';
  std::ostringstream os;
  os << lib << " error in " << call << " (" << where_am_i() << ", " << file << ":" << line << "): " << one_line;
  throw Error(ErrorKind::Library, os.str());
}

void throw_internal_error(const std::string& msg, const char* file, int line) {
  std::ostringstream os;
  os << "internal error (" << where_am_i() << ", " << file << ":" << line << "): " << msg;
  throw Error(ErrorKind::Internal, os.str());
}

void throw_mpi_error(int rc, const char* call, const char* file, int line) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) len = 0;
  throw_library_error("MPI", call, std::string(buf, len), file, line);
}

namespace {
herr_t collect_h5_error(unsigned n, const H5E_error2_t* e, void* out) {
  auto* s = static_cast<std::string*>(out);
  if (n == 0 && e->desc) *s = e->desc;  // innermost description
  return 0;
}
}  // namespace

void throw_hdf5_error(const char* call, const char* file, int line) {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_h5_error, &msg);
  H5Eclear2(H5E_DEFAULT);
  throw_library_error("HDF5", call, msg.empty() ? "call failed" : msg, file, line);
}

}  // namespace sm
