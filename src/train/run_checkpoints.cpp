// run_checkpoints.cpp — checkpoint tensors from a layout's placements, the model's buffers and
// the optimizer's state, and the run's save/resume through io/checkpoint.h
// (train/run_checkpoints.h).
#include "spikemesh/train/run_checkpoints.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <toml++/toml.h>
#include <utility>

#include "spikemesh/core/log.h"
#include "spikemesh/io/hdf5_thread.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/dist_run.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/parallel/placement.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {

namespace {

// Elements [pos, pos + n) of t's flattening (a view).
Tensor flat_run(const Tensor& t, int64_t pos, int64_t n) { return t.view({t.numel()}).slice0(pos, pos + n); }

// A tensor held here whole (box `where`) or not at all.
TensorShard held_or_empty(const std::string& path, const Shape& shape, const Box& where, const Tensor& value,
                          bool holds) {
  TensorShard s;
  s.path = path;
  s.shape = shape;
  s.dtype = value.dtype();
  s.box = holds ? where : empty_box(shape.size());
  if (holds) {
    SM_CHECK(value.defined() && value.numel() == where.numel(),
             "'" << path << "' holds " << (value.defined() ? value.numel() : 0) << " elements for box " << where.str());
    s.data = value;
  }
  return s;
}

struct Piece {
  Box box;
  Param* holder = nullptr;
  int64_t pos = 0;
};
}  // namespace

std::vector<TensorShard> buffer_shards(Model& model, bool holds, int tp_rank, bool saving,
                                       const std::vector<Buffer*>* local) {
  std::vector<TensorShard> out;
  for (Buffer* b : model.buffers()) {
    const bool split = b->shard.sharded();
    const bool on_stage = !local || std::find(local->begin(), local->end(), b) != local->end();
    const bool here = on_stage && holds && (split || !saving || tp_rank == 0);  // whole buffers: tp rank 0 writes
    const std::vector<Box> boxes = buffer_held_boxes(*b);  // a tp channel shard: one box per block
    int64_t pos = 0;                                        // the blocks' rows back to back in the value
    for (const Box& where : boxes) {
      const Tensor part = boxes.size() == 1 ? b->value : flat_run(b->value, pos, where.numel());
      out.push_back(held_or_empty(buffer_dataset_path(b->name), b->shape, where, part, here));
      pos += where.numel();
    }
  }
  return out;
}

CheckpointMeta checkpoint_meta_of(const Model& model, const Optimizer& opt) {
  CheckpointMeta cm;
  cm.model = model.info.name;
  cm.optimizer = opt.config().name;
  cm.optimizer_step = opt.step_count();
  return cm;
}

std::vector<TensorShard> layout_checkpoint_shards(Layout& layout, Optimizer& opt, bool saving) {
  Model& model = layout.model();
  const DType dt = model.dtype();
  // Pieces of each logical parameter held here, in holder order.
  std::map<std::string, std::vector<Piece>> held;
  for (const ParamPlacement& pl : layout.placements(saving))
    for (const PlacedPiece& pc : pl.pieces)
      if (pl.holder && !pc.box.empty()) held[pc.logical->name].push_back(Piece{pc.box, pl.holder, pc.pos});
  // The shards of one logical tensor: one per piece held here, or one empty shard.
  std::vector<TensorShard> out;
  auto emit = [&](const std::string& path, const Param& p, const std::function<Tensor(const Piece&)>& data) {
    auto it = held.find(p.name);
    if (it == held.end()) {
      out.push_back(TensorShard{path, p.shape, dt, empty_box(p.shape.size()), Tensor()});
      return;
    }
    for (const Piece& pc : it->second) out.push_back(TensorShard{path, p.shape, dt, pc.box, data(pc)});
  };
  const std::vector<Param*> logical = model.params();
  for (Param* p : logical)
    emit(param_dataset_path(p->name), *p,
         [](const Piece& pc) { return flat_run(pc.holder->value, pc.pos, pc.box.numel()); });
  const std::vector<Buffer*> stage_buffers = layout.stage().buffers();  // pipelines: this rank's stages only
  for (TensorShard& s : buffer_shards(model, layout.holds_replicated(saving), layout.groups().tp_rank(), saving,
                                      layout.groups().pp_size() > 1 ? &stage_buffers : nullptr))
    out.push_back(std::move(s));
  std::map<std::pair<const Param*, std::string>, Tensor*> state;  // (holder, state name) -> tensor
  std::map<std::string, Param*> holder_by_name;
  for (Param* h : opt.params()) holder_by_name[h->name] = h;
  for (const OptimState& s : opt.state()) {
    auto h = holder_by_name.find(s.param_name);
    SM_CHECK(h != holder_by_name.end(), "optimizer state '" << s.state_name << "' of unknown '" << s.param_name << "'");
    state[{h->second, s.state_name}] = s.value;
  }
  const std::vector<std::string> names = opt.state_names();  // also where this rank holds no piece
  for (Param* p : logical)
    for (const std::string& n : names)
      emit(optim_dataset_path(p->name, n), *p, [&](const Piece& pc) {
        auto it = state.find({pc.holder, n});
        SM_CHECK(it != state.end(), "optimizer has no state '" << n << "' for '" << pc.holder->name << "'");
        SM_CHECK(it->second->numel() == pc.holder->value.numel(),
                 "optimizer state '" << n << "' of '" << pc.holder->name << "' does not match its holder");
        return flat_run(*it->second, pc.pos, pc.box.numel());
      });
  return out;
}

