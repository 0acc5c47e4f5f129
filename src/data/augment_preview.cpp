// augment_preview.cpp — `spikemesh data augment` (data/augment_preview.h): reads training
// samples [first, first + count), augments them as training would in `epoch`, and writes the
// rows before and after with every drawn parameter.
#include "spikemesh/data/augment_preview.h"

#include <cstdio>
#include <filesystem>
#include <numeric>

#include "spikemesh/core/error.h"
#include "spikemesh/data/augment.h"
#include "spikemesh/data/event_frames_reader.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/io/h5file.h"

namespace sm {

namespace {

// f64 [n, steps, 7]: per step, fired (0/1) and the parameters drawn.
Tensor ops_table(const AugmentRecord& rec, int64_t n, int64_t steps) {
  Tensor t = Tensor::zeros({n, steps, 7}, DType::F64);
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(rec.size()); ++i)
    for (const AppliedAugment& a : rec[static_cast<size_t>(i)]) {
      double* row = t.data<double>() + (i * steps + a.step) * 7;
      row[0] = 1;
      for (int k = 0; k < 6; ++k) row[1 + k] = a.v[k];
    }
  return t;
}

}  // namespace

void write_augment_preview(const AugmentPreviewOptions& o) {
  const AugmentSpec spec = parse_augment_spec(o.augment);
  if (spec.empty()) SM_INPUT_ERROR("--augment: no step given (e.g. --augment hflip,roll:0.5:5)");
  if (std::filesystem::exists(o.out) && !o.overwrite)
    SM_INPUT_ERROR("--out " << o.out << " exists (--overwrite replaces it)");
  const FramesOption frames = parse_frames_option(o.frames);
  const H5Dataset ds = H5Dataset::open(o.data, nullptr, false, frames.on ? &frames : nullptr);
  const int64_t train = ds.size(Split::Train);
  if (o.first < 0 || o.count < 1 || o.first + o.count > train)
    SM_INPUT_ERROR("--first " << o.first << " --count " << o.count << ": " << o.data << " has " << train
                              << " training samples");
  const Augmenter aug(spec, ds.info(), static_cast<uint64_t>(o.seed));
  std::vector<int64_t> idx(static_cast<size_t>(o.count));
  std::iota(idx.begin(), idx.end(), o.first);
  Tensor raw, y;
  ds.read(Split::Train, idx, raw, y);
  const Tensor original = raw.clone();
  AugmentTrace trace;
  const Tensor target = augment_batch(aug, ds, Split::Train, raw, idx, y, o.epoch, &trace);
  Tensor partner = Tensor::empty({o.count}, DType::I64), index = Tensor::empty({o.count}, DType::I64);
  for (size_t i = 0; i < idx.size(); ++i) {
    partner.data<int64_t>()[i] = trace.partner[i];
    index.data<int64_t>()[i] = idx[i];
  }

  const std::string tmp = o.out + ".tmp";
  try {
    H5File f = H5File::create(tmp);
    f.write("index", index);
    f.write("y", y);
    f.write("x_original", original);
    f.write("x", raw);
    f.write("partner", partner);
    f.write("partner_x_original", trace.partner_raw.defined() ? trace.partner_raw : Tensor::zeros(raw.shape(), DType::F32));
    if (target.defined()) f.write("target", target);
    const int64_t steps = static_cast<int64_t>(spec.steps.size());
    f.write("ops", ops_table(trace.record, o.count, steps));
    f.write("partner_ops", ops_table(trace.partner_record, o.count, steps));
    f.set_attr("augment", spec.canonical_text());
    f.set_attr("seed", o.seed);
    f.set_attr("epoch", o.epoch);
    f.set_attr("data", o.data);
    f.set_attr("layout", ds.info().layout);
    f.set_attr("frames", ds.info().frames);
    f.close();
    std::filesystem::rename(tmp, o.out);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  std::printf("%s: %lld training samples of %s augmented as in epoch %lld (%s)\n", o.out.c_str(),
              static_cast<long long>(o.count), o.data.c_str(), static_cast<long long>(o.epoch),
              spec.canonical_text().c_str());
}

}  // namespace sm
