// event_datasets.cpp — listing the four datasets' folders (std::filesystem) and Gesture's
// label files into EventDatasetLayout, in SpikingJelly's sample order.
#include "spikemesh/data/event_datasets.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"

namespace sm {

namespace fs = std::filesystem;

namespace {
const std::vector<std::string> kCifarClasses = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                "dog",      "frog",       "horse", "ship", "truck"};
// N-Caltech101's folder of background images (no object class): left out unless asked for.
const char* const kCaltechBackground = "BACKGROUND_Google";
const std::vector<std::string> kGestureNames = {
    "hand_clapping",     "right_hand_wave",          "left_hand_wave", "right_arm_clockwise",
    "right_arm_counter_clockwise", "left_arm_clockwise", "left_arm_counter_clockwise",
    "arm_roll",          "air_drums",                "air_guitar",     "other_gestures"};

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

std::vector<std::string> sorted_entries(const fs::path& dir, bool dirs) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (dirs ? it->is_directory(e2) : it->is_regular_file(e2)) out.push_back(it->path().filename().string());
  }
  if (ec) SM_INPUT_ERROR(dir.string() << ": cannot list the folder: " << ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

std::string joined(const std::vector<std::string>& v, size_t limit = 12) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < limit; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > limit) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s.empty() ? "nothing" : s;
}

std::string lower_ext(const std::string& name) {
  std::string e = fs::path(name).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e;
}

// The event files of one class folder, in SpikingJelly's order: names compared as the frame
// files SpikingJelly writes, <stem>`suffix` (".npz"; "_" with a fixed duration, whose files are
// <stem>_<frames>.npz); files of other extensions are counted in `ignored`.
std::vector<std::string> class_files(const fs::path& dir, const std::vector<std::string>& exts, const std::string& suffix,
                                     int64_t& ignored) {
  std::vector<std::pair<std::string, std::string>> keyed;  // (stem + suffix, name)
  for (const std::string& f : sorted_entries(dir, false)) {
    const std::string e = lower_ext(f);
    if (std::find(exts.begin(), exts.end(), e) == exts.end()) {
      ++ignored;
      continue;
    }
    keyed.emplace_back(fs::path(f).stem().string() + suffix, f);
  }
  std::sort(keyed.begin(), keyed.end());
  for (size_t i = 1; i < keyed.size(); ++i)
    if (keyed[i].first == keyed[i - 1].first)
      SM_INPUT_ERROR((dir / keyed[i].second).string() << " and " << keyed[i - 1].second
                                                      << " are the same sample in two formats; keep one");
  std::vector<std::string> out;
  for (auto& k : keyed) out.push_back(k.second);
  return out;
}

EventFileFormat format_of(const std::string& name) {
  const std::string e = lower_ext(name);
  if (e == ".npz") return EventFileFormat::Npz;
  if (e == ".bin") return EventFileFormat::AtisBin;
  return EventFileFormat::Aedat2Cifar10Dvs;  // .aedat: 2.0 or 3.1, sniffed when read
}

// A user may point at the folder that holds the data or at SpikingJelly's root above it.
fs::path descend(const fs::path& dir, const std::vector<std::string>& subdirs,
                 const std::function<bool(const fs::path&)>& looks_right) {
  if (looks_right(dir)) return dir;
  for (const std::string& s : subdirs)
    if (is_dir(dir / s) && looks_right(dir / s)) return dir / s;
  return dir;
}

void note_ignored(int64_t ignored, const std::string& where, const std::string& exts) {
  if (ignored) SM_WARN(where << ": ignored " << ignored << " file(s) that are not " << exts);
}
}  // namespace

std::string EventDatasetLayout::describe() const {
  std::ostringstream os;
  os << dataset << " " << sensor_h << "x" << sensor_w << " ratio " << train_ratio << " classes";
  for (auto& c : class_names) os << " " << c;
  os << "\n";
  for (size_t i = 0; i < files.size(); ++i) os << files[i] << " " << static_cast<int>(formats[i]) << "\n";
  for (auto& s : samples)
    os << s.file << " " << s.t_begin << " " << s.t_end << " " << s.label << " " << split_name(s.split) << " " << s.name
       << "\n";
  return os.str();
}

