// test_comm.cpp — Comm on the MPI back end with known data: every collective, several
// dtypes and odd sizes, async handles, exact counters, bitwise-identical all_reduce on
// random floats (checked against a rank-ordered reference), size errors, the layers'
// Collectives adapter, and device tensors (*Gpu*, skipped without a GPU).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "comm_test_util.h"
#include "mpi_test_env.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/parallel/comm_collectives.h"
#include "spikemesh/core/device.h"

namespace sm {
namespace {

using test::get_elem;
using test::known_value;
using test::set_elem;

Tensor known_tensor(int rank, int64_t n, DType dt, int64_t offset = 0) {
  Tensor t = Tensor::empty({n}, dt);
  for (int64_t i = 0; i < n; ++i) set_elem(t, i, known_value(rank, offset + i));
  return t;
}

double expected_reduce(int p, int64_t i, DType dt, ReduceOp op) {
  double sum = 0, mx = -1;
  for (int r = 0; r < p; ++r) {
    sum += known_value(r, i);
    mx = std::max(mx, known_value(r, i));
  }
  if (op == ReduceOp::Max) return mx;
  if (op == ReduceOp::Sum) return sum;
  return test::is_float(dt) ? sum / p : static_cast<double>(static_cast<int64_t>(sum) / p);
}

class CommTest : public ::testing::Test {
 protected:
  void SetUp() override { comm = std::make_unique<Comm>(test::world(), "test"); }
  std::unique_ptr<Comm> comm;
};

TEST_F(CommTest, RankSizeAndWorldRanks) {
  EXPECT_EQ(comm->rank(), test::world_rank());
  EXPECT_EQ(comm->size(), test::world_size());
  ASSERT_EQ(static_cast<int>(comm->world_ranks().size()), test::world_size());
  for (int r = 0; r < comm->size(); ++r) EXPECT_EQ(comm->world_ranks()[r], r);
  EXPECT_EQ(comm->name(), "test");
}

TEST_F(CommTest, AllReduceKnownDataEveryDTypeAndOp) {
  const int p = comm->size(), me = comm->rank();
  for (DType dt : test::kAllDTypes)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
      for (int64_t n : {0, 1, 2, 3, 7, 13, 1000, 4099}) {
        Tensor t = known_tensor(me, n, dt);
        comm->all_reduce(t, op);
        int bad = 0;
        for (int64_t i = 0; i < n; ++i)
          if (get_elem(t, i) != expected_reduce(p, i, dt, op)) ++bad;
        EXPECT_EQ(bad, 0) << dtype_name(dt) << " " << reduce_op_name(op) << " n=" << n;
      }
}

TEST_F(CommTest, ReduceScatterOddSizes) {
  const int p = comm->size(), me = comm->rank();
  for (DType dt : test::kAllDTypes)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
      for (int64_t n : {1, 3, 7, 1001}) {
        Tensor in = known_tensor(me, p * n, dt);  // [p*n]
        Tensor out = Tensor::empty({n}, dt);      // [n]
        comm->reduce_scatter(in, out, op);
        int bad = 0;
        for (int64_t i = 0; i < n; ++i)
          if (get_elem(out, i) != expected_reduce(p, me * n + i, dt, op)) ++bad;
        EXPECT_EQ(bad, 0) << dtype_name(dt) << " " << reduce_op_name(op) << " n=" << n;
      }
}

TEST_F(CommTest, AllGatherOddSizes) {
  const int p = comm->size(), me = comm->rank();
  for (DType dt : test::kAllDTypes)
    for (int64_t n : {0, 1, 5, 13, 777}) {
      Tensor in = known_tensor(me, n, dt);      // [n]
      Tensor out = Tensor::empty({p * n}, dt);  // [p*n]
      comm->all_gather(in, out);
      int bad = 0;
      for (int k = 0; k < p; ++k)
        for (int64_t i = 0; i < n; ++i)
          if (get_elem(out, k * n + i) != known_value(k, i)) ++bad;
      EXPECT_EQ(bad, 0) << dtype_name(dt) << " n=" << n;
    }
}

TEST_F(CommTest, SizeMismatchIsAClearErrorOnEveryRank) {
  const int p = comm->size();
  Tensor in = Tensor::zeros({p * 4 + 1}, DType::F32), out = Tensor::zeros({4}, DType::F32);
  try {
    comm->reduce_scatter(in, out);
    ADD_FAILURE() << "no error for " << p * 4 + 1 << " -> 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be size x the small side"), std::string::npos) << e.what();
  }
  Tensor small = Tensor::zeros({3}, DType::F32), wrong = Tensor::zeros({3 * p + 2}, DType::F32);
  EXPECT_THROW(comm->all_gather(small, wrong), Error);
  Tensor other = Tensor::zeros({3 * p}, DType::F64);
  EXPECT_THROW(comm->all_gather(small, other), Error);  // dtype mismatch
  EXPECT_EQ(padded_numel(10, 4), 12);
  EXPECT_EQ(padded_numel(12, 4), 12);
  // The comm still works afterwards (nothing was posted).
  Tensor t = Tensor::full({5}, 1.0, DType::F32);
  comm->all_reduce(t);
  EXPECT_EQ(get_elem(t, 4), p);
}

