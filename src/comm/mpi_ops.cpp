// mpi_ops.cpp — MPI host-buffer operations as non-blocking state machines (see mpi_ops.h).
// Messages larger than 1 GiB are split into 1 GiB pieces (MPI counts are int).
#include "mpi_ops.h"

#include <algorithm>
#include <cstring>

#include "reduce_local.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/tensor.h"

namespace sm::comm_detail {
namespace {

constexpr int64_t kMaxPiece = int64_t{1} << 30;

// Outstanding requests with the comm rank each one talks to.
class RequestSet {
 public:
  void irecv(const MpiGroup& g, void* buf, int64_t bytes, int peer, int tag) {
    char* p = static_cast<char*>(buf);
    post_pieces(bytes, peer, 1, [&](int64_t off, int len) {
      SM_MPI_CHECK(MPI_Irecv(p + off, len, MPI_BYTE, peer, tag, g.comm, &reqs_.back()));
    });
  }
  void isend(const MpiGroup& g, const void* buf, int64_t bytes, int peer, int tag) {
    const char* p = static_cast<const char*>(buf);
    post_pieces(bytes, peer, 0, [&](int64_t off, int len) {
      SM_MPI_CHECK(MPI_Isend(p + off, len, MPI_BYTE, peer, tag, g.comm, &reqs_.back()));
    });
  }
  void add(MPI_Request r, int peer) {
    reqs_.push_back(r);
    peers_.push_back(peer);
    is_recv_.push_back(1);
  }
  bool test_all() {
    if (reqs_.empty()) return true;
    int flag = 0;
    SM_MPI_CHECK(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE));
    if (flag) clear();
    return flag != 0;
  }
  void clear() {
    reqs_.clear();
    peers_.clear();
    is_recv_.clear();
  }
  // World ranks of peers with unfinished receives (else unfinished sends); peer -1 = unknown.
  std::string pending(const MpiGroup& g) const {
    std::vector<int> recv_peers, send_peers;
    bool unknown = false;
    for (size_t i = 0; i < reqs_.size(); ++i) {
      int done = 0;
      MPI_Request r = reqs_[i];
      if (r != MPI_REQUEST_NULL) MPI_Request_get_status(r, &done, MPI_STATUS_IGNORE);
      else done = 1;
      if (done) continue;
      if (peers_[i] < 0) {
        unknown = true;
        continue;
      }
      int w = g.world_ranks ? (*g.world_ranks)[peers_[i]] : peers_[i];
      auto& v = is_recv_[i] ? recv_peers : send_peers;
      if (std::find(v.begin(), v.end(), w) == v.end()) v.push_back(w);
    }
    if (!recv_peers.empty()) return "data from world rank(s) " + join_ranks_on_hosts(recv_peers);
    if (!send_peers.empty()) return "world rank(s) " + join_ranks_on_hosts(send_peers) + " to receive our data";
    return unknown ? "unknown peers" : "nothing (completed)";
  }

 private:
  // One request per piece of at most kMaxPiece bytes: start(off, len) posts the piece
  // [off, off + len) into reqs_.back().
  template <typename Start>
  void post_pieces(int64_t bytes, int peer, char recv, Start start) {
    for (int64_t off = 0; off < bytes; off += kMaxPiece) {
      int len = static_cast<int>(std::min(kMaxPiece, bytes - off));
      reqs_.emplace_back();
      start(off, len);
      peers_.push_back(peer);
      is_recv_.push_back(recv);
    }
  }

  std::vector<MPI_Request> reqs_;
  std::vector<int> peers_;
  std::vector<char> is_recv_;
};

class RequestOp : public PendingOp {
 public:
  explicit RequestOp(const MpiGroup& g) : g_(g) {}
  bool progress() override { return reqs_.test_all(); }
  std::string pending_peers() const override { return reqs_.pending(g_); }
  RequestSet& reqs() { return reqs_; }

 private:
  MpiGroup g_;
  RequestSet reqs_;
};

// Reduce-scatter of p chunks (chunk c: elements [begin(c), begin(c)+count(c)) of `in`) into
// `out` ([count(rank)]); then, for all_reduce, all-gather of the reduced chunks into `gather_into`.
class ReduceExchangeOp : public PendingOp {
 public:
  // chunk_elems: elements per chunk for reduce_scatter (equal chunks); -1 = nearly equal
  // chunks of n (all_reduce).
  ReduceExchangeOp(const MpiGroup& g, const void* in, void* out, int64_t n, int64_t chunk_elems, DType dt,
                   ReduceOp op, int tag, void* gather_into)
      : g_(g), in_(static_cast<const char*>(in)), out_(static_cast<char*>(out)), n_(n), equal_(chunk_elems),
        dt_(dt), op_(op), tag_(tag), gather_(static_cast<char*>(gather_into)), es_(dtype_size(dt)) {
    const int p = g.size, me = g.rank;
    int64_t mine = count(me);
    // [p, mine]: every other rank's contribution to my chunk (row `me` unused: my own
    // contribution is read in place).
    scratch_ = Tensor::empty({std::max<int64_t>(1, p * mine * static_cast<int64_t>(es_))}, DType::U8);
    char* tmp = static_cast<char*>(scratch_.raw());
    srcs_.resize(p);
    for (int k = 0; k < p; ++k) srcs_[k] = k == me ? in_ + begin(me) * es_ : tmp + k * mine * es_;
    if (mine > 0) {
      for (int k = 0; k < p; ++k)
        if (k != me) reqs_.irecv(g, tmp + k * mine * es_, mine * es_, k, tag);
    }
    for (int c = 0; c < p; ++c)
      if (c != me && count(c) > 0) reqs_.isend(g, in_ + begin(c) * es_, count(c) * es_, c, tag);
  }

