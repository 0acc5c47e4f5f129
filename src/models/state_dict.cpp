// state_dict.cpp — save/load a model's parameters and buffers as /params and /buffers
// datasets in full logical shape (format in state_dict.h).
#include "spikemesh/models/state_dict.h"

#include <map>
#include <set>
#include <sstream>

#include "spikemesh/core/log.h"

namespace sm {

namespace {

struct Entry {
  std::string group;  // "params" | "buffers"
  std::string name;
  Shape shape;
  Tensor* value;
};

std::vector<Entry> entries_of(Model& m) {
  std::vector<Entry> out;
  for (Param* p : m.params()) {
    SM_CHECK(!p->shard.sharded() && p->local_shape == p->shape,
             "state dict of sharded parameter '" << p->name << "': gather it first (checkpoint writer)");
    out.push_back({"params", p->name, p->shape, &p->value});
  }
  for (Buffer* b : m.buffers()) out.push_back({"buffers", b->name, b->shape, &b->value});
  return out;
}

}  // namespace

void save_state_dict(const H5Group& group, Model& model) {
  SM_CHECK(model.finalized(), "saving the state dict of model '" << model.info.name << "' before finalize()");
  H5Group params = group.require_group("params");
  H5Group buffers = group.require_group("buffers");
  for (const Entry& e : entries_of(model)) {
    SM_CHECK(e.value->defined() && e.value->shape() == e.shape,
             "entry '" << e.name << "' holds " << shape_str(e.value->shape()) << ", declared " << shape_str(e.shape));
    (e.group == "params" ? params : buffers).write(e.name, *e.value);
  }
  group.set_attr("model", model.info.name);
  group.set_attr("format", std::string("spikemesh-state-dict"));
  group.set_attr("format_version", static_cast<int64_t>(kStateDictFormatVersion));
  group.set_attr("dtype", std::string(dtype_name(model.dtype())));
}

void save_state_dict(const std::string& path, Model& model) {
  H5File f = H5File::create(path);
  save_state_dict(f.root(), model);
  f.flush();
}

void load_state_dict(const H5Group& group, Model& model, bool strict) {
  SM_CHECK(model.finalized(), "loading a state dict into model '" << model.info.name << "' before finalize()");
  const std::string where = group.describe();
  if (group.has_attr("format_version")) {
    int64_t v = group.attr_int("format_version");
    if (v > kStateDictFormatVersion)
      SM_INPUT_ERROR(where << ": state-dict format version " << v << " is newer than this spikemesh ("
                           << kStateDictFormatVersion << ")");
  }
  if (group.has_attr("model")) {
    std::string saved = group.attr_string("model");
    if (saved != model.info.name)
      SM_WARN(where << ": state dict was saved from model '" << saved << "', loading into '" << model.info.name
                    << "' (names and shapes match)");
  }
  std::vector<Entry> entries = entries_of(model);
  // 1. Check every name and shape before touching the model.
  std::map<std::string, std::set<std::string>> expected;
  for (const Entry& e : entries) {
    expected[e.group].insert(e.name);
    std::string path = e.group + "/" + e.name;
    if (!group.has_dataset(path))
      SM_INPUT_ERROR(group.describe(path) << ": missing (model '" << model.info.name << "' has " << e.group
                                          << " entry '" << e.name << "' of shape " << shape_str(e.shape) << ")");
    Shape s = group.dataset_shape(path);
    if (s != e.shape)
      SM_INPUT_ERROR(group.describe(path) << ": shape " << shape_str(s) << " in the file, but model '"
                                          << model.info.name << "' expects " << shape_str(e.shape) << " for '"
                                          << e.name << "'");
  }
  if (strict) {
    for (const char* g : {"params", "buffers"}) {
      if (!group.has_group(g)) continue;
      std::vector<std::string> extra;
      for (const std::string& n : group.open_group(g).list_datasets())
        if (!expected[g].count(n)) extra.push_back(n);
      if (!extra.empty()) {
        std::ostringstream os;
        for (size_t i = 0; i < extra.size() && i < 5; ++i) os << (i ? ", " : "") << extra[i];
        if (extra.size() > 5) os << ", ... (" << extra.size() << " in all)";
        SM_INPUT_ERROR(group.describe(g) << ": entries that model '" << model.info.name << "' does not have: "
                                         << os.str());
      }
    }
  }
  // 2. Fill values (converting the file's element type to the model's).
  for (const Entry& e : entries) {
    std::string path = e.group + "/" + e.name;
    group.read_into(path, *e.value);  // device tensors are staged through the host
  }
}

void load_state_dict(const std::string& path, Model& model, bool strict) {
  H5File f = H5File::open(path);
  load_state_dict(f.root(), model, strict);
}

}  // namespace sm