TEST_F(CommTest, BroadcastFromEveryRoot) {
  const int p = comm->size(), me = comm->rank();
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::I64, DType::U8})
    for (int root = 0; root < p; ++root)
      for (int64_t n : {0, 1, 9, 5000}) {
        Tensor t = me == root ? known_tensor(root, n, dt) : Tensor::zeros({n}, dt);
        comm->broadcast(t, root);
        int bad = 0;
        for (int64_t i = 0; i < n; ++i)
          if (get_elem(t, i) != known_value(root, i)) ++bad;
        EXPECT_EQ(bad, 0) << dtype_name(dt) << " root=" << root << " n=" << n;
      }
}

TEST_F(CommTest, SendRecvPairsAndRing) {
  const int p = comm->size(), me = comm->rank();
  // Blocking pairs (0<->1, 2<->3): the lower rank sends first.
  if ((p % 2) == 0) {
    int peer = me ^ 1;
    Tensor out = known_tensor(me, 33, DType::F64), in = Tensor::zeros({33}, DType::F64);
    if (me < peer) {
      comm->send(out, peer, 5);
      comm->recv(in, peer, 5);
    } else {
      comm->recv(in, peer, 5);
      comm->send(out, peer, 5);
    }
    for (int64_t i = 0; i < 33; ++i) EXPECT_EQ(get_elem(in, i), known_value(peer, i));
  }
  // Async ring, two tags in flight, receives posted after the sends.
  int next = (me + 1) % p, prev = (me + p - 1) % p;
  Tensor a = known_tensor(me, 100, DType::I32), b = known_tensor(me + 10, 3, DType::I32);
  Tensor ra = Tensor::zeros({100}, DType::I32), rb = Tensor::zeros({3}, DType::I32);
  auto sb = comm->send_async(b, next, 2);
  auto sa = comm->send_async(a, next, 1);
  auto hb = comm->recv_async(rb, prev, 2);
  auto ha = comm->recv_async(ra, prev, 1);
  ha->wait();
  hb->wait();
  sa->wait();
  sb->wait();
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(get_elem(ra, i), known_value(prev, i));
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(get_elem(rb, i), known_value(prev + 10, i));
}

TEST_F(CommTest, AsyncHandlesInFlightTogether) {
  const int p = comm->size(), me = comm->rank();
  std::vector<Tensor> ts;
  std::vector<std::unique_ptr<CommHandle>> hs;
  for (int k = 0; k < 4; ++k) {
    ts.push_back(known_tensor(me, 1000 + 17 * k, DType::F32, k));
    hs.push_back(comm->all_reduce_async(ts.back(), ReduceOp::Sum));
  }
  Tensor gin = known_tensor(me, 11, DType::I64), gout = Tensor::zeros({11 * p}, DType::I64);
  auto hg = comm->all_gather_async(gin, gout);
  Tensor rin = known_tensor(me, 6 * p, DType::F64), rout = Tensor::zeros({6}, DType::F64);
  auto hr = comm->reduce_scatter_async(rin, rout, ReduceOp::Max);
  Tensor bc = me == p - 1 ? known_tensor(p - 1, 20, DType::U8) : Tensor::zeros({20}, DType::U8);
  auto hbc = comm->broadcast_async(bc, p - 1);
  auto hbar = comm->barrier_async();
  // Poll one with test(), wait for the rest in reverse order.
  while (!hs[0]->test()) {
  }
  EXPECT_TRUE(hs[0]->test());  // stays complete
  hbar->wait();
  hbc->wait();
  hr->wait();
  hg->wait();
  for (int k = 3; k >= 0; --k) hs[k]->wait();
  hs[1]->wait();  // idempotent
  for (int k = 0; k < 4; ++k) {
    int bad = 0;
    for (int64_t i = 0; i < ts[k].numel(); ++i)
      if (get_elem(ts[k], i) != expected_reduce(p, k + i, DType::F32, ReduceOp::Sum)) ++bad;
    EXPECT_EQ(bad, 0) << "all_reduce " << k;
  }
  for (int r = 0; r < p; ++r)
    for (int64_t i = 0; i < 11; ++i) EXPECT_EQ(get_elem(gout, r * 11 + i), known_value(r, i));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(get_elem(rout, i), expected_reduce(p, me * 6 + i, DType::F64, ReduceOp::Max));
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(get_elem(bc, i), known_value(p - 1, i));
}

