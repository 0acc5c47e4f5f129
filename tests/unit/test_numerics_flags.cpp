// test_numerics_flags.cpp — the GPU numerics choices of train/bench/eval
// (train/gpu_numerics_flags.h), without a GPU: the three flags parse into their struct;
// precedence flag > resumed record > environment > default; canonical names; unknown names are
// Input errors naming the flag, variable or record; a given non-default value on a CPU or fp64
// run is refused naming the flag and why, while environment and record values are ignored there
// (the run uses exact/ieee/ieee); a given value replacing a resumed run's record warns once with
// both values; the record is read from a resolved configuration's TOML.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "error_of.h"
#include "spikemesh/core/error.h"
#include "spikemesh/train/gpu_numerics_flags.h"

namespace sm {
namespace {

GpuNumericsFlags flags(const std::string& algos, const std::string& conv, const std::string& matmul) {
  GpuNumericsFlags f;
  f.conv_algos = algos;
  f.conv_fp32_precision = conv;
  f.matmul_fp32_precision = matmul;
  return f;
}

GpuNumericsTarget gpu_target() {
  GpuNumericsTarget t;
  t.device = "cuda";
  t.visible_gpus = 1;
  return t;
}

GpuNumericsTarget cpu_target(const std::string& device = "cpu", const std::string& precision = "fp32") {
  GpuNumericsTarget t;
  t.device = device;
  t.precision = precision;
  t.visible_gpus = 0;
  t.no_gpu_reason = "no device is visible";
  return t;
}

std::string names(const GpuNumerics& n) {
  const GpuNumericsFlags f = gpu_numerics_names(n);
  return f.conv_algos + "/" + f.conv_fp32_precision + "/" + f.matmul_fp32_precision;
}

// Parses `args` with add_gpu_numerics_flags on a fresh command.
GpuNumericsFlags parse(std::vector<std::string> args) {
  CLI::App app{"test"};
  GpuNumericsFlags f;
  add_gpu_numerics_flags(app, f);
  args.insert(args.begin(), "spikemesh-bench");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return f;
}

}  // namespace

TEST(NumericsFlags, FlagsParseIntoTheirStructAndDefaultToNotGiven) {
  const GpuNumericsFlags none = parse({});
  EXPECT_EQ(none.conv_algos + none.conv_fp32_precision + none.matmul_fp32_precision, "");
  const GpuNumericsFlags f =
      parse({"--conv-algos", "fast-tuned", "--conv-fp32-precision", "tf32", "--matmul-fp32-precision=ieee"});
  EXPECT_EQ(f.conv_algos, "fast-tuned");
  EXPECT_EQ(f.conv_fp32_precision, "tf32");
  EXPECT_EQ(f.matmul_fp32_precision, "ieee");
  EXPECT_EQ(f.at(0) + "/" + f.at(1) + "/" + f.at(2), "fast-tuned/tf32/ieee");  // key order
  EXPECT_STREQ(GpuNumericsFlags::key(1), "conv-fp32-precision");
  EXPECT_STREQ(GpuNumericsFlags::env_var(2), "SPIKEMESH_MATMUL_FP32_PRECISION");
}

TEST(NumericsFlags, HelpNamesEveryValueTheVariableAndPyTorchsSetting) {
  CLI::App app{"test"};
  GpuNumericsFlags f;
  const auto opts = add_gpu_numerics_flags(app, f);
  const std::string algos = opts[0]->get_description(), conv = opts[1]->get_description(),
                    matmul = opts[2]->get_description();
  for (const char* s : {"exact", "deterministic", "fast", "-tuned", "SPIKEMESH_CONV_ALGOS", "cudnn.benchmark"})
    EXPECT_NE(algos.find(s), std::string::npos) << s;
  for (const char* s : {"ieee", "tf32", "SPIKEMESH_CONV_FP32_PRECISION", "torch.backends.cudnn.conv.fp32_precision"})
    EXPECT_NE(conv.find(s), std::string::npos) << s;
  for (const char* s : {"ieee", "tf32", "SPIKEMESH_MATMUL_FP32_PRECISION", "torch.backends.cuda.matmul.fp32_precision"})
    EXPECT_NE(matmul.find(s), std::string::npos) << s;
  EXPECT_NE(conv.find("CPU"), std::string::npos) << conv;
}

TEST(NumericsFlags, FlagBeatsEnvironmentBeatsDefault) {
  const GpuNumericsTarget gpu = gpu_target();
  EXPECT_EQ(names(resolve_gpu_numerics({}, {}, {}, gpu).numerics), "exact/ieee/ieee");
  EXPECT_TRUE(resolve_gpu_numerics({}, {}, {}, gpu).numerics.is_default());
  EXPECT_EQ(names(resolve_gpu_numerics({}, {}, flags("fast", "tf32", ""), gpu).numerics), "fast/tf32/ieee");
  EXPECT_EQ(names(resolve_gpu_numerics(flags("deterministic-tuned", "ieee", "tf32"), {}, flags("fast", "tf32", "ieee"),
                                       gpu)
                      .numerics),
            "deterministic-tuned/ieee/tf32");
  const GpuNumerics n = resolve_gpu_numerics(flags("", "tf32", ""), {}, flags("exact-tuned", "", "tf32"), gpu).numerics;
  EXPECT_EQ(names(n), "exact-tuned/tf32/tf32");
  EXPECT_TRUE(n.conv.tuned);
  EXPECT_TRUE(n.conv.deterministic);
  EXPECT_EQ(n.conv_fp32, Fp32Precision::TF32);
  EXPECT_EQ(n.matmul_fp32, Fp32Precision::TF32);
}

TEST(NumericsFlags, UnknownNamesNameTheirSource) {
  const GpuNumericsTarget gpu = gpu_target();
  std::string m = error_of([&] { resolve_gpu_numerics(flags("fastest", "", ""), {}, {}, gpu); });
  EXPECT_NE(m.find("--conv-algos fastest: unknown convolution policy"), std::string::npos) << m;
  m = error_of([&] { resolve_gpu_numerics(flags("", "TF32", ""), {}, {}, gpu); });
  EXPECT_NE(m.find("--conv-fp32-precision TF32: unknown fp32 precision (valid: ieee, tf32)"), std::string::npos) << m;
  m = error_of([&] { resolve_gpu_numerics({}, {}, flags("", "", "half"), gpu); });
  EXPECT_NE(m.find("SPIKEMESH_MATMUL_FP32_PRECISION=half"), std::string::npos) << m;
  m = error_of([&] { resolve_gpu_numerics({}, flags("", "bf16", ""), {}, gpu, "run/config.toml"); });
  EXPECT_NE(m.find("run/config.toml: conv-fp32-precision=bf16"), std::string::npos) << m;
  // An unknown environment value is an error on the CPU too (main checks the variables at start-up).
  m = error_of([&] { resolve_gpu_numerics({}, {}, flags("slow", "", ""), cpu_target()); });
  EXPECT_NE(m.find("SPIKEMESH_CONV_ALGOS=slow"), std::string::npos) << m;
}

TEST(NumericsFlags, GivenNonDefaultOnTheCpuIsRefusedNamingTheFlagAndWhy) {
  std::string m = error_of([&] { resolve_gpu_numerics(flags("", "tf32", ""), {}, {}, cpu_target()); });
  EXPECT_NE(m.find("--conv-fp32-precision tf32: TF32 exists only on CUDA devices; this run uses the CPU (--device cpu)"),
            std::string::npos)
      << m;
  m = error_of([&] { resolve_gpu_numerics(flags("", "", "tf32"), {}, {}, cpu_target("auto")); });
  EXPECT_NE(m.find("--matmul-fp32-precision tf32: TF32 exists only on CUDA devices; this run uses the CPU (--device "
                   "auto: no usable GPU: no device is visible)"),
            std::string::npos)
      << m;
  m = error_of([&] { resolve_gpu_numerics(flags("fast", "", ""), {}, {}, cpu_target()); });
  EXPECT_NE(m.find("--conv-algos fast: the convolution-algorithm policy"), std::string::npos) << m;
  // fp64 runs on the CPU whatever --device says.
  GpuNumericsTarget fp64 = gpu_target();
  fp64.precision = "fp64";
  EXPECT_TRUE(fp64.uses_cpu());
  m = error_of([&] { resolve_gpu_numerics(flags("", "tf32", ""), {}, {}, fp64); });
  EXPECT_NE(m.find("--conv-fp32-precision tf32: TF32 exists only on CUDA devices; --precision fp64 runs on the CPU"),
            std::string::npos)
      << m;
  try {
    resolve_gpu_numerics(flags("exact-tuned", "", ""), {}, {}, fp64);
    ADD_FAILURE() << "exact-tuned accepted with fp64";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
  }
  // The defaults, given explicitly, are fine anywhere.
  EXPECT_TRUE(resolve_gpu_numerics(flags("exact", "ieee", "ieee"), {}, {}, cpu_target()).numerics.is_default());
  EXPECT_TRUE(resolve_gpu_numerics(flags("exact", "ieee", "ieee"), {}, {}, fp64).numerics.is_default());
}

TEST(NumericsFlags, EnvironmentAndRecordValuesAreIgnoredOnTheCpuWithoutAnError) {
  const GpuNumericsResolution env = resolve_gpu_numerics({}, {}, flags("fast-tuned", "tf32", "tf32"), cpu_target("auto"));
  EXPECT_EQ(names(env.numerics), "exact/ieee/ieee");
  EXPECT_TRUE(env.warnings.empty());
  ASSERT_EQ(env.ignored.size(), 3u);
  EXPECT_NE(env.ignored[1].find("SPIKEMESH_CONV_FP32_PRECISION=tf32 does not apply to a CPU run"), std::string::npos)
      << env.ignored[1];
  const GpuNumericsResolution rec = resolve_gpu_numerics({}, flags("fast", "tf32", "ieee"), {}, cpu_target());
  EXPECT_EQ(names(rec.numerics), "exact/ieee/ieee");
  ASSERT_EQ(rec.ignored.size(), 2u);
  EXPECT_NE(rec.ignored[0].find("the resumed run's conv-algos fast"), std::string::npos) << rec.ignored[0];
  // The same values on a GPU apply.
  EXPECT_EQ(names(resolve_gpu_numerics({}, {}, flags("fast-tuned", "tf32", "tf32"), gpu_target()).numerics),
            "fast-tuned/tf32/tf32");
}

TEST(NumericsFlags, ResumeKeepsTheRecordUnlessAFlagChangesItAndWarnsOnce) {
  const GpuNumericsTarget gpu = gpu_target();
  // Not given: the record wins over the environment (one info note per overridden variable).
  GpuNumericsResolution r = resolve_gpu_numerics({}, flags("deterministic", "ieee", "tf32"), flags("fast", "tf32", ""), gpu);
  EXPECT_EQ(names(r.numerics), "deterministic/ieee/tf32");
  EXPECT_TRUE(r.warnings.empty());
  ASSERT_EQ(r.notes.size(), 2u);
  EXPECT_EQ(r.notes[1],
            "SPIKEMESH_CONV_FP32_PRECISION=tf32 is not applied: the resumed run keeps its recorded ieee "
            "(--conv-fp32-precision changes it)");
  // Given and different: the flag wins, one warning naming both values.
  r = resolve_gpu_numerics(flags("", "tf32", ""), flags("exact", "ieee", "ieee"), {}, gpu);
  EXPECT_EQ(names(r.numerics), "exact/tf32/ieee");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0],
            "--conv-fp32-precision tf32 differs from the run's recorded ieee: the resumed run continues with tf32");
  // Given and equal (names compared canonically): no warning.
  r = resolve_gpu_numerics(flags("exact", "ieee", ""), flags("exact", "ieee", "ieee"), {}, gpu);
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_TRUE(r.notes.empty());
  // An older run without the keys: the environment, as for a fresh run.
  r = resolve_gpu_numerics({}, {}, flags("fast", "", ""), gpu);
  EXPECT_EQ(names(r.numerics), "fast/ieee/ieee");
}

