// nir_export.h — a model as a NIR graph (the Neuromorphic Intermediate Representation's HDF5
// file, as the `nir` package reads it: /version, /node {type "NIRGraph", nodes/<name>/...,
// edges [E, 2]}), for neuromorphic hardware and the frameworks that read NIR.
// The mapping (docs/checkpoints.md, "NIR"), SpikingJelly's own (its nir_exchange, dt = 1e-4 s):
//   conv2d (+ the batch norm after it, folded with the running statistics) -> Conv2d (bias 0
//   when none); linear (+ batch norm) -> Affine, or Linear without bias and batch norm;
//   avgpool2d -> AvgPool2d; flatten -> Flatten; dropout -> nothing (evaluation);
//   IF  -> IF  {r = 1/dt, v_threshold, v_reset};
//   LIF -> LIF {tau = tau·dt, r = 1 (decay_input) or tau, v_leak = v_reset, v_threshold, v_reset};
//   PLIF -> LIF with its learnt tau = 1 / sigmoid(w).
// Neuron parameters are float64 arrays of the neuron's per-sample shape; weights keep the
// model's dtype. A graph is one chain Input -> nodes in model order -> Output.
// Inexpressible (an Input error naming the first such layer and what to change): max pooling,
// spiking self-attention, residual/graph blocks, 1-D convolutions, batch norm not directly after
// a convolution or linear layer, a soft reset (NIR neurons reset to v_reset), the mean layer.
// Local (no MPI); the model must be finalised on the CPU and hold its trained values.
#pragma once
#include <cstdint>
#include <string>

namespace sm {

class Model;

struct NirExportInfo {
  int64_t nodes = 0;         // NIR nodes written, Input and Output included
  int64_t folded_bn = 0;     // batch norms folded into the preceding weight layer
  int64_t dropped = 0;       // dropout layers left out
};

// Writes `model` as a NIR graph to `out` (as out.tmp, then renamed). `dt` > 0 is the time step
// in seconds the neuron parameters are expressed in; `source` is recorded in the graph's metadata.
NirExportInfo write_nir_graph(Model& model, const std::string& out, double dt, const std::string& source);

}  // namespace sm