TEST_F(CommTest, HandleDestructorCompletesTheOperation) {
  const int p = comm->size(), me = comm->rank();
  Tensor t = known_tensor(me, 50, DType::F64);
  { auto h = comm->all_reduce_async(t); }  // dropped without wait()
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(get_elem(t, i), expected_reduce(p, i, DType::F64, ReduceOp::Sum));
}

TEST_F(CommTest, CountersAreExact) {
  const uint64_t p = comm->size();
  const int me = comm->rank();
  comm->reset_counters();
  Tensor ar = Tensor::zeros({1000}, DType::F32);  // 4000 B
  comm->all_reduce(ar);
  comm->all_reduce_async(ar)->wait();
  Tensor rin = Tensor::zeros({static_cast<int64_t>(10 * p)}, DType::F64), rout = Tensor::zeros({10}, DType::F64);
  comm->reduce_scatter(rin, rout);  // payload = input = 80p B
  Tensor gin = Tensor::zeros({3}, DType::I32), gout = Tensor::zeros({static_cast<int64_t>(3 * p)}, DType::I32);
  comm->all_gather(gin, gout);  // payload = output = 12p B
  Tensor b = Tensor::zeros({5}, DType::U8);
  comm->broadcast(b, 0);
  comm->barrier();
  Tensor s = Tensor::zeros({4}, DType::F32), r = Tensor::zeros({4}, DType::F32);
  int next = (me + 1) % static_cast<int>(p), prev = (me + static_cast<int>(p) - 1) % static_cast<int>(p);
  auto hs = comm->send_async(s, next, 0);
  comm->recv(r, prev, 0);
  hs->wait();

  const auto& c = comm->counters();
  EXPECT_EQ(c[CommOp::AllReduce].calls, 2u);
  EXPECT_EQ(c[CommOp::AllReduce].payload_bytes, 8000u);
  EXPECT_EQ(c[CommOp::AllReduce].bus_bytes, 2 * (2 * (p - 1) * 4000 / p));
  EXPECT_EQ(c[CommOp::ReduceScatter].calls, 1u);
  EXPECT_EQ(c[CommOp::ReduceScatter].payload_bytes, 80 * p);
  EXPECT_EQ(c[CommOp::ReduceScatter].bus_bytes, 80 * (p - 1));
  EXPECT_EQ(c[CommOp::AllGather].calls, 1u);
  EXPECT_EQ(c[CommOp::AllGather].payload_bytes, 12 * p);
  EXPECT_EQ(c[CommOp::AllGather].bus_bytes, 12 * (p - 1));
  EXPECT_EQ(c[CommOp::Broadcast].calls, 1u);
  EXPECT_EQ(c[CommOp::Broadcast].payload_bytes, 5u);
  EXPECT_EQ(c[CommOp::Broadcast].bus_bytes, p > 1 ? 5u : 0u);
  EXPECT_EQ(c[CommOp::Barrier].calls, 1u);
  EXPECT_EQ(c[CommOp::Barrier].payload_bytes, 0u);
  EXPECT_EQ(c[CommOp::Send].calls, 1u);
  EXPECT_EQ(c[CommOp::Send].payload_bytes, 16u);
  EXPECT_EQ(c[CommOp::Send].bus_bytes, 16u);
  EXPECT_EQ(c[CommOp::Recv].calls, 1u);
  EXPECT_EQ(c[CommOp::Recv].payload_bytes, 16u);
  EXPECT_EQ(c.total_calls(), 8u);
  EXPECT_EQ(c.total_payload_bytes(), 8000 + 80 * p + 12 * p + 5 + 32);
  EXPECT_GE(c.total_wait_seconds(), 0.0);
  comm->reset_counters();
  EXPECT_EQ(comm->counters().total_calls(), 0u);
}