TEST(NumericsFlags, RecordIsReadFromAResolvedConfiguration) {
  const GpuNumericsFlags f = recorded_gpu_numerics(
      "model = 'x'\nconv-algos = 'fast-tuned'\nconv-fp32-precision = 'tf32'\nbatch-size = 4\n", "run/config.toml");
  EXPECT_EQ(f.conv_algos, "fast-tuned");
  EXPECT_EQ(f.conv_fp32_precision, "tf32");
  EXPECT_EQ(f.matmul_fp32_precision, "");  // an older file without the key
  EXPECT_EQ(recorded_gpu_numerics("", "x").conv_algos, "");
  const std::string m = error_of([] { recorded_gpu_numerics("conv-algos = [", "run/config.toml"); });
  EXPECT_NE(m.find("run/config.toml"), std::string::npos) << m;
}

TEST(NumericsFlags, TargetUsesTheCpuForCpuFp64AndAutoWithoutAGpu) {
  EXPECT_TRUE(cpu_target("cpu").uses_cpu());
  EXPECT_TRUE(cpu_target("auto").uses_cpu());
  GpuNumericsTarget t = cpu_target("cuda");  // no GPU: setup_run's "--device cuda: no usable GPU" speaks
  EXPECT_FALSE(t.uses_cpu());
  EXPECT_FALSE(gpu_target().uses_cpu());
  t = gpu_target();
  t.device = "auto";
  EXPECT_FALSE(t.uses_cpu());
  t.device = "cpu";
  EXPECT_TRUE(t.uses_cpu());
}

TEST(NumericsFlags, ApplySetsTheProcessNumerics) {
  const GpuNumerics before = gpu_numerics();
  apply_gpu_numerics(resolve_gpu_numerics(flags("fast", "tf32", "tf32"), {}, {}, gpu_target()), false);
  EXPECT_EQ(names(gpu_numerics()), "fast/tf32/tf32");
  set_gpu_numerics(before);
  EXPECT_EQ(names(gpu_numerics()), names(before));
}

}  // namespace sm