namespace {
void check_train_ratio(double train_ratio) {
  if (!(train_ratio > 0 && train_ratio < 1))
    SM_INPUT_ERROR("--train-ratio " << train_ratio << ": must be in (0, 1)");
}

// The samples of the class folders `folders` of `dir` (label = position), split per class in
// SpikingJelly's order: the first ceil(n * train_ratio) files of each class train, the rest test
// (split_to_train_test_set without random_split); train rows first, each split class by class.
// An empty class folder is an Input error (torchvision's DatasetFolder refuses one too).
void add_per_class_split(EventDatasetLayout& L, const fs::path& dir, const std::vector<std::string>& folders,
                         const std::vector<std::string>& exts, const std::string& suffix, double train_ratio) {
  std::string ext_list;
  for (size_t i = 0; i < exts.size(); ++i) ext_list += (i ? " or " : "") + exts[i];
  int64_t ignored = 0;
  std::vector<EventSampleRef> test;
  for (size_t c = 0; c < folders.size(); ++c) {
    const std::vector<std::string> files = class_files(dir / folders[c], exts, suffix, ignored);
    if (files.empty()) SM_INPUT_ERROR((dir / folders[c]).string() << ": empty class: no " << ext_list << " files");
    const int64_t n = static_cast<int64_t>(files.size());
    const int64_t pos = static_cast<int64_t>(std::ceil(static_cast<double>(n) * train_ratio));
    for (int64_t i = 0; i < n; ++i) {
      EventSampleRef s;
      s.file = static_cast<int32_t>(L.files.size());
      s.label = static_cast<int32_t>(c);
      s.split = i < pos ? Split::Train : Split::Test;
      s.name = fs::path(files[i]).stem().string();
      L.files.push_back(folders[c] + "/" + files[i]);
      L.formats.push_back(format_of(files[i]));
      (i < pos ? L.samples : test).push_back(s);
    }
  }
  note_ignored(ignored, dir.string(), ext_list);
  L.train_size = static_cast<int64_t>(L.samples.size());
  L.test_size = static_cast<int64_t>(test.size());
  L.samples.insert(L.samples.end(), test.begin(), test.end());
}
}  // namespace

EventDatasetLayout list_cifar10dvs(const std::string& dir_in, double train_ratio, bool duration_names) {
  check_train_ratio(train_ratio);
  if (!is_dir(dir_in)) SM_INPUT_ERROR("--from " << dir_in << ": not a folder");
  auto has_classes = [](const fs::path& d) { return is_dir(d / "airplane") || is_dir(d / "truck"); };
  const fs::path dir = descend(dir_in, {"events_np", "extract"}, has_classes);
  EventDatasetLayout L;
  L.dataset = "cifar10-dvs";
  L.root = dir.string();
  L.sensor_h = L.sensor_w = 128;
  L.class_names = kCifarClasses;
  L.train_ratio = train_ratio;
  const std::vector<std::string> found = sorted_entries(dir, true);
  std::vector<std::string> missing;
  for (auto& c : kCifarClasses)
    if (std::find(found.begin(), found.end(), c) == found.end()) missing.push_back(c);
  if (!missing.empty())
    SM_INPUT_ERROR("--from " << dir_in << ": expected CIFAR10-DVS's 10 class folders (" << joined(kCifarClasses)
                             << ") of .aedat files (or SpikingJelly's events_np/*.npz); missing " << joined(missing)
                             << "; found " << joined(found));
  add_per_class_split(L, dir, kCifarClasses, {".aedat", ".npz"}, duration_names ? "_" : ".npz", train_ratio);
  return L;
}

EventDatasetLayout list_ncaltech101(const std::string& dir_in, double train_ratio, bool include_background,
                                    bool duration_names) {
  check_train_ratio(train_ratio);
  if (!is_dir(dir_in)) SM_INPUT_ERROR("--from " << dir_in << ": not a folder");
  // The class folders hold the .bin files (SpikingJelly's events_np: .npz) directly; the folder
  // above (the unzipped archive, or SpikingJelly's root) holds Caltech101/ or events_np/.
  auto holds_classes = [](const fs::path& d) {
    std::error_code ec;
    for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code e2;
      if (!it->is_directory(e2)) continue;
      for (fs::directory_iterator f(it->path(), e2), fend; !e2 && f != fend; f.increment(e2)) {
        const std::string e = lower_ext(f->path().filename().string());
        if (e == ".bin" || e == ".npz") return true;
      }
    }
    return false;
  };
  const fs::path dir = descend(dir_in, {"Caltech101", "events_np", "extract/Caltech101"}, holds_classes);
  if (!holds_classes(dir))
    SM_INPUT_ERROR("--from " << dir_in << ": expected N-Caltech101's Caltech101 folder (the unzipped Caltech101.zip: "
                             << "101 class folders and BACKGROUND_Google, of .bin files), the folder above it, or "
                             << "SpikingJelly's events_np/ of .npz; found the folders " << joined(sorted_entries(dir, true)));
  EventDatasetLayout L;
  L.dataset = "n-caltech101";
  L.root = dir.string();
  L.sensor_h = 180;  // SpikingJelly's NCaltech101.get_H_W()
  L.sensor_w = 240;
  L.train_ratio = train_ratio;
  for (const std::string& c : sorted_entries(dir, true))
    if (include_background || c != kCaltechBackground) L.class_names.push_back(c);
  if (L.class_names.size() < 2)
    SM_INPUT_ERROR("--from " << dir_in << ": N-Caltech101 needs at least 2 class folders, found "
                             << joined(L.class_names) << " in " << dir.string()
                             << (include_background ? "" : " (BACKGROUND_Google left out; --include-background keeps it)"));
  add_per_class_split(L, dir, L.class_names, {".bin", ".npz"}, duration_names ? "_" : ".npz", train_ratio);
  return L;
}