// Random floats of very different magnitudes: the sum depends on the order of additions,
// so equality across ranks and with the rank-ordered reference is a real check.
template <typename T>
void check_bitwise_all_reduce(Comm& comm, DType dt, int64_t n) {
  const int p = comm.size(), me = comm.rank();
  std::mt19937_64 gen(1234 + 77 * me);
  std::uniform_real_distribution<double> u(-1, 1), e(-6, 6);
  Tensor x = Tensor::empty({n}, dt);  // [n]
  T* xp = static_cast<T*>(x.raw());
  for (int64_t i = 0; i < n; ++i) xp[i] = static_cast<T>(u(gen) * std::pow(10.0, e(gen)));
  Tensor inputs = Tensor::empty({p * n}, dt);  // [p, n] every rank's input
  comm.all_gather(x, inputs);
  comm.all_reduce(x, ReduceOp::Sum);
  Tensor results = Tensor::empty({p * n}, dt);  // [p, n] every rank's result
  comm.all_gather(x, results);
  const T* in = static_cast<const T*>(inputs.raw());
  const T* res = static_cast<const T*>(results.raw());
  int64_t differ_across = 0, differ_ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    T ref = in[i];
    for (int r = 1; r < p; ++r) ref += in[r * n + i];  // rank order 0, 1, ..., p-1
    for (int r = 0; r < p; ++r) {
      if (std::memcmp(&res[r * n + i], &res[i], sizeof(T)) != 0) ++differ_across;
      if (std::memcmp(&res[r * n + i], &ref, sizeof(T)) != 0) ++differ_ref;
    }
  }
  EXPECT_EQ(differ_across, 0) << dtype_name(dt) << ": results differ across ranks";
  EXPECT_EQ(differ_ref, 0) << dtype_name(dt) << ": results differ from the rank-ordered sum";
}

TEST_F(CommTest, AllReduceBitwiseIdenticalAcrossRanksOnRandomFloats) {
  for (int64_t n : {1, 5, 4097, 100003}) {
    check_bitwise_all_reduce<float>(*comm, DType::F32, n);
    check_bitwise_all_reduce<double>(*comm, DType::F64, n);
  }
  // bf16: identical across ranks (accumulated in f32, rounded once).
  const int p = comm->size(), me = comm->rank();
  const int64_t n = 3001;
  std::mt19937 gen(99 + me);
  std::uniform_int_distribution<int> bits(0, 0x7f7f);
  Tensor x = Tensor::empty({n}, DType::BF16);
  auto* xp = static_cast<uint16_t*>(x.raw());
  for (int64_t i = 0; i < n; ++i) xp[i] = static_cast<uint16_t>(bits(gen) | ((i & 1) << 15));
  comm->all_reduce(x);
  Tensor all = Tensor::empty({p * n}, DType::BF16);
  comm->all_gather(x, all);
  EXPECT_EQ(std::memcmp(all.raw(), static_cast<char*>(all.raw()) + (p - 1) * n * 2, n * 2), 0);
}

TEST_F(CommTest, OneRankSubCommunicatorIsIdentity) {
  // Each rank alone: every collective leaves data as it is.
  MPI_Comm self;
  MPI_Comm_split(test::world(), test::world_rank(), 0, &self);
  {
    Comm solo(self, "solo");
    EXPECT_EQ(solo.size(), 1);
    Tensor t = known_tensor(3, 17, DType::F16);
    solo.all_reduce(t, ReduceOp::Avg);
    for (int64_t i = 0; i < 17; ++i) EXPECT_EQ(get_elem(t, i), known_value(3, i));
    Tensor o = Tensor::zeros({17}, DType::F16);
    solo.reduce_scatter(t, o);
    solo.all_gather(t, o);
    for (int64_t i = 0; i < 17; ++i) EXPECT_EQ(get_elem(o, i), known_value(3, i));
    EXPECT_EQ(solo.counters()[CommOp::AllReduce].bus_bytes, 0u);
  }
  MPI_Comm_free(&self);
}

TEST_F(CommTest, CollectivesAdapterSumsOverTheComm) {
  CommCollectives coll(*comm);
  Collectives& c = coll;  // as a layer sees it
  EXPECT_EQ(c.size(), comm->size());
  EXPECT_EQ(c.rank(), comm->rank());
  Tensor t = known_tensor(c.rank(), 64, DType::F64);
  c.all_reduce_sum(t);
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(get_elem(t, i), expected_reduce(c.size(), i, DType::F64, ReduceOp::Sum));
}

