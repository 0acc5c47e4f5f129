// resize_ref.h — naive double-precision reference of the anti-aliased bilinear resize
// (torch.nn.functional.interpolate(mode="bilinear", align_corners=False, antialias=True)):
// every output pixel is the normalised triangle-weighted sum over ALL input pixels of the
// separable kernel tri((j + 0.5 - center) / scale), center = scale * (i + 0.5), scale = in/out
// (no support window, no float arithmetic), for checking data/frame_integration.cpp.
#pragma once
#include <vector>

namespace sm::ref {

// in: `planes` planes of [h, w]; returns planes of [out_h, out_w].
std::vector<double> resize_bilinear_aa(const std::vector<double>& in, int planes, int h, int w, int out_h, int out_w);

}  // namespace sm::ref
