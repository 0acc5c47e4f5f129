// agree.cpp — error agreement, configuration comparison, string/vector broadcasts, a
// variable-length gather and f64 reductions over a Comm (comm/agree.h).
#include "spikemesh/comm/agree.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/core/rng.h"

namespace sm {

uint64_t text_hash(const std::string& s) { return hash_name(s); }  // the FNV-1a of core/rng.h

namespace {

// Collective over `comm`: the lowest rank with `failed` set, or -1 when none.
int first_failing_rank(Comm& comm, bool failed) {
  // A max-reduction of (size - rank) over the failing ranks (0 when none).
  std::vector<double> v{failed ? static_cast<double>(comm.size() - comm.rank()) : 0.0};
  all_reduce_doubles(comm, v, ReduceOp::Max);
  return v[0] == 0.0 ? -1 : comm.size() - static_cast<int>(v[0]);
}

}  // namespace

void agree_on_error(Comm* group, const std::function<void()>& local) {
  if (!group) {  // alone: the same errors, without communication
    try {
      local();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(ErrorKind::Internal, std::string("internal error (") + where_am_i() + "): " + e.what());
    }
    return;
  }
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
  const int first = first_failing_rank(*group, failed);
  if (first < 0) return;
  // The kind travels as the first byte of the message.
  const std::string sent = broadcast_string(*group, std::string(1, static_cast<char>(kind)) + msg, first);
  // Every rank of `group` throws it; the front end prints it once when `group` is the whole job.
  throw Error(static_cast<ErrorKind>(sent[0]), sent.substr(1)).mark_agreed(group->size());
}

void collective_check(Comm& comm, const std::function<void()>& f) {
  std::string msg;
  bool failed = false;
  try {
    f();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Input) throw;
    failed = true;
    msg = e.what();
  }
  const int first = first_failing_rank(comm, failed);
  if (first < 0) return;
  std::string text = broadcast_string(comm, msg, first);
  if (first != 0) text = "rank " + std::to_string(first) + ": " + text;
  throw Error(ErrorKind::Input, text);
}

void check_same_text(Comm& comm, const std::string& text, const std::string& what) {
  Tensor mine = Tensor::empty({1}, DType::I64);
  mine.data<int64_t>()[0] = static_cast<int64_t>(text_hash(text));
  Tensor all = Tensor::empty({comm.size()}, DType::I64);  // [p]
  comm.all_gather(mine, all);
  const int64_t* h = all.data<int64_t>();
  std::ostringstream differ;
  int n = 0;
  for (int r = 1; r < comm.size(); ++r)
    if (h[r] != h[0]) differ << (n++ ? ", " : "") << r;
  if (n)
    SM_INPUT_ERROR("the ranks disagree on " << what << ": rank" << (n > 1 ? "s " : " ") << differ.str()
                                            << " differ from rank 0 (same command line, config file and "
                                               "environment on every rank?)");
}

std::string broadcast_string(Comm& comm, const std::string& s, int root) {
  Tensor len = Tensor::empty({1}, DType::I64);
  len.data<int64_t>()[0] = static_cast<int64_t>(s.size());
  comm.broadcast(len, root);
  const int64_t n = len.data<int64_t>()[0];
  if (n == 0) return "";
  Tensor buf = Tensor::empty({n}, DType::U8);  // [n]
  if (comm.rank() == root) std::memcpy(buf.raw(), s.data(), static_cast<size_t>(n));
  comm.broadcast(buf, root);
  return std::string(static_cast<const char*>(buf.raw()), static_cast<size_t>(n));
}

std::vector<std::string> all_gather_strings(Comm& comm, const std::string& mine) {
  const int p = comm.size();
  Tensor len = Tensor::empty({1}, DType::I64), lens = Tensor::empty({p}, DType::I64);
  len.data<int64_t>()[0] = static_cast<int64_t>(mine.size());
  comm.all_gather(len, lens);
  int64_t cap = 1;
  for (int r = 0; r < p; ++r) cap = std::max(cap, lens.data<int64_t>()[r]);
  Tensor buf = Tensor::zeros({cap}, DType::U8), all = Tensor::empty({cap * p}, DType::U8);  // [cap], [p·cap]
  std::memcpy(buf.raw(), mine.data(), mine.size());
  comm.all_gather(buf, all);
  std::vector<std::string> out;
  for (int r = 0; r < p; ++r)
    out.emplace_back(static_cast<const char*>(all.raw()) + r * cap, static_cast<size_t>(lens.data<int64_t>()[r]));
  return out;
}

void broadcast_i64s(Comm& comm, std::vector<int64_t>& v, int root) {
  Tensor len = Tensor::empty({1}, DType::I64);
  len.data<int64_t>()[0] = static_cast<int64_t>(v.size());
  comm.broadcast(len, root);
  const int64_t n = len.data<int64_t>()[0];
  v.resize(static_cast<size_t>(n));
  if (n == 0) return;
  Tensor buf = Tensor::empty({n}, DType::I64);  // [n]
  if (comm.rank() == root) std::memcpy(buf.raw(), v.data(), static_cast<size_t>(n) * sizeof(int64_t));
  comm.broadcast(buf, root);
  std::memcpy(v.data(), buf.raw(), static_cast<size_t>(n) * sizeof(int64_t));
}

std::vector<int64_t> gather_i64s(Comm& comm, const std::vector<int64_t>& mine, int root) {
  // Through Comm's all_gather (under its watchdog; Comm has no variable-length gather): the
  // lengths, then every rank's values padded to the longest. Used for small row lists.
  const int p = comm.size();
  Tensor len = Tensor::empty({1}, DType::I64), lens = Tensor::empty({p}, DType::I64);  // [1], [p]
  len.data<int64_t>()[0] = static_cast<int64_t>(mine.size());
  comm.all_gather(len, lens);
  int64_t cap = 1;
  for (int r = 0; r < p; ++r) cap = std::max(cap, lens.data<int64_t>()[r]);
  Tensor buf = Tensor::zeros({cap}, DType::I64), all = Tensor::empty({cap * p}, DType::I64);  // [cap], [p·cap]
  if (!mine.empty()) std::memcpy(buf.raw(), mine.data(), mine.size() * sizeof(int64_t));
  comm.all_gather(buf, all);
  std::vector<int64_t> out;
  if (comm.rank() != root) return out;
  for (int r = 0; r < p; ++r) {
    const int64_t* row = all.data<int64_t>() + r * cap;
    out.insert(out.end(), row, row + lens.data<int64_t>()[r]);
  }
  return out;
}

bool any_rank(Comm& comm, bool local) {
  std::vector<double> v{local ? 1.0 : 0.0};
  all_reduce_doubles(comm, v, ReduceOp::Max);
  return v[0] != 0.0;
}

void all_reduce_doubles(Comm& comm, std::vector<double>& v, ReduceOp op) {
  if (v.empty()) return;
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::F64);  // [n]
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(double));
  comm.all_reduce(t, op);
  std::memcpy(v.data(), t.raw(), v.size() * sizeof(double));
}

}  // namespace sm