TEST(CommNames, BackendAndTimeoutSettings) {
  EXPECT_EQ(comm_backend_from_name("nccl"), CommBackend::Nccl);
  EXPECT_EQ(comm_backend_from_name("mpi"), CommBackend::Mpi);
  EXPECT_THROW(comm_backend_from_name("gloo"), Error);
  double old = comm_timeout_seconds();
  set_comm_timeout_seconds(0);
  EXPECT_EQ(comm_timeout_seconds(), 0.0);
  EXPECT_THROW(set_comm_timeout_seconds(-1), Error);
  set_comm_timeout_seconds(old);
  EXPECT_EQ(comm_bus_bytes(CommOp::AllReduce, 1000, 4), 1500u);
  EXPECT_EQ(comm_bus_bytes(CommOp::AllGather, 1000, 4), 750u);
  EXPECT_EQ(comm_bus_bytes(CommOp::AllReduce, 1000, 1), 0u);
}

// ---- device tensors (skipped without a GPU) ---------------------------------------------

TEST_F(CommTest, AllReduceDeviceTensorsGpu) {
  // Every rank decides alike (same node in tests) so collectives stay matched.
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int p = comm->size(), me = comm->rank();
  const Device dev = Device::cuda(me % cuda_device_count());
  SCOPED_TRACE(comm->device_backend_name());
  for (DType dt : {DType::F32, DType::BF16, DType::I64}) {
    Tensor t = known_tensor(me, 1003, dt).to(dev);
    comm->all_reduce(t, ReduceOp::Sum);
    Tensor h = t.to(Device::cpu());
    int bad = 0;
    for (int64_t i = 0; i < 1003; ++i)
      if (get_elem(h, i) != expected_reduce(p, i, dt, ReduceOp::Sum)) ++bad;
    EXPECT_EQ(bad, 0) << dtype_name(dt);
    Tensor in = known_tensor(me, 5 * p, dt).to(dev), out = Tensor::zeros({5}, dt, dev);
    comm->reduce_scatter(in, out);
    Tensor g = Tensor::zeros({5 * p}, dt, dev);
    comm->all_gather(out, g);
    Tensor gh = g.to(Device::cpu());
    for (int r = 0; r < p; ++r)
      for (int64_t i = 0; i < 5; ++i)
        EXPECT_EQ(get_elem(gh, r * 5 + i), expected_reduce(p, r * 5 + i, dt, ReduceOp::Sum));
  }
}

TEST(CommGpu, OneRankCommUsesNcclOnItsGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  MPI_Comm self;
  MPI_Comm_split(test::world(), test::world_rank(), 0, &self);
  {
    Comm solo(self, "solo");  // one rank owns one GPU: NCCL when built with it
    std::string path = solo.device_backend_name();
#ifdef SPIKEMESH_HAVE_NCCL
    EXPECT_EQ(path, "nccl");
#endif
    const Device dev = Device::cuda(test::world_rank() % cuda_device_count());
    Tensor t = known_tensor(2, 300, DType::F32).to(dev);
    solo.all_reduce(t, ReduceOp::Avg);
    solo.broadcast(t, 0);
    Tensor g = Tensor::zeros({300}, DType::F32, dev);
    solo.all_gather(t, g);
    Tensor h = g.to(Device::cpu());
    for (int64_t i = 0; i < 300; ++i) EXPECT_EQ(get_elem(h, i), known_value(2, i));
  }
  MPI_Comm_free(&self);
}

TEST(CommGpu, NcclRefusesRanksSharingAGpu) {
  const int w = test::world_size();
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  if (cuda_device_count() >= w) GTEST_SKIP() << "every rank has its own GPU here";
#ifndef SPIKEMESH_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#endif
  Comm comm(test::world(), "shared", CommOptions{CommBackend::Nccl});
  try {
    comm.device_backend_name();
    ADD_FAILURE() << "--comm nccl accepted ranks sharing a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("share GPU"), std::string::npos) << e.what();
  }
  Comm autocomm(test::world(), "auto");  // auto falls back to staging through host memory
  EXPECT_EQ(autocomm.device_backend_name(), "mpi (staged through host)");
}

}  // namespace
}  // namespace sm
