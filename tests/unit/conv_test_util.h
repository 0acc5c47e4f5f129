// conv_test_util.h — the kernels' geometry of a reference convolution shape (tests only),
// shared by test_conv.cpp and test_spike_conv.cpp.
#pragma once
#include "../ref/conv_ref.h"
#include "spikemesh/kernels/cpu/conv.h"

namespace sm::test {

inline cpu::Conv2dGeometry geometry_of(const ref::ConvRefShape& s) {
  cpu::Conv2dGeometry g;
  g.batch = s.n;
  g.in_channels = s.cin;
  g.height = s.h;
  g.width = s.w;
  g.out_channels = s.cout;
  g.kernel = s.k;
  g.stride = s.stride;
  g.padding = s.pad;
  return g;
}

}  // namespace sm::test
