// import_fashion_mnist.cpp — IDX (gz) -> HDF5 dataset (u8 images, x_scale 1/255).
#include <cstring>
#include <fstream>

#include "spikemesh/core/log.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/data/idx_reader.h"
#include "spikemesh/data/importers.h"

namespace sm {

namespace {
std::string find_file(const std::string& dir, const std::string& stem) {
  for (const char* ext : {".gz", ""}) {
    std::string p = dir + "/" + stem + ext;
    if (std::ifstream(p).good()) return p;
  }
  SM_INPUT_ERROR(dir << ": no " << stem << "(.gz) — is this a Fashion-MNIST directory? (Debian: "
                     << "apt-get install dataset-fashion-mnist, files in /usr/share/datasets/fashion-mnist)");
}

void load_split(const std::string& dir, const std::string& prefix, Tensor& x, Tensor& y) {
  std::string ip = find_file(dir, prefix + "-images-idx3-ubyte"), lp = find_file(dir, prefix + "-labels-idx1-ubyte");
  IdxArray img = read_idx_u8(ip), lab = read_idx_u8(lp);
  if (img.dims.size() != 3) SM_INPUT_ERROR(ip << ": expected 3-d images, got " << img.dims.size() << " dims");
  if (lab.dims.size() != 1 || lab.dims[0] != img.dims[0])
    SM_INPUT_ERROR(lp << ": " << (lab.dims.empty() ? 0 : lab.dims[0]) << " labels for " << img.dims[0] << " images");
  x = Tensor::empty({img.dims[0], 1, img.dims[1], img.dims[2]}, DType::U8);
  std::memcpy(x.raw(), img.data.data(), img.data.size());
  y = Tensor::empty({img.dims[0]}, DType::I64);
  for (int64_t i = 0; i < img.dims[0]; ++i) {
    if (lab.data[i] > 9) SM_INPUT_ERROR(lp << ": label " << int(lab.data[i]) << " at " << i << " is not in 0..9");
    y.data<int64_t>()[i] = lab.data[i];
  }
}
}  // namespace

int64_t import_fashion_mnist(const std::string& src_dir, const std::string& out) {
  Tensor xtr, ytr, xte, yte;
  load_split(src_dir, "train", xtr, ytr);
  load_split(src_dir, "t10k", xte, yte);
  DatasetInfo info;
  info.num_classes = 10;
  info.T = 0;
  info.layout = "NCHW";
  info.encoding = "image";
  info.source = "Fashion-MNIST (" + src_dir + ")";
  info.x_scale = 1.0 / 255.0;
  info.sample_shape = {1, xtr.dim(2), xtr.dim(3)};
  info.stored = DType::U8;
  info.train_size = xtr.dim(0);
  info.test_size = xte.dim(0);
  H5DatasetWriter w(out, info);
  w.write(Split::Train, 0, xtr, ytr);
  w.write(Split::Test, 0, xte, yte);
  w.commit();
  SM_INFO("wrote " << out << ": " << info.train_size << " train + " << info.test_size << " test images 1x28x28");
  return info.train_size + info.test_size;
}

}  // namespace sm