CheckpointManager::CheckpointManager(Layout& layout, Optimizer& opt, std::string dir, std::string config_toml,
                                     std::string precision, int keep)
    : layout_(layout),
      opt_(opt),
      dir_(std::move(dir)),
      config_toml_(std::move(config_toml)),
      precision_(std::move(precision)),
      keep_(keep) {}

CheckpointMeta CheckpointManager::meta() const {
  CheckpointMeta m = checkpoint_meta_of(layout_.model(), opt_);
  m.precision = precision_;
  m.mesh = layout_.describe();
  m.config_toml = config_toml_;
  return m;
}

std::string CheckpointManager::latest() {
  return hdf5_call([&] { return find_latest_checkpoint(layout_.groups().checkpoint_comm(), dir_); }, Hdf5Task::Collective);
}

namespace {
void record_scaler(TrainState& st, const LossScaler& scaler) {
  if (!scaler.enabled()) return;
  st.loss_scale = scaler.scale();
  st.loss_scale_finite_in_row = scaler.finite_in_row();
  st.skipped_steps = scaler.skipped_steps();
}
}  // namespace

std::string CheckpointManager::save(TrainState& st, const LossScaler& scaler) {
  return write(layout_.groups().checkpoint_comm(), snapshot(st, scaler, false));
}

CheckpointSnapshot CheckpointManager::snapshot(TrainState& st, const LossScaler& scaler, bool copies,
                                                std::vector<Tensor>* staging) {
  record_scaler(st, scaler);
  CheckpointSnapshot snap{layout_checkpoint_shards(layout_, opt_, true), meta()};
  snap.meta.state = st;
  if (!copies) return snap;
  const bool reuse = staging && staging->size() == snap.shards.size();
  if (staging && !reuse) staging->assign(snap.shards.size(), Tensor());
  for (size_t i = 0; i < snap.shards.size(); ++i) {
    TensorShard& s = snap.shards[i];
    if (s.box.numel() == 0) continue;
    Tensor* keep = staging ? &(*staging)[i] : nullptr;
    if (keep && keep->defined() && keep->numel() == s.data.numel() && keep->dtype() == s.data.dtype()) {
      keep->copy_from(s.data);  // into the pages of the previous checkpoint's copy: no page faults
      s.data = *keep;
      continue;
    }
    s.data = s.data.device().is_cpu() ? s.data.clone() : s.data.to(Device::cpu());  // complete on return
    if (keep) *keep = s.data;
  }
  return snap;
}

std::string CheckpointManager::write(Comm* group, const CheckpointSnapshot& snap, bool independent_io,
                                     const ConcurrentWindow* window) {
  return write_checkpoint(group, dir_, snap.shards, snap.meta, keep_, independent_io, window);
}

namespace {

// Settings a resume may change without a warning (the checkpoint's and this run's values of
// every other key are compared):
//  * what and how long to run, and where the output goes: resume, max-steps, epochs, output,
//    run-name, log-every, ckpt-every, ckpt-async, keep, eval-batch-size (evaluation only),
//    allow-nonfinite-checkpoint, check-replicas, pp-timeline-steps;
//  * the machine: threads, device (a checkpoint moves between CPU and GPU), comm, comm-timeout;
//  * the mesh and how the model is distributed — checkpoints reshard to any layout, and every
//    layout computes the one-rank trajectory: distributed-mode, mesh-shape, tp-mesh-dim,
//    dp-mesh-dim, optimizer-sharding, bucket-mb, fsdp-*, tp-*, pp-schedule, pp-virtual-stages,
//    pp-layout, pp-delay-wgrad, pp-schedule-file, pp-transport, sync-bn (over the dp group, whose size
//    legitimately changes);
//  * how the global batch is split: batch-size (per rank), grad-accum, global-batch-size,
//    pp-microbatches — compared as the global batch they give instead;
//  * cuda-graphs (replay computes the eager trajectory bit for bit);
//  * memopt-level, memopt-compress-x, memory-budget-mb, pp-memopt-stage-budget-ratio (every level
//    computes the level-0 trajectory);
//  * conv-algos, conv-fp32-precision, matmul-fp32-precision: `train` keeps the run's recorded values
//    and warns itself when a flag changes one (train/gpu_numerics_flags.h).
bool ignored_on_resume(const std::string& key) {
  static const std::set<std::string> kIgnored = {
      "resume", "init", "max-steps", "epochs", "output", "run-name", "log-every", "ckpt-every", "ckpt-async", "keep", "eval-batch-size",
      "allow-nonfinite-checkpoint", "check-replicas", "pp-timeline-steps", "threads", "device", "cuda-graphs", "comm",
      "comm-timeout", "distributed-mode", "mesh-shape", "tp-mesh-dim", "dp-mesh-dim", "optimizer-sharding",
      "bucket-mb", "pp-schedule", "pp-virtual-stages", "pp-layout", "pp-delay-wgrad", "pp-schedule-file", "pp-transport",
      "sync-bn", "batch-size", "grad-accum", "global-batch-size", "pp-microbatches", "memopt-level",
      "memopt-compress-x", "memory-budget-mb", "pp-memopt-stage-budget-ratio", "conv-algos", "conv-fp32-precision",
      "matmul-fp32-precision"};
  return kIgnored.count(key) || key.rfind("fsdp-", 0) == 0 || key.rfind("tp-", 0) == 0;
}

// A TOML value as the user would write it.
std::string value_text(const toml::node& n) {
  if (const auto* s = n.as_string()) return "\"" + s->get() + "\"";
  std::ostringstream os;
  if (const auto* d = n.as_floating_point()) {
    os.precision(15);
    os << d->get();
    return os.str();
  }
  os << toml::default_formatter{n, toml::format_flags::none};
  return os.str();
}

}  // namespace