EventDatasetLayout list_nmnist(const std::string& dir_in, bool duration_names) {
  const std::string suffix = duration_names ? "_" : ".npz";
  if (!is_dir(dir_in)) SM_INPUT_ERROR("--from " << dir_in << ": not a folder");
  auto split_dir = [](const fs::path& d, const char* a, const char* b) { return is_dir(d / a) ? d / a : d / b; };
  auto looks = [&](const fs::path& d) { return is_dir(split_dir(d, "Train", "train")) && is_dir(split_dir(d, "Test", "test")); };
  const fs::path dir = descend(dir_in, {"extract", "events_np"}, looks);
  if (!looks(dir))
    SM_INPUT_ERROR("--from " << dir_in << ": expected N-MNIST's Train/ and Test/ folders (each with class folders 0..9 "
                             << "of .bin files); found " << joined(sorted_entries(dir, true)));
  EventDatasetLayout L;
  L.dataset = "n-mnist";
  L.root = dir.string();
  L.sensor_h = L.sensor_w = 34;
  for (int c = 0; c < 10; ++c) L.class_names.push_back(std::to_string(c));
  int64_t ignored = 0;
  for (Split sp : {Split::Train, Split::Test}) {
    const fs::path sd = sp == Split::Train ? split_dir(dir, "Train", "train") : split_dir(dir, "Test", "test");
    const std::vector<std::string> found = sorted_entries(sd, true);
    if (found != L.class_names)
      SM_INPUT_ERROR(sd.string() << ": expected the class folders 0..9, found " << joined(found));
    for (int c = 0; c < 10; ++c) {
      const std::vector<std::string> files = class_files(sd / found[c], {".bin", ".npz"}, suffix, ignored);
      if (files.empty()) SM_INPUT_ERROR((sd / found[c]).string() << ": empty class: no .bin files");
      for (const std::string& f : files) {
        EventSampleRef s;
        s.file = static_cast<int32_t>(L.files.size());
        s.label = c;
        s.split = sp;
        s.name = fs::path(f).stem().string();
        L.files.push_back(sd.filename().string() + "/" + found[c] + "/" + f);
        L.formats.push_back(format_of(f));
        L.samples.push_back(s);
      }
    }
    (sp == Split::Train ? L.train_size : L.test_size) =
        static_cast<int64_t>(L.samples.size()) - (sp == Split::Train ? 0 : L.train_size);
  }
  note_ignored(ignored, dir.string(), ".bin or .npz");
  return L;
}

namespace {
struct CsvRow {
  int label;
  int64_t start, end;
};

std::vector<CsvRow> read_labels_csv(const fs::path& path) {
  std::ifstream f(path);
  if (!f) SM_INPUT_ERROR(path.string() << ": cannot open the label file");
  std::vector<CsvRow> rows;
  std::string line;
  std::getline(f, line);  // header: class,startTime_usec,endTime_usec
  for (int ln = 2; std::getline(f, line); ++ln) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream is(line);
    long long c, a, b;
    if (!(is >> c >> a >> b) || a < 0 || b < 0 || a > 0xFFFFFFFFLL || b > 0xFFFFFFFFLL)
      SM_INPUT_ERROR(path.string() << ":" << ln << ": expected 'class,startTime_usec,endTime_usec' (unsigned 32-bit), got '"
                                   << line << "'");
    if (c < 1 || c > 11) SM_INPUT_ERROR(path.string() << ":" << ln << ": class " << c << " is not in 1..11");
    rows.push_back({static_cast<int>(c - 1), a, b});
  }
  if (rows.empty()) SM_INPUT_ERROR(path.string() << ": no labelled interval");
  return rows;
}
}  // namespace

