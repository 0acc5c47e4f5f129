// augment_spec.cpp — parsing and printing `--augment` (data/augment_spec.h): one table of the
// steps, their default probability and magnitude and the magnitude's range.
#include "spikemesh/data/augment_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "spikemesh/core/error.h"

namespace sm {

namespace {

struct OpInfo {
  AugmentOp op;
  const char* name;
  double default_m, min_m, max_m;  // the magnitude's default and closed range
  bool integer_m;                  // the magnitude is a whole number
  bool has_m;                      // flips take no magnitude
  const char* meaning;
};

const OpInfo kOps[] = {
    {AugmentOp::HFlip, "hflip", 0, 0, 0, false, false, "mirror left-right"},
    {AugmentOp::VFlip, "vflip", 0, 0, 0, false, false, "mirror top-bottom"},
    {AugmentOp::Translate, "translate", 5, 1, 4096, true, true,
     "shift by (dy, dx), each uniform in [-M, M] pixels, zero fill"},
    {AugmentOp::Roll, "roll", 5, 1, 4096, true, true, "roll (wrap around) by (dy, dx), each uniform in [-M, M] pixels"},
    {AugmentOp::Rotate, "rotate", 15, 0, 180, false, true,
     "rotate about the centre by an angle uniform in [-M, M] degrees, nearest pixel, zero fill"},
    {AugmentOp::Cutout, "cutout", 16, 1, 4096, true, true,
     "zero an M x M square centred on a uniform pixel (clipped at the border), every time step"},
    {AugmentOp::TimeShift, "timeshift", 2, 1, 4096, true, true,
     "shift along time by s uniform in [-M, M] steps, zero fill (event and spike data)"},
    {AugmentOp::Jitter, "jitter", 1, 1, 4096, true, true,
     "channel jitter: shift along the last axis (SHD's 700 channels) by s uniform in [-M, M], zero fill"},
    {AugmentOp::DropEvent, "dropevent", 0.1, 0, 1, false, true,
     "drop each event of the count frames with probability M (u8/u16 event files, not resized)"},
    {AugmentOp::Mixup, "mixup", 0.8, 1e-3, 1e3, false, true,
     "mix with a random training sample: x = lam x + (1-lam) x', lam ~ Beta(M, M), soft targets"},
    {AugmentOp::Cutmix, "cutmix", 1.0, 1e-3, 1e3, false, true,
     "paste a box of a random training sample, area (1-lam), lam ~ Beta(M, M), soft targets by area"},
};

const OpInfo& info_of(AugmentOp op) {
  for (const OpInfo& i : kOps)
    if (i.op == op) return i;
  SM_CHECK(false, "augment: unknown op " << static_cast<int>(op));
}

std::string valid_names() {
  std::string s;
  for (const OpInfo& i : kOps) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}

double parse_number(const std::string& field, const std::string& step, const char* what) {
  char* end = nullptr;
  const double v = std::strtod(field.c_str(), &end);
  if (field.empty() || end != field.c_str() + field.size() || !std::isfinite(v))
    SM_INPUT_ERROR("--augment: step '" << step << "': " << what << " '" << field << "' is not a number");
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream is(s);
  while (std::getline(is, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

AugmentStep parse_step(const std::string& text) {
  const std::vector<std::string> f = split(text, ':');
  const OpInfo* info = nullptr;
  for (const OpInfo& i : kOps)
    if (f[0] == i.name) info = &i;
  if (!info) SM_INPUT_ERROR("--augment: unknown step '" << f[0] << "' (valid: " << valid_names() << ")");
  if (f.size() > (info->has_m ? 3u : 2u))
    SM_INPUT_ERROR("--augment: step '" << text << "': expected " << info->name << (info->has_m ? "[:P[:M]]" : "[:P]"));
  AugmentStep s;
  s.op = info->op;
  s.magnitude = info->default_m;
  if (f.size() >= 2) s.p = parse_number(f[1], text, "the probability");
  if (!(s.p >= 0 && s.p <= 1))
    SM_INPUT_ERROR("--augment: step '" << text << "': the probability " << s.p << " is not in [0, 1]");
  if (f.size() == 3) s.magnitude = parse_number(f[2], text, "the magnitude");
  if (!(s.magnitude >= info->min_m && s.magnitude <= info->max_m) ||
      (info->integer_m && s.magnitude != std::floor(s.magnitude)))
    SM_INPUT_ERROR("--augment: step '" << text << "': the magnitude " << s.magnitude << " must be "
                                       << (info->integer_m ? "a whole number " : "") << "in [" << info->min_m << ", "
                                       << info->max_m << "]");
  return s;
}

}  // namespace

const char* augment_op_name(AugmentOp op) { return info_of(op).name; }

bool is_mixing(AugmentOp op) { return op == AugmentOp::Mixup || op == AugmentOp::Cutmix; }

bool AugmentSpec::mixes() const {
  return std::any_of(steps.begin(), steps.end(), [](const AugmentStep& s) { return is_mixing(s.op); });
}

bool AugmentSpec::has(AugmentOp op) const {
  return std::any_of(steps.begin(), steps.end(), [op](const AugmentStep& s) { return s.op == op; });
}

namespace {
// The shortest of 15..17 significant digits that reads back as `v`.
std::string exact_text(double v) {
  for (int digits = 15;; ++digits) {
    std::ostringstream os;
    os.precision(digits);
    os << v;
    if (digits == 17 || std::strtod(os.str().c_str(), nullptr) == v) return os.str();
  }
}
}  // namespace

std::string AugmentSpec::canonical_text() const {
  std::string out;
  for (size_t i = 0; i < steps.size(); ++i) {
    const OpInfo& info = info_of(steps[i].op);
    out += (i ? "," : "") + std::string(info.name) + ":" + exact_text(steps[i].p);
    if (info.has_m) out += ":" + exact_text(steps[i].magnitude);
  }
  return out;
}

AugmentSpec parse_augment_spec(const std::string& text_in) {
  AugmentSpec spec;
  const std::string text = trimmed(text_in);
  if (text.empty() || text == "none") return spec;
  bool mixing_seen = false;
  for (const std::string& raw : split(text, ',')) {
    const std::string step = trimmed(raw);
    if (step.empty()) SM_INPUT_ERROR("--augment '" << text << "': an empty step (two commas, or one at an end)");
    AugmentStep s = parse_step(step);
    if (mixing_seen && !is_mixing(s.op))
      SM_INPUT_ERROR("--augment '" << text << "': " << step
                                   << " comes after a mixing step; list mixup/cutmix last (they combine two samples "
                                      "after every other step)");
    mixing_seen = mixing_seen || is_mixing(s.op);
    spec.steps.push_back(s);
  }
  return spec;
}

std::string augment_ops_help() {
  std::ostringstream os;
  for (const OpInfo& i : kOps) {
    os << "  " << i.name;
    for (size_t k = std::string(i.name).size(); k < 10; ++k) os << ' ';
    if (i.has_m)
      os << "M = " << i.default_m << " (" << i.min_m << ".." << i.max_m << "): ";
    else
      os << "no M: ";
    os << i.meaning << "\n";
  }
  return os.str();
}

}  // namespace sm