std::vector<std::string> resume_config_differences(const std::string& ckpt_toml, const std::string& ckpt_mesh,
                                                   const std::string& now_toml, const std::string& now_mesh) {
  std::vector<std::string> out;
  if (ckpt_toml.empty() || now_toml.empty()) return out;
  toml::table was, now;
  try {
    was = toml::parse(ckpt_toml);
    now = toml::parse(now_toml);
  } catch (const toml::parse_error&) {
    return out;
  }
  std::map<std::string, std::string> diffs;  // key order
  for (const auto& [k, v] : now) {
    const std::string key(k.str());
    if (ignored_on_resume(key)) continue;
    const toml::node* old = was.get(key);
    if (!old) continue;  // an older file without this key
    const std::string a = value_text(*old), b = value_text(v);
    if (a != b) diffs[key] = key + ": checkpoint " + a + ", now " + b;
  }
  for (auto& kv : diffs) out.push_back(kv.second);
  const int64_t gb_was = checkpoint_global_batch(ckpt_toml, ckpt_mesh), gb_now = checkpoint_global_batch(now_toml, now_mesh);
  if (gb_was > 0 && gb_now > 0 && gb_was != gb_now)
    out.push_back("global batch: checkpoint " + std::to_string(gb_was) + ", now " + std::to_string(gb_now));
  return out;
}

CheckpointInfo CheckpointManager::load_weights(const std::string& path) {
  std::vector<TensorShard> shards = layout_checkpoint_shards(layout_, opt_, false);
  shards.erase(std::remove_if(shards.begin(), shards.end(),
                              [](const TensorShard& s) { return s.path.rfind("optim/", 0) == 0; }),
               shards.end());
  CheckpointReadOptions lo;
  lo.allow_nonfinite = allow_nonfinite_;
  lo.weights_only = true;
  CheckpointMeta expect = meta();
  expect.optimizer.clear();  // any optimizer's file (its state is not read)
  CheckpointInfo ci = hdf5_call([&] { return read_checkpoint(layout_.groups().checkpoint_comm(), path, shards, expect, lo); },
                                 Hdf5Task::Collective);
  layout_.after_load();
  return ci;
}

CheckpointInfo CheckpointManager::load(const std::string& path, LossScaler& scaler) {
  std::vector<TensorShard> shards = layout_checkpoint_shards(layout_, opt_, false);
  CheckpointReadOptions lo;
  lo.allow_nonfinite = allow_nonfinite_;
  CheckpointInfo ci = hdf5_call([&] { return read_checkpoint(layout_.groups().checkpoint_comm(), path, shards, meta(), lo); },
                                 Hdf5Task::Collective);
  if (layout_.groups().is_root()) {
    const std::vector<std::string> d =
        resume_config_differences(ci.config_toml, ci.mesh, config_toml_, layout_.describe());
    if (!d.empty()) {
      std::ostringstream os;
      for (size_t i = 0; i < d.size(); ++i) os << (i ? "; " : "") << d[i];
      SM_WARN("resuming " << path << " with settings that change the training trajectory (the run will not "
                          << "continue as the original would): " << os.str());
    }
  }
  layout_.after_load();
  opt_.set_step_count(ci.optimizer_step);
  if (!scaler.enabled()) ci.state.loss_scale = 0;  // an fp16 run resumed in another precision drops the scale
  if (scaler.enabled() && ci.state.loss_scale > 0)  // fp16: continue with the saved loss scale
    scaler.set_state(ci.state.loss_scale, ci.state.loss_scale_finite_in_row, ci.state.skipped_steps);
  return ci;
}

}  // namespace sm
