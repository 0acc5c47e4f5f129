// cmd_commtest.cpp — `spikemesh commtest`: a self-checking communication test for checking a
// cluster before a long run (in the spirit of nccl-tests). For every operation and every
// size from --min-bytes to --max-bytes (doubling) it times --iters calls after --warmup
// calls, then runs the operation once more on known data and counts wrong elements.
// Prints per row: size, element count, time per call (max over ranks), algorithm bandwidth
// (size / time) and bus bandwidth (algbw x the algorithm factor: all_reduce 2(p-1)/p,
// reduce_scatter and all_gather (p-1)/p, broadcast and sendrecv 1), and the wrong count.
// Exit status 1 when any element on any rank was wrong.
// Sizes: "size" is the bytes of the larger buffer of the operation (all_reduce/broadcast:
// the tensor; reduce_scatter: the input; all_gather: the output; sendrecv: one message),
// rounded down to whole elements and, for reduce_scatter/all_gather, to a multiple of p.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "spikemesh/app/commands.h"
#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/config_keys.h"
#include "spikemesh/core/flag_ranges.h"
#include "spikemesh/parallel/parallel_config.h"

namespace sm {
namespace {

struct CommtestOptions {
  MeshFlags mesh;       // from the mesh keys of the parallel flags' table (parallel/parallel_config.h)
  ParallelConfig par;
  ConfigKeys keys;
  int64_t min_bytes = 1;
  int64_t max_bytes = int64_t{64} << 20;
  int iters = 20;
  int warmup = 5;
  std::string dtype = "f32";
  std::string op = "sum";
  std::string group = "world";
  std::string device = "auto";
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "sendrecv", "barrier"};
  int hang_rank = -1;
};

// Known data: small integers, so every dtype holds them and their sums exactly.
double known(int rank, int64_t i) { return static_cast<double>((i * 7 + rank * 13) % 3); }

void put(Tensor& t, int64_t i, double v) {
  void* p = t.raw();
  switch (t.dtype()) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::BF16: {  // exact for small integers: the top half of the f32 bits
      float f = static_cast<float>(v);
      uint32_t x;
      std::memcpy(&x, &f, 4);
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(x >> 16);
      break;
    }
    case DType::F16: {  // small non-negative integers (< 2048)
      auto n = static_cast<uint32_t>(v);
      uint16_t h = 0;
      if (n) {
        int e = 31 - __builtin_clz(n);
        h = static_cast<uint16_t>(((e + 15) << 10) | ((n << (10 - e)) & 0x3ff));
      }
      static_cast<uint16_t*>(p)[i] = h;
      break;
    }
    case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
  }
}

double get(const Tensor& t, int64_t i) {
  const void* p = t.raw();
  switch (t.dtype()) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::BF16: {
      uint32_t x = static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16;
      float f;
      std::memcpy(&f, &x, 4);
      return f;
    }
    case DType::F16: {
      uint16_t h = static_cast<const uint16_t*>(p)[i];
      int e = (h >> 10) & 31, m = h & 1023;
      double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
      return (h & 0x8000) ? -v : v;
    }
    case DType::U8: return static_cast<const uint8_t*>(p)[i];
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
  }
  return 0;
}

// Expected reduction of element i over p ranks, in the dtype's terms.
double expected(int p, int64_t i, DType dt, ReduceOp op) {
  double sum = 0, mx = 0;
  for (int r = 0; r < p; ++r) {
    sum += known(r, i);
    mx = std::max(mx, known(r, i));
  }
  if (op == ReduceOp::Max) return mx;
  bool is_float = dt == DType::F32 || dt == DType::F64 || dt == DType::BF16 || dt == DType::F16;
  if (dt == DType::U8 && op == ReduceOp::Sum) return std::fmod(sum, 256.0);
  if (op == ReduceOp::Sum) return sum;
  return is_float ? sum / p : std::floor(sum / p);
}

// Tolerance: sums of small integers are exact until they exceed the format's integer range.
bool same(double got, double want, DType dt) {
  double tol = dt == DType::BF16 ? std::ldexp(std::fabs(want), -8) : dt == DType::F16 ? std::ldexp(std::fabs(want), -11) : 0.0;
  if (dt == DType::F32 || dt == DType::BF16 || dt == DType::F16) tol += std::fabs(want) * 1e-6;  // avg rounding
  return std::fabs(got - want) <= tol;
}

