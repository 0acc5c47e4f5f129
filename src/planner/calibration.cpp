// calibration.cpp — measuring the machine for the cost model (calibration.h): its fingerprint,
// each collective's alpha and beta per group size (every group of that size running at once),
// the optimizer's time and scratch per element, the oversubscription of a CPU's cores, the
// memory one rank may use. Every function is collective over `world` and gives every rank the
// same numbers (the maximum over the ranks; the smallest capacity). The model's dry runs:
// model_profile.cpp; the cache file: calibration_file.cpp.
#include "spikemesh/planner/calibration.h"

#include <mpi.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/allocator.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/layers/param.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {

namespace {
constexpr double kMiB = 1048576.0;

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  return "unknown CPU";
}

// Ranks sharing this node's memory (collective over `world`).
int ranks_per_node(Comm* world) {
  if (!world) return 1;
  MPI_Comm node;
  MPI_Comm_split_type(world->mpi_comm(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int n = 1;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}

double max_over(Comm* world, double v) {
  if (!world) return v;
  std::vector<double> x{v};
  all_reduce_doubles(*world, x, ReduceOp::Max);
  return x[0];
}

// Least squares t = a + b·mb over the points, both clamped at >= 0.
LinkCost fit(const std::vector<double>& mb, const std::vector<double>& ms) {
  const double n = static_cast<double>(mb.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < mb.size(); ++i) sx += mb[i], sy += ms[i], sxx += mb[i] * mb[i], sxy += mb[i] * ms[i];
  const double den = n * sxx - sx * sx;
  double b = den > 0 ? (n * sxy - sx * sy) / den : 0.0;
  b = std::max(0.0, b);
  const double a = std::max(0.0, (sy - b * sx) / n);
  return LinkCost{a, b};
}

// One collective of `bytes` payload on `g`, timed over `iters` calls after one warm-up, the
// maximum over the world (collective over `world`).
// `scratch` receives the allocator's peak during the calls above what was live, per payload byte
// (the maximum over the world).
double time_collective(Comm* world, Comm& g, CollectiveKind k, int64_t bytes, Device dev, int iters, double& scratch) {
  const int p = g.size();
  const int64_t n = std::max<int64_t>(p, bytes / 4 / p * p);
  Tensor big = Tensor::zeros({n}, DType::F32, dev), small = Tensor::zeros({n / p}, DType::F32, dev);
  auto once = [&] {
    switch (k) {
      case CollectiveKind::AllReduce: g.all_reduce(big); break;
      case CollectiveKind::ReduceScatter: g.reduce_scatter(big, small); break;
      case CollectiveKind::AllGather: g.all_gather(small, big); break;
      case CollectiveKind::SendRecv: {
        const int peer = g.rank() ^ 1;
        if (peer >= p) break;
        if (g.rank() % 2 == 0) g.send(big, peer), g.recv(big, peer);
        else g.recv(big, peer), g.send(big, peer);
        break;
      }
    }
  };
  Allocator& mem = allocator_for(dev);
  const size_t live = mem.current_bytes(), peak_before = mem.peak_bytes();
  mem.reset_peak();
  once();
  synchronize(dev);
  scratch = max_over(world, static_cast<double>(mem.peak_bytes() - live) / static_cast<double>(big.nbytes()));
  mem.raise_peak(peak_before);
  if (world) world->barrier();
  Timer t;
  for (int i = 0; i < iters; ++i) once();
  synchronize(dev);
  double ms = t.ms() / iters;
  if (k == CollectiveKind::SendRecv) ms /= 2;  // a round trip: two messages
  return max_over(world, ms);
}

// The optimizer (Adam, the default) per element on this rank's threads, and its scratch per
// parameter byte, the maximum over the world (collective over `world`).
void measure_optimizer(Comm* world, MachineCosts& m) {
  const int64_t n = int64_t{1} << 20;
  Param p;
  p.name = p.local_name = "calibration";
  p.shape = p.local_shape = {n};
  p.value = Tensor::zeros({n}, DType::F32, Device::cpu());
  p.grad = Tensor::zeros({n}, DType::F32, Device::cpu());
  OptimizerConfig cfg;
  cfg.name = "adam";
  auto opt = make_optimizer(cfg, {&p});
  Allocator& mem = allocator_for(Device::cpu());
  const size_t peak_before = mem.peak_bytes();
  mem.reset_peak();
  opt->step();  // its state is allocated here: measured from the second step
  const size_t with_state = mem.current_bytes();
  mem.reset_peak();
  opt->step();
  m.optimizer_scratch =
      max_over(world, static_cast<double>(mem.peak_bytes() - with_state) / static_cast<double>(p.value.nbytes()));
  mem.raise_peak(peak_before);
  Timer t;
  for (int i = 0; i < 4; ++i) opt->step();
  m.optimizer_ns_per_element = max_over(world, t.ms() / 4 * 1e6 / static_cast<double>(n));
}

// The memory one rank may use: the node's physical memory over its ranks (CPU), the device's
// memory (GPU). This rank's value; measure_machine takes the smallest over the world.
double rank_memory_mb(Comm* world, Device dev) {
  if (!dev.is_cuda()) {
    const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
    return phys / kMiB / std::max(1, ranks_per_node(world));
  }
  return static_cast<double>(device_memory_bytes(dev)) / kMiB;
}
}  // namespace

std::string machine_fingerprint(Comm* world, Device dev) {
  std::ostringstream os;
  os << "cpu=" << cpu_model() << "; cores=" << omp_get_num_procs() << "; threads=" << omp_get_max_threads()
     << "; device=" << (dev.is_cuda() ? dev.str() : "cpu");
  if (dev.is_cuda()) os << " (" << cuda_device_count() << " visible)";
  const int world_size = world ? world->size() : 1, per_node = ranks_per_node(world);
  os << "; world=" << world_size << "; ranks_per_node=" << per_node;
  std::string s = os.str();
  return world ? broadcast_string(*world, s, 0) : s;
}

MachineCosts measure_machine(Comm* world, Device dev) {
  MachineCosts m;
  const int W = world ? world->size() : 1;
  const int rank = world ? world->rank() : 0;
  const int64_t payloads[] = {int64_t{16} << 10, int64_t{512} << 10, int64_t{4} << 20};
  for (int p = 2; p <= W; ++p) {
    if (W % p != 0) continue;
    MPI_Comm sub;
    MPI_Comm_split(world->mpi_comm(), rank / p, rank, &sub);
    {
      Comm g(sub, "calibrate-" + std::to_string(p));
      for (int k = 0; k < kCollectiveKinds; ++k) {
        std::vector<double> mb, ms;
        double scratch = 0;
        for (int64_t b : payloads) {
          mb.push_back(static_cast<double>(b) / kMiB);
          ms.push_back(time_collective(world, g, static_cast<CollectiveKind>(k), b, dev, 5, scratch));
        }
        m.links[{k, p}] = fit(mb, ms);
        m.links[{k, p}].scratch_per_mb = scratch;  // at the largest payload
      }
    }
    MPI_Comm_free(&sub);
  }
  measure_optimizer(world, m);
  m.oversubscription = dev.is_cuda() ? 1.0
                                     : static_cast<double>(ranks_per_node(world)) * omp_get_max_threads() /
                                           std::max(1, omp_get_num_procs());
  m.oversubscription = max_over(world, m.oversubscription);
  m.capacity_mb = rank_memory_mb(world, dev);
  m.capacity_mb = -max_over(world, -m.capacity_mb);  // the smallest over the ranks
  return m;
}

}  // namespace sm
