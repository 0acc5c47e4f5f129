// test_fused_epilogue_policy.cpp — when a batch norm and the layer after it run fused
// (layers/fused_epilogue.h fused_epilogue_applies): the CPU's rules unchanged, and on a GPU
// batch norm → neuron only, in f32 / bf16 / f16, not over a spike input, not while the layer
// profile times layers on the host; SPIKEMESH_FUSE, memopt passes and sharding turn it off on both.
#include <gtest/gtest.h>

#include "spikemesh/layers/fused_epilogue.h"

namespace sm {
namespace {

FuseQuery neuron_after_bn(bool gpu, DType dt) {
  FuseQuery q;
  q.on_gpu = gpu;
  q.next_is_neuron = true;
  q.dtype = dt;
  q.ndim = 5;
  return q;
}

TEST(FusedEpiloguePolicy, CpuRulesAsBefore) {
  EXPECT_TRUE(fused_epilogue_applies(neuron_after_bn(false, DType::F32)));
  EXPECT_TRUE(fused_epilogue_applies(neuron_after_bn(false, DType::F64)));
  EXPECT_FALSE(fused_epilogue_applies(neuron_after_bn(false, DType::BF16)));
  FuseQuery pool = neuron_after_bn(false, DType::F32);
  pool.next_is_neuron = false;
  pool.next_is_max_pool = true;
  EXPECT_TRUE(fused_epilogue_applies(pool));
  pool.ndim = 4;
  EXPECT_FALSE(fused_epilogue_applies(pool)) << "pooling fuses over [T, N, C, H, W] only";
  FuseQuery spikes = neuron_after_bn(false, DType::F32);
  spikes.input_is_spikes = true;
  spikes.profiling = true;
  EXPECT_TRUE(fused_epilogue_applies(spikes)) << "the CPU fuses a spike input and profiles the pair as one row";
}

TEST(FusedEpiloguePolicy, GpuFusesBatchNormIntoTheNeuronOnly) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) EXPECT_TRUE(fused_epilogue_applies(neuron_after_bn(true, dt)));
  EXPECT_FALSE(fused_epilogue_applies(neuron_after_bn(true, DType::F64)));
  FuseQuery pool = neuron_after_bn(true, DType::F32);
  pool.next_is_neuron = false;
  pool.next_is_max_pool = true;
  EXPECT_FALSE(fused_epilogue_applies(pool)) << "no fused max pooling on the GPU";
  FuseQuery spikes = neuron_after_bn(true, DType::F32);
  spikes.input_is_spikes = true;
  EXPECT_FALSE(fused_epilogue_applies(spikes)) << "the neuron would keep a spike input as bits";
  FuseQuery prof = neuron_after_bn(true, DType::F32);
  prof.profiling = true;
  EXPECT_FALSE(fused_epilogue_applies(prof));
}

TEST(FusedEpiloguePolicy, SwitchMemoptAndShardingTurnItOffEverywhere) {
  for (bool gpu : {false, true}) {
    FuseQuery off = neuron_after_bn(gpu, DType::F32);
    off.enabled = false;
    EXPECT_FALSE(fused_epilogue_applies(off));
    FuseQuery memopt = neuron_after_bn(gpu, DType::F32);
    memopt.fusable = false;  // a memopt time chunk's backward recompute
    EXPECT_FALSE(fused_epilogue_applies(memopt));
    FuseQuery sharded = neuron_after_bn(gpu, DType::F32);
    sharded.unsharded = false;
    EXPECT_FALSE(fused_epilogue_applies(sharded));
  }
}

TEST(FusedEpiloguePolicy, EveryMemoptForwardButATimeChunksBackwardRecomputeFuses) {
  Ctx ctx;
  EXPECT_TRUE(fusable_forward(ctx));
  int bn = 0;
  for (int flag = 0; flag < 6; ++flag) {
    Ctx c;
    if (flag == 0) c.checkpointed = true;
    if (flag == 1) c.recompute = true;
    if (flag == 2) c.bn_split = true;
    if (flag == 3) c.accumulate_stats = true;
    if (flag == 4) c.bn_moments_for = &bn;
    if (flag == 5) c.bn_grad_sums_for = &bn;
    EXPECT_TRUE(fusable_forward(c)) << "memopt flag " << flag;
  }
  ctx.time_grad_carry = true;
  EXPECT_FALSE(fusable_forward(ctx)) << "a time chunk's backward recompute carries the membrane gradient unfused";
}

}  // namespace
}  // namespace sm
