// comm_types.cpp — names of comm enums, the process-wide watchdog setting, and the
// counter arithmetic (payload and nccl-tests-style bus bytes).
#include <atomic>
#include <cmath>

#include "spikemesh/comm/comm.h"
#include "spikemesh/core/enum_names.h"
#include "spikemesh/core/error.h"

namespace sm {
namespace {
std::atomic<double> g_comm_timeout_s{600.0};
const EnumName<CommBackend> kCommBackendNames[] = {
    {"auto", CommBackend::Auto}, {"mpi", CommBackend::Mpi}, {"nccl", CommBackend::Nccl}};
}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

const char* comm_backend_name(CommBackend b) { return enum_name(kCommBackendNames, b); }

CommBackend comm_backend_from_name(const std::string& name) {
  if (auto b = enum_from_name(kCommBackendNames, name)) return *b;
  SM_INPUT_ERROR("--comm must be auto, mpi or nccl, got '" << name << "'");
}

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::AllReduce: return "all_reduce";
    case CommOp::ReduceScatter: return "reduce_scatter";
    case CommOp::AllGather: return "all_gather";
    case CommOp::Broadcast: return "broadcast";
    case CommOp::Send: return "send";
    case CommOp::Recv: return "recv";
    case CommOp::Barrier: return "barrier";
  }
  return "?";
}

void set_comm_timeout_seconds(double seconds) {
  if (!(seconds >= 0.0) || !std::isfinite(seconds))
    SM_INPUT_ERROR("--comm-timeout must be a number of seconds >= 0 (0 = off), got " << seconds);
  g_comm_timeout_s.store(seconds);
}

double comm_timeout_seconds() { return g_comm_timeout_s.load(); }

uint64_t comm_bus_bytes(CommOp op, uint64_t payload, int p) {
  switch (op) {
    case CommOp::AllReduce: return p > 1 ? 2 * (static_cast<uint64_t>(p) - 1) * payload / p : 0;
    case CommOp::ReduceScatter:
    case CommOp::AllGather: return p > 1 ? (static_cast<uint64_t>(p) - 1) * payload / p : 0;
    case CommOp::Broadcast: return p > 1 ? payload : 0;
    case CommOp::Send:
    case CommOp::Recv: return payload;
    case CommOp::Barrier: return 0;
  }
  return 0;
}

namespace {
// One field of the counters summed over every operation kind, in kind order.
template <typename T>
T total_of(const CommCounters& c, T CommOpCounter::*field) {
  T s = 0;
  for (const auto& op : c.ops) s += op.*field;
  return s;
}
}  // namespace

uint64_t CommCounters::total_calls() const { return total_of(*this, &CommOpCounter::calls); }
uint64_t CommCounters::total_payload_bytes() const { return total_of(*this, &CommOpCounter::payload_bytes); }
uint64_t CommCounters::total_bus_bytes() const { return total_of(*this, &CommOpCounter::bus_bytes); }
double CommCounters::total_wait_seconds() const { return total_of(*this, &CommOpCounter::wait_seconds); }
CommCounters& CommCounters::operator+=(const CommCounters& o) {
  for (int i = 0; i < kCommOpCount; ++i) {
    ops[i].calls += o.ops[i].calls;
    ops[i].payload_bytes += o.ops[i].payload_bytes;
    ops[i].bus_bytes += o.ops[i].bus_bytes;
    ops[i].wait_seconds += o.ops[i].wait_seconds;
  }
  return *this;
}

}  // namespace sm