  bool progress() override {
    if (phase_ == 0) {
      if (!reqs_.test_all()) return false;
      int64_t mine = count(g_.rank);
      char* reduced = gather_ ? gather_ + begin(g_.rank) * es_ : out_;
      if (mine > 0) reduce_ordered(srcs_.data(), g_.size, mine, dt_, op_, reduced);  // may alias srcs_[rank]
      phase_ = 1;
      if (gather_) {  // all_reduce: every rank gathers every reduced chunk
        for (int k = 0; k < g_.size; ++k)
          if (k != g_.rank && count(k) > 0) reqs_.irecv(g_, gather_ + begin(k) * es_, count(k) * es_, k, tag_ + 1);
        for (int k = 0; k < g_.size; ++k)
          if (k != g_.rank && mine > 0) reqs_.isend(g_, reduced, mine * es_, k, tag_ + 1);
      }
    }
    if (phase_ == 1) {
      if (!reqs_.test_all()) return false;
      phase_ = 2;
      scratch_ = Tensor();
    }
    return true;
  }
  std::string pending_peers() const override { return reqs_.pending(g_); }

 private:
  int64_t count(int c) const { return equal_ >= 0 ? equal_ : chunk_count(n_, g_.size, c); }
  int64_t begin(int c) const { return equal_ >= 0 ? equal_ * c : chunk_begin(n_, g_.size, c); }

  MpiGroup g_;
  const char* in_;
  char* out_;
  int64_t n_, equal_;
  DType dt_;
  ReduceOp op_;
  int tag_;
  char* gather_;
  size_t es_;
  int phase_ = 0;
  Tensor scratch_;  // [p, count(rank)] bytes from the host caching allocator
  std::vector<const void*> srcs_;  // contribution of rank k to my chunk
  RequestSet reqs_;
};

class DoneOp : public PendingOp {
 public:
  bool progress() override { return true; }
};

}  // namespace

std::unique_ptr<PendingOp> mpi_all_reduce(const MpiGroup& g, void* buf, int64_t n, DType dt, ReduceOp op, int tag) {
  if (g.size == 1) return std::make_unique<DoneOp>();  // sum/avg/max of one value is the value
  return std::make_unique<ReduceExchangeOp>(g, buf, nullptr, n, -1, dt, op, tag, buf);
}

std::unique_ptr<PendingOp> mpi_reduce_scatter(const MpiGroup& g, const void* in, void* out, int64_t n_out, DType dt,
                                              ReduceOp op, int tag) {
  if (g.size == 1) {
    if (n_out > 0 && in != out) std::memcpy(out, in, n_out * dtype_size(dt));
    return std::make_unique<DoneOp>();
  }
  return std::make_unique<ReduceExchangeOp>(g, in, out, n_out * g.size, n_out, dt, op, tag, nullptr);
}

std::unique_ptr<PendingOp> mpi_all_gather(const MpiGroup& g, const void* in, void* out, int64_t bytes_in, int tag) {
  char* o = static_cast<char*>(out);
  auto op = std::make_unique<RequestOp>(g);
  if (bytes_in > 0) {
    for (int k = 0; k < g.size; ++k)
      if (k != g.rank) op->reqs().irecv(g, o + k * bytes_in, bytes_in, k, tag);
    for (int k = 0; k < g.size; ++k)
      if (k != g.rank) op->reqs().isend(g, in, bytes_in, k, tag);
    if (o + g.rank * bytes_in != in) std::memmove(o + g.rank * bytes_in, in, bytes_in);
  }
  return op;
}

std::unique_ptr<PendingOp> mpi_broadcast(const MpiGroup& g, void* buf, int64_t bytes, int root) {
  auto op = std::make_unique<RequestOp>(g);
  if (g.size == 1) return op;
  char* p = static_cast<char*>(buf);
  // Non-roots wait for data that comes down a tree: peers unknown (-1) except the root.
  int64_t off = 0;
  do {
    int len = static_cast<int>(std::min(kMaxPiece, bytes - off));
    MPI_Request r;
    SM_MPI_CHECK(MPI_Ibcast(p + off, len, MPI_BYTE, root, g.comm, &r));
    op->reqs().add(r, -1);
    off += len;
  } while (off < bytes);
  return op;
}

std::unique_ptr<PendingOp> mpi_send(const MpiGroup& g, const void* buf, int64_t bytes, int peer, int tag) {
  auto op = std::make_unique<RequestOp>(g);
  op->reqs().isend(g, buf, std::max<int64_t>(bytes, 0), peer, tag);
  if (bytes == 0) op->reqs().isend(g, buf, 0, peer, tag);  // zero-byte message still matches a recv
  return op;
}

std::unique_ptr<PendingOp> mpi_recv(const MpiGroup& g, void* buf, int64_t bytes, int peer, int tag) {
  auto op = std::make_unique<RequestOp>(g);
  op->reqs().irecv(g, buf, std::max<int64_t>(bytes, 0), peer, tag);
  if (bytes == 0) op->reqs().irecv(g, buf, 0, peer, tag);
  return op;
}

std::unique_ptr<PendingOp> mpi_barrier(const MpiGroup& g) {
  auto op = std::make_unique<RequestOp>(g);
  if (g.size == 1) return op;
  MPI_Request r;
  SM_MPI_CHECK(MPI_Ibarrier(g.comm, &r));
  op->reqs().add(r, -1);
  return op;
}

}  // namespace sm::comm_detail
