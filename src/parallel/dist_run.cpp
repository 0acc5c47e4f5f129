// dist_run.cpp — model-buffer broadcast (collective over the given comm) and the global batch
// of a checkpoint's configuration (local).
#include "spikemesh/parallel/dist_run.h"

#include <cstring>
#include <toml++/toml.h>

#include "spikemesh/core/error.h"
#include "spikemesh/models/model.h"

namespace sm {

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

}  // namespace sm
