// mpi_agree.cpp — agreement on errors across a communicator; string/vector broadcasts.
#include "spikemesh/io/mpi_agree.h"

#include <algorithm>

namespace sm {

int comm_rank(MPI_Comm comm) {
  int r = 0;
  SM_MPI_CHECK(MPI_Comm_rank(comm, &r));
  return r;
}

int comm_size(MPI_Comm comm) {
  int n = 1;
  SM_MPI_CHECK(MPI_Comm_size(comm, &n));
  return n;
}

void bcast_string(MPI_Comm comm, std::string& s, int root) {
  int64_t n = static_cast<int64_t>(s.size());
  SM_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, root, comm));
  s.resize(static_cast<size_t>(n));
  if (n > 0) SM_MPI_CHECK(MPI_Bcast(&s[0], static_cast<int>(n), MPI_CHAR, root, comm));
}

void bcast_i64s(MPI_Comm comm, std::vector<int64_t>& v, int root) {
  int64_t n = static_cast<int64_t>(v.size());
  SM_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, root, comm));
  v.resize(static_cast<size_t>(n));
  // MPI counts are int: send in chunks.
  const int64_t chunk = int64_t(1) << 28;
  for (int64_t i = 0; i < n; i += chunk)
    SM_MPI_CHECK(MPI_Bcast(v.data() + i, static_cast<int>(std::min(chunk, n - i)), MPI_INT64_T, root, comm));
}

void agree_on_error(MPI_Comm comm, bool failed, ErrorKind kind, const std::string& message) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  int mine = failed ? rank : size, first = size;
  SM_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == size) return;
  int k = static_cast<int>(kind);
  SM_MPI_CHECK(MPI_Bcast(&k, 1, MPI_INT, first, comm));
  std::string msg = message;
  bcast_string(comm, msg, first);
  throw Error(static_cast<ErrorKind>(k), msg);
}

void agree_on_error(MPI_Comm comm, const std::function<void()>& local) {
  bool failed = false;
  ErrorKind kind = ErrorKind::Internal;
  std::string msg;
  try {
    local();
  } catch (const Error& e) {
    failed = true;
    kind = e.kind();
    msg = e.what();
  } catch (const std::exception& e) {
    failed = true;
    msg = std::string("internal error (") + where_am_i() + "): " + e.what();
  }
  agree_on_error(comm, failed, kind, msg);
}

}  // namespace sm