Tensor host_known(int rank, int64_t n, DType dt, int64_t offset = 0) {
  Tensor t = Tensor::empty({n}, dt);
  for (int64_t i = 0; i < n; ++i) put(t, i, known(rank, offset + i));
  return t;
}

struct Row {
  std::string op;
  int64_t bytes = 0, count = 0;
  double seconds = 0;  // per call, max over ranks
  double bus_factor = 1;
  int64_t wrong = 0;   // summed over ranks
};

class Runner {
 public:
  Runner(Comm& comm, const CommtestOptions& o, DType dt, ReduceOp op, Device dev)
      : c_(comm), o_(o), dt_(dt), op_(op), dev_(dev), p_(comm.size()), me_(comm.rank()) {}

  // Elements a row of `name` at `size_bytes` uses (see run()).
  int64_t count_for(const std::string& name, int64_t size_bytes) const {
    int64_t n = std::max<int64_t>(1, size_bytes / static_cast<int64_t>(dtype_size(dt_)));
    if (name == "reduce_scatter" || name == "all_gather") n = std::max<int64_t>(1, n / p_) * p_;
    return name == "barrier" ? 0 : n;
  }

  Row run(const std::string& name, int64_t size_bytes) {
    const int64_t es = static_cast<int64_t>(dtype_size(dt_));
    Row row;
    row.op = name;
    const double pf = p_;
    int64_t n = std::max<int64_t>(1, size_bytes / es);
    if (name == "all_reduce") {
      row.bus_factor = p_ > 1 ? 2 * (pf - 1) / pf : 0;
      Tensor t = dev(Tensor::zeros({n}, dt_));
      row.seconds = timed([&] { c_.all_reduce(t, op_); });
      t = dev(host_known(me_, n, dt_));
      c_.all_reduce(t, op_);
      row.wrong = check(host(t), [&](int64_t i) { return expected(p_, i, dt_, op_); });
    } else if (name == "reduce_scatter") {
      int64_t chunk = std::max<int64_t>(1, n / p_);
      n = chunk * p_;
      row.bus_factor = (pf - 1) / pf;
      Tensor in = dev(Tensor::zeros({n}, dt_)), out = dev(Tensor::zeros({chunk}, dt_));
      row.seconds = timed([&] { c_.reduce_scatter(in, out, op_); });
      in = dev(host_known(me_, n, dt_));
      c_.reduce_scatter(in, out, op_);
      row.wrong = check(host(out), [&](int64_t i) { return expected(p_, me_ * chunk + i, dt_, op_); });
    } else if (name == "all_gather") {
      int64_t chunk = std::max<int64_t>(1, n / p_);
      n = chunk * p_;
      row.bus_factor = (pf - 1) / pf;
      Tensor in = dev(Tensor::zeros({chunk}, dt_)), out = dev(Tensor::zeros({n}, dt_));
      row.seconds = timed([&] { c_.all_gather(in, out); });
      in = dev(host_known(me_, chunk, dt_));
      c_.all_gather(in, out);
      row.wrong = check(host(out), [&](int64_t i) { return known(static_cast<int>(i / chunk), i % chunk); });
    } else if (name == "broadcast") {
      row.bus_factor = p_ > 1 ? 1 : 0;
      Tensor t = dev(Tensor::zeros({n}, dt_));
      row.seconds = timed([&] { c_.broadcast(t, 0); });
      t = dev(me_ == 0 ? host_known(0, n, dt_) : Tensor::zeros({n}, dt_));
      c_.broadcast(t, 0);
      row.wrong = check(host(t), [&](int64_t i) { return known(0, i); });
    } else if (name == "sendrecv") {  // ring shift: send to rank+1, receive from rank-1
      row.bus_factor = 1;
      int next = (me_ + 1) % p_, prev = (me_ + p_ - 1) % p_;
      Tensor s = dev(Tensor::zeros({n}, dt_)), r = dev(Tensor::zeros({n}, dt_));
      auto shift = [&] {
        auto hs = c_.send_async(s, next, 7);
        auto hr = c_.recv_async(r, prev, 7);
        hr->wait();
        hs->wait();
      };
      row.seconds = timed(shift);
      s = dev(host_known(me_, n, dt_));
      shift();
      row.wrong = check(host(r), [&](int64_t i) { return known(prev, i); });
    } else if (name == "barrier") {
      n = 0;
      row.bus_factor = 0;
      row.seconds = timed([&] { c_.barrier(); });
    } else {
      SM_INPUT_ERROR("commtest --ops: unknown operation '" << name
                                                           << "' (all_reduce, reduce_scatter, all_gather, broadcast, sendrecv, barrier)");
    }
    row.count = n;
    row.bytes = n * es;
    // Time: max over ranks; wrong: sum over ranks (through Comm: under its watchdog).
    std::vector<double> t{row.seconds}, w{static_cast<double>(row.wrong)};
    all_reduce_doubles(c_, t, ReduceOp::Max);
    all_reduce_doubles(c_, w, ReduceOp::Sum);  // counts below 2^53: exact
    row.seconds = t[0];
    row.wrong = static_cast<long long>(w[0]);
    return row;
  }