EventDatasetLayout list_dvs128_gesture(const std::string& dir_in, bool duration_names) {
  const std::string suffix = duration_names ? "_" : ".npz";
  if (!is_dir(dir_in)) SM_INPUT_ERROR("--from " << dir_in << ": not a folder");
  auto looks = [](const fs::path& d) { return fs::exists(d / "trials_to_train.txt"); };
  const fs::path dir = descend(dir_in, {"DvsGesture", "extract/DvsGesture"}, looks);
  for (const char* need : {"trials_to_train.txt", "trials_to_test.txt"})
    if (!fs::exists(dir / need))
      SM_INPUT_ERROR("--from " << dir_in << ": expected DVS128 Gesture's DvsGesture folder (user*_*.aedat, "
                               << "user*_*_labels.csv, trials_to_train.txt, trials_to_test.txt); " << need
                               << " is missing; found " << joined(sorted_entries(dir, false)));
  EventDatasetLayout L;
  L.dataset = "dvs128-gesture";
  L.root = dir.string();
  L.sensor_h = L.sensor_w = 128;
  // Folder "k" (csv class k+1) sorted as strings: target = position in ["0","1","10","2",...].
  std::vector<std::string> folders;
  for (int k = 0; k < 11; ++k) folders.push_back(std::to_string(k));
  std::sort(folders.begin(), folders.end());
  std::vector<int> target_of(11);
  for (int i = 0; i < 11; ++i) {
    const int k = std::stoi(folders[i]);
    target_of[k] = i;
    L.class_names.push_back(kGestureNames[k]);
  }
  for (Split sp : {Split::Train, Split::Test}) {
    const fs::path list = dir / (sp == Split::Train ? "trials_to_train.txt" : "trials_to_test.txt");
    std::ifstream f(list);
    if (!f) SM_INPUT_ERROR(list.string() << ": cannot open");
    std::vector<std::pair<std::string, EventSampleRef>> keyed;  // (folder/name.npz, sample)
    std::string line;
    for (int ln = 1; std::getline(f, line); ++ln) {
      const size_t b = line.find_first_not_of(" \t\r\n"), e = line.find_last_not_of(" \t\r\n");
      if (b == std::string::npos) continue;
      const std::string name = line.substr(b, e - b + 1);
      if (!fs::is_regular_file(dir / name))
        SM_INPUT_ERROR(list.string() << ":" << ln << " names " << name << ", which is not in " << dir.string());
      const std::string stem = fs::path(name).stem().string();
      const fs::path csv = dir / (stem + "_labels.csv");
      if (!fs::exists(csv))
        SM_INPUT_ERROR(list.string() << ":" << ln << ": the recording " << name << " has no label file "
                                     << csv.filename().string());
      const int32_t file = static_cast<int32_t>(L.files.size());
      L.files.push_back(name);
      L.formats.push_back(EventFileFormat::Aedat31);
      int repeats[11] = {};
      for (const CsvRow& r : read_labels_csv(csv)) {
        EventSampleRef s;
        s.file = file;
        s.t_begin = r.start;
        s.t_end = r.end;
        s.label = target_of[r.label];
        s.split = sp;
        s.name = stem + "_" + std::to_string(repeats[r.label]++);
        keyed.emplace_back(std::to_string(r.label) + "/" + s.name + suffix, s);
      }
    }
    if (keyed.empty()) SM_INPUT_ERROR(list.string() << ": names no recording");
    std::vector<int> per_label(11, 0);
    for (auto& k : keyed) per_label[static_cast<size_t>(k.second.label)]++;
    for (int t = 0; t < 11; ++t)  // torchvision's DatasetFolder refuses a class folder without samples too
      if (per_label[static_cast<size_t>(t)] == 0)
        SM_INPUT_ERROR(list.string() << ": empty class: its recordings' label files give no sample of class "
                                     << L.class_names[static_cast<size_t>(t)]);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
      if (a.second.label != b.second.label) return a.second.label < b.second.label;
      return a.first < b.first;
    });
    for (auto& k : keyed) L.samples.push_back(k.second);
    (sp == Split::Train ? L.train_size : L.test_size) = static_cast<int64_t>(keyed.size());
  }
  return L;
}

EventDatasetLayout list_event_dataset(const std::string& dataset, const std::string& dir, double train_ratio,
                                      bool duration_names, bool include_background) {
  if (dataset == "cifar10-dvs") return list_cifar10dvs(dir, train_ratio, duration_names);
  if (dataset == "n-caltech101") return list_ncaltech101(dir, train_ratio, include_background, duration_names);
  if (dataset == "dvs128-gesture") return list_dvs128_gesture(dir, duration_names);
  if (dataset == "n-mnist") return list_nmnist(dir, duration_names);
  SM_INPUT_ERROR("unknown event dataset " << dataset << " (cifar10-dvs, dvs128-gesture, n-mnist, n-caltech101)");
}

}  // namespace sm
