// dist_run.cpp — collective error agreement, configuration comparison, stop agreement,
// string/buffer broadcast and metric reductions (all collective over the given comm).
#include "spikemesh/parallel/dist_run.h"

#include <cstring>
#include <sstream>
#include <toml++/toml.h>

#include "spikemesh/core/error.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/replica_check.h"

namespace sm {

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
  // Lowest failing rank (size() when none): a max-reduction of (size - rank) for failures.
  std::vector<double> v{failed ? static_cast<double>(comm.size() - comm.rank()) : 0.0};
  all_reduce_doubles(comm, v, ReduceOp::Max);
  if (v[0] == 0.0) return;
  const int first = comm.size() - static_cast<int>(v[0]);
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

bool any_rank(Comm& comm, bool local) {
  std::vector<double> v{local ? 1.0 : 0.0};
  all_reduce_doubles(comm, v, ReduceOp::Max);
  return v[0] != 0.0;
}

void broadcast_buffers(Model& model, Comm& comm, int root) {
  // One broadcast of every buffer's bytes, packed (BN layers have three small buffers each).
  std::vector<Buffer*> bufs;
  int64_t bytes = 0;
  for (Buffer* b : model.buffers())
    if (b->value.defined() && b->value.numel() > 0) {
      bufs.push_back(b);
      bytes += static_cast<int64_t>(b->value.nbytes());
    }
  if (bytes == 0) return;
  Tensor packed = Tensor::empty({bytes}, DType::U8);  // [bytes]
  char* p = static_cast<char*>(packed.raw());
  if (comm.rank() == root)
    for (Buffer* b : bufs) {
      const Tensor host = b->value.to(Device::cpu());  // a device buffer: one copy down
      std::memcpy(p, host.raw(), host.nbytes());
      p += host.nbytes();
    }
  comm.broadcast(packed, root);
  p = static_cast<char*>(packed.raw());
  for (Buffer* b : bufs) {  // through a host tensor, so that a device buffer gets one copy up
    Tensor host = Tensor::empty(b->value.shape(), b->value.dtype());
    std::memcpy(host.raw(), p, host.nbytes());
    b->value.copy_from(host);
    p += host.nbytes();
  }
}

int64_t checkpoint_global_batch(const std::string& config_toml, const std::string& mesh) {
  try {
    toml::table t = toml::parse(config_toml);
    const int64_t gbs = t["global-batch-size"].value_or<int64_t>(0);
    if (gbs > 0) return gbs;
    const int64_t b = t["batch-size"].value_or<int64_t>(0), accum = t["grad-accum"].value_or<int64_t>(1);
    const size_t at = mesh.find("dp=");
    const int64_t dp = at == std::string::npos ? 1 : std::atoll(mesh.c_str() + at + 3);
    return b > 0 && dp > 0 ? b * accum * dp : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

void all_reduce_doubles(Comm& comm, std::vector<double>& v, ReduceOp op) {
  if (v.empty()) return;
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::F64);  // [n]
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(double));
  comm.all_reduce(t, op);
  std::memcpy(v.data(), t.raw(), v.size() * sizeof(double));
}

}  // namespace sm