 private:
  template <typename F>
  double timed(F&& fn) {
    for (int i = 0; i < o_.warmup; ++i) fn();
    c_.barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o_.iters; ++i) fn();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s / std::max(1, o_.iters);
  }
  template <typename F>
  int64_t check(const Tensor& h, F&& want) {
    int64_t bad = 0;
    for (int64_t i = 0; i < h.numel(); ++i)
      if (!same(get(h, i), want(i), dt_)) ++bad;
    return bad;
  }
  Tensor dev(const Tensor& t) const { return dev_.is_cpu() ? t : t.to(dev_); }
  Tensor host(const Tensor& t) const { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

  Comm& c_;
  const CommtestOptions& o_;
  DType dt_;
  ReduceOp op_;
  Device dev_;
  int p_, me_;
};

ReduceOp reduce_op_from(const std::string& s) {
  if (s == "sum") return ReduceOp::Sum;
  if (s == "avg") return ReduceOp::Avg;
  if (s == "max") return ReduceOp::Max;
  SM_INPUT_ERROR("commtest --op must be sum, avg or max, got '" << s << "'");
}

void run_commtest(const CommtestOptions& o, const AppEnv& env) {
  // Validate everything before any communication: identical on every rank.
  if (o.min_bytes < 1) SM_INPUT_ERROR("commtest --min-bytes must be >= 1, got " << o.min_bytes);
  if (o.max_bytes < o.min_bytes)
    SM_INPUT_ERROR("commtest --max-bytes (" << o.max_bytes << ") must be >= --min-bytes (" << o.min_bytes << ")");
  if (o.max_bytes > (int64_t{1} << 34)) SM_INPUT_ERROR("commtest --max-bytes is limited to 16 GiB");
  if (o.iters < 1) SM_INPUT_ERROR("commtest --iters must be >= 1, got " << o.iters);
  if (o.warmup < 0) SM_INPUT_ERROR("commtest --warmup must be >= 0, got " << o.warmup);
  const DType dt = dtype_from_name(o.dtype);
  const ReduceOp op = reduce_op_from(o.op);
  if (o.group != "world" && o.group != "dp" && o.group != "tp" && o.group != "pp")
    SM_INPUT_ERROR("commtest --group must be world, dp, tp or pp, got '" << o.group << "'");
  DeviceRequest req = device_request_from_name(o.device);
  if (o.mesh.comm == "nccl" && req == DeviceRequest::Cpu)
    SM_INPUT_ERROR("commtest --comm nccl needs device tensors (not --device cpu)");

  auto mesh = Mesh::create(env.world, o.mesh);  // collective; validates the mesh
  Comm& comm = o.group == "world" ? mesh->world() : o.group == "dp" ? mesh->dp() : o.group == "tp" ? mesh->tp() : mesh->pp();
  if (o.mesh.comm == "nccl" && cuda_device_count() == 0)
    SM_INPUT_ERROR("commtest --comm nccl: no GPU visible (" << cuda_unavailable_reason() << ")");
  Device dev = select_device(req, mesh->local_rank());
  std::string path = dev.is_cpu() ? "host tensors via MPI" : "device tensors via " + comm.device_backend_name();

  if (env.rank == 0) {
    std::printf("# spikemesh commtest: %d ranks on %d node(s); group '%s' (%d ranks), %s; dtype %s, op %s, "
                "iters %d, warmup %d, --comm-timeout %g s\n",
                mesh->world_size(), mesh->node_count(), o.group.c_str(), comm.size(), path.c_str(), dtype_name(dt),
                reduce_op_name(op), o.iters, o.warmup, comm_timeout_seconds());
    std::printf("# size: bytes of the larger buffer; time: per call, max over ranks; busbw = algbw x bus factor\n");
    std::printf("%-15s %12s %11s %11s %12s %12s %7s\n", "# op", "size(B)", "count", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "wrong");
    std::fflush(stdout);
  }
  if (o.hang_rank >= 0 && o.hang_rank == env.rank) {  // testing the watchdog: never join
    std::this_thread::sleep_for(std::chrono::hours(1));
  }
  Runner runner(comm, o, dt, op, dev);
  int64_t total_wrong = 0;
  for (const std::string& name : o.ops) {
    int64_t last_count = -1;
    for (int64_t size = o.min_bytes; size <= o.max_bytes; size *= 2) {
      if (runner.count_for(name, size) == last_count) continue;  // sizes below one element (per rank)
      Row r = runner.run(name, size);
      last_count = r.count;
      total_wrong += r.wrong;
      if (env.rank == 0) {
        double algbw = r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0;
        std::printf("%-15s %12lld %11lld %11.2f %12.3f %12.3f %7lld\n", r.op.c_str(), static_cast<long long>(r.bytes),
                    static_cast<long long>(r.count), r.seconds * 1e6, algbw, algbw * r.bus_factor,
                    static_cast<long long>(r.wrong));
        std::fflush(stdout);
      }
      if (name == "barrier") break;  // one row: latency only
    }
  }
  if (total_wrong > 0)
    SM_INPUT_ERROR("commtest: " << total_wrong << " wrong element(s) over all ranks and operations "
                                << "(see the 'wrong' column): the communication layer or the network is broken");
  if (env.rank == 0) std::printf("# commtest passed: every result correct\n");
}

}  // namespace

void add_commtest_command(CLI::App& app, const AppEnv& env) {
  auto o = std::make_shared<CommtestOptions>();
  CLI::App* cmd = app.add_subcommand(
      "commtest", "self-checking test of every collective: time, algorithm and bus bandwidth, wrong results");
  const std::vector<std::string> mesh_keys = {"mesh-shape", "tp-mesh-dim", "dp-mesh-dim", "comm", "comm-timeout"};
  add_parallel_flags(*cmd, o->keys, o->par, &mesh_keys);  // only the mesh's rows of the one table
  cmd->add_option("--min-bytes", o->min_bytes, "smallest size in bytes")->capture_default_str();
  cmd->add_option("--max-bytes", o->max_bytes, "largest size in bytes (sizes double from --min-bytes)")->capture_default_str();
  cmd->add_option("--iters", o->iters, "timed calls per size")->capture_default_str()
      ->check(range_validator("iters", true));
  cmd->add_option("--warmup", o->warmup, "untimed calls per size before timing")->capture_default_str()
      ->check(range_validator("warmup", true));
  cmd->add_option("--dtype", o->dtype, "element type: f32 f64 bf16 f16 i32 i64 u8")->capture_default_str();
  cmd->add_option("--op", o->op, "reduction of all_reduce/reduce_scatter: sum, avg, max")->capture_default_str();
  cmd->add_option("--group", o->group, "communicator to test: world, dp, tp, pp (of --mesh-shape)")->capture_default_str();
  cmd->add_option("--device", o->device, "tensors on cpu, cuda, or auto (cuda when a GPU is visible)")->capture_default_str();
  cmd->add_option("--ops", o->ops, "operations to run")->capture_default_str();
  cmd->add_option("--hang-rank", o->hang_rank,
                  "testing aid: this world rank never joins, to see --comm-timeout abort the job");
  cmd->footer(
      "Examples:\n"
      "  mpirun -np 2 spikemesh commtest --max-bytes 67108864   # 1 B .. 64 MiB, every collective\n"
      "  mpirun -np 8 spikemesh commtest --max-bytes 256M --comm auto\n"
      "Exit status 1 when any result is wrong on any rank.");
  cmd->callback([o, &env]() {
    o->keys.apply_given_flags();
    validate_parallel_config(o->par);
    o->mesh = mesh_flags(o->par);
    run_commtest(*o, env);
  });
}

}  // namespace sm
