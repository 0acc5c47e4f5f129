# spikemesh — build, test, run, deps, bench, format.
#   make deps   install missing Debian packages (as root) or list what is missing
#   make        build build/bin/spikemesh (CUDA auto-detected; CPU-only build otherwise)
#   make test   check module includes, build every test binary once, then run test-unit, fuzz-replay,
#               test-mpi, test-parity, test-e2e in that order — CI runs this (tests/README.md)
#   make test-unit [FILTER='Conv*']   unit tests (GoogleTest; the GPU ones skip without a GPU)
#   make test-mpi [FILTER='Comm*']    MPI tests at np 2, 4 (and the 3-D mesh at np 8)
#   make test-parity   layers and models against PyTorch
#   make test-e2e [E2E="pp_train eval"] [E2E_JOBS=2]   command-line scripts, E2E_JOBS at a time
#   make test-cluster   (root) multi-node tests on a virtual 3-node Slurm cluster
#   make fuzz   libFuzzer harnesses (clang, ASan+UBSan, build-fuzz/), FUZZ_SECONDS each; make fuzz-replay: the corpus
#   make check-includes   the module dependency check alone (scripts/check_includes.sh)
#   make sanitize [SAN_FILTER=...]   unit tests + 2-rank dp/tp/pp MPI tests under ASan+UBSan+LSan (build-asan/, CPU-only)
#   make run    (Foundation II) import Fashion-MNIST, train the default config
#   make bench-deps   .venv-bench/: a current torch + SpikingJelly from PyPI (for make bench)
#   make recipes-check    the event-data recipes (input/configs/) for a few steps on synthetic stand-ins
#   make datasets-check   the event- and spike-dataset importers against SpikingJelly's own code (needs bench-deps)
#   make interop-check    state dicts and NIR graphs round-tripped through SpikingJelly, safetensors, nir (needs bench-deps)
#   make soak [SOAK_STEPS=30000]   a long training run whose memory, descriptors and threads must stay flat
#   make chaos [N=10] [SEED=s]     random kills of ranks and a node on the virtual cluster, resumed to the end (root)
#   make bench  spikemesh vs SpikingJelly / PyTorch (eager, compiled): output/bench/report.md + .png
#   make gpu-bundle   .device/: the GPU machine's bundle (build-gpu/, sm_90) and SpikingJelly wheels
#   make gpu-rehearsal   (root) the GPU procedure on a bare Debian root without a GPU: run before every GPU run
# Variables: CUDA=0 forces a CPU-only build; CUDA_ARCH="80 90"; MARCH=x86-64-v3; OPT=-O3.
# Builds go through ccache when installed, keyed relative to the checkout (CCACHE_BASEDIR), so a
# fresh clone in any folder hits the cache; CCACHE_DISABLE=1 compiles everything (a cold build).
SHELL := /bin/bash
.DEFAULT_GOAL := all

BUILD   ?= build
MARCH   ?= x86-64-v3
OPT     ?= -O3
# A compiler cache when one is installed (make deps installs Debian's ccache): keyed on paths
# relative to the checkout (CCACHE_BASEDIR), so a fresh clone in another folder hits it.
CCACHE  := $(shell command -v ccache 2>/dev/null)
CXX     := $(if $(CCACHE),$(CCACHE) )mpicxx
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
PY      := /usr/bin/python3

HDF5_DIR := /usr/lib/x86_64-linux-gnu/hdf5/openmpi
HDF5_INC := /usr/include/hdf5/openmpi

CPPFLAGS := -Iinclude -I$(HDF5_INC) -MMD -MP -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX
CXXFLAGS := -std=c++17 $(OPT) -march=$(MARCH) -fopenmp -g1 -Wall -Wextra -Wno-unused-parameter
LDLIBS   := -L$(HDF5_DIR)/lib -Wl,-rpath,$(HDF5_DIR)/lib -lhdf5 -ldnnl -lzip -lz -fopenmp -lpthread

# ---- CUDA auto-detection -------------------------------------------------------------
CUDA_HOME ?= /usr/local/cuda
NVCC      := $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= 80 90
ifeq ($(CUDA),0)
  HAVE_CUDA :=
else
  HAVE_CUDA := $(and $(wildcard $(NVCC)),$(wildcard $(CUDA_HOME)/include/cuda_runtime.h))
endif
HAVE_CUDNN  := $(and $(HAVE_CUDA),$(wildcard $(CUDA_HOME)/include/cudnn.h))
HAVE_CUBLAS := $(and $(HAVE_CUDA),$(wildcard $(CUDA_HOME)/include/cublas_v2.h))
HAVE_NCCL   := $(and $(HAVE_CUDA),$(wildcard $(CUDA_HOME)/include/nccl.h))

SRC_CPP := $(shell find src -name '*.cpp' | sort)
SRC_CU  := $(if $(HAVE_CUDA),$(shell find src -name '*.cu' | sort))
ifneq ($(HAVE_CUDA),)
  CPPFLAGS += -DSPIKEMESH_HAVE_CUDA -I$(CUDA_HOME)/include
  NVFLAGS  := -std=c++17 $(OPT) -Iinclude -I$(HDF5_INC) $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
              -Xcompiler -fopenmp,-march=$(MARCH) -DSPIKEMESH_HAVE_CUDA -MMD -MP \
              -I/usr/lib/x86_64-linux-gnu/openmpi/include
  # cudart is always NEEDED (device probing); the math libraries are linked --as-needed so
  # they are loaded only once code calls them: cuBLASLt alone costs ~210 MB of RSS at start-up.
  CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -Wl,--no-as-needed -lcudart -Wl,--as-needed
  ifneq ($(HAVE_CUBLAS),)
    CPPFLAGS += -DSPIKEMESH_HAVE_CUBLAS
    NVFLAGS  += -DSPIKEMESH_HAVE_CUBLAS
    CUDA_LIBS += -ldl   # cuBLAS is dlopen'ed on first use (src/kernels/cuda/cublas_lazy.cpp)
  endif
  ifneq ($(HAVE_CUDNN),)
    CPPFLAGS += -DSPIKEMESH_HAVE_CUDNN
    NVFLAGS  += -DSPIKEMESH_HAVE_CUDNN
    CUDA_LIBS += -lcudnn
  endif
  ifneq ($(HAVE_NCCL),)
    CPPFLAGS += -DSPIKEMESH_HAVE_NCCL
    NVFLAGS  += -DSPIKEMESH_HAVE_NCCL
    CUDA_LIBS += -lnccl
  endif
  LDLIBS += $(CUDA_LIBS) -Wl,--as-needed
endif

APP_MAIN := src/app/main.cpp
LIB_OBJ  := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(filter-out $(APP_MAIN),$(SRC_CPP))) \
            $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(SRC_CU))
LIB      := $(BUILD)/lib/libspikemesh.a
BIN      := $(BUILD)/bin/spikemesh

TEST_UNIT_SRC := $(sort $(wildcard tests/unit/*.cpp tests/ref/*.cpp))
TEST_UNIT_OBJ := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(TEST_UNIT_SRC))
TEST_BIN      := $(BUILD)/bin/spikemesh_tests
GTEST_LIBS    := -lgtest_main -lgtest -lpthread

.PHONY: all deps test test-cluster test-unit test-mpi test-parity test-e2e summary clean format run bench bench-deps datasets-check recipes-check interop-check soak chaos check-includes sanitize
all: summary $(BIN)

summary:
	@echo "spikemesh build configuration:"
	@printf '  %s %-8s %s\n' "$(if $(shell command -v mpicxx),✓,✗)" MPI "$(shell command -v mpicxx || echo 'missing: apt-get install libopenmpi-dev')"
	@printf '  %s %-8s %s\n' "$(if $(wildcard $(HDF5_INC)/hdf5.h),✓,✗)" HDF5 "$(if $(wildcard $(HDF5_INC)/hdf5.h),parallel (openmpi),missing: libhdf5-openmpi-dev)"
	@printf '  %s %-8s %s\n' "$(if $(wildcard /usr/include/dnnl.hpp),✓,✗)" oneDNN "$(if $(wildcard /usr/include/dnnl.hpp),CPU kernels,missing: libdnnl-dev)"
	@printf '  %s %-8s %s\n' "$(if $(HAVE_CUDA),✓,✗)" CUDA "$(if $(HAVE_CUDA),$(CUDA_HOME) (sm $(CUDA_ARCH)),not found — CPU-only build)"
	@printf '  %s %-8s\n' "$(if $(HAVE_CUDNN),✓,✗)" cuDNN
	@printf '  %s %-8s\n' "$(if $(HAVE_CUBLAS),✓,✗)" cuBLAS
	@printf '  %s %-8s\n' "$(if $(HAVE_NCCL),✓,✗)" NCCL

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

# numpy rounds every operation on spike times: no fused multiply-adds there (data/spike_trains.h)
$(BUILD)/obj/src/data/spike_trains.o: CXXFLAGS += -ffp-contract=off
# the augmentation's rotation and mixing are compared with numpy's arithmetic (data/augment.h)
$(BUILD)/obj/src/data/augment.o: CXXFLAGS += -ffp-contract=off
# Adam's square root may then be a vector instruction (it never sees a negative: no errno to set),
# and its fused products are the ones written as std::fma, however the loop is vectorised
$(BUILD)/obj/src/optim/adam.o: CXXFLAGS += -fno-math-errno -ffp-contract=off

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(if $(CCACHE),$(CCACHE) )$(NVCC) $(NVFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(BUILD)/obj/$(APP_MAIN:.cpp=.o) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

$(TEST_BIN): $(TEST_UNIT_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS) $(GTEST_LIBS)

# ---- MPI tests: every tests/mpi/*.cpp (own MPI-aware main, no gtest_main) --------------
TEST_MPI_SRC := $(sort $(wildcard tests/mpi/*.cpp tests/ref/*.cpp))
TEST_MPI_OBJ := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(TEST_MPI_SRC))
TEST_MPI_BIN := $(BUILD)/bin/spikemesh_mpi_tests
MPIRUN       := timeout 300 mpirun --bind-to none
MPI_TEST_RUN  = OMP_NUM_THREADS=1 $(MPIRUN) -np 2 $(TEST_MPI_BIN) --gtest_color=no --gtest_brief=1 $(if $(FILTER),--gtest_filter='$(FILTER)') && \
                OMP_NUM_THREADS=1 $(MPIRUN) -np 4 --oversubscribe $(TEST_MPI_BIN) --gtest_color=no --gtest_brief=1 $(if $(FILTER),--gtest_filter='$(FILTER)') && \
                OMP_NUM_THREADS=1 $(MPIRUN) -np 8 --oversubscribe $(TEST_MPI_BIN) --gtest_color=no --gtest_brief=1 --gtest_filter='$(or $(FILTER),PipelineParallel3D.*)'

$(TEST_MPI_BIN): $(TEST_MPI_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS) -lgtest -lpthread

export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMP_NUM_THREADS ?= 2

# make test = the module check, deps, one build of every test binary (-j$(NPROC): the library is
# archived and each binary linked once), then the suites in order; each suite target also runs
# alone and builds what it needs (tests/README.md: every suite and how to run one test of it).
TEST_BINS = $(BIN) $(TEST_BIN) $(TEST_MPI_BIN) $(FUZZ_REPLAY)
test:
	@echo "== include / module dependency check ==" && scripts/check_includes.sh $(CHECK_INCLUDES_FLAGS)
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory -j$(NPROC) summary $(TEST_BINS)
	@$(MAKE) --no-print-directory test-unit fuzz-replay test-mpi test-parity test-e2e
	@echo "== all test suites passed [$$(date +%T)] =="

# make test-unit [FILTER='ConvPolicy*']: the unit tests (tests/unit, against tests/ref).
test-unit:
	@$(MAKE) --no-print-directory -j$(NPROC) $(TEST_BIN)
	@echo "== unit tests [$$(date +%T)] ==" && \
	  $(TEST_BIN) --gtest_color=no $(if $(FILTER),--gtest_filter='$(FILTER)',--gtest_brief=1)

# make test-mpi [FILTER='Comm*']: the MPI tests at np 2 and np 4 (--oversubscribe); np 8 runs the
# 3-D mesh tests (or FILTER).
test-mpi:
	@$(MAKE) --no-print-directory -j$(NPROC) $(TEST_MPI_BIN)
	@echo "== MPI tests (np 2, np 4; np 8: the 3-D mesh) [$$(date +%T)] ==" && $(MPI_TEST_RUN)

# make test-parity: the layers and models against PyTorch (Debian's python3-torch), then once more
# with spikemesh's and oneDNN's kernels held to AVX2 (both sides: how they run on a CPU without
# AVX-512, where other kernels run, the own Winograd ones among them).
test-parity:
	@$(MAKE) --no-print-directory -j$(NPROC) $(BIN)
	@echo "== PyTorch parity [$$(date +%T)] ==" && $(PY) tests/parity/torch_parity.py --bin $(BIN)
	@echo "== PyTorch parity, AVX2 kernels [$$(date +%T)] ==" && \
	  SPIKEMESH_CPU_AVX512=0 ONEDNN_MAX_CPU_ISA=AVX2 $(PY) tests/parity/torch_parity.py --bin $(BIN)

# make test-e2e [E2E="pp_train eval"] [E2E_JOBS=1]: the command-line scripts tests/e2e/*.sh,
# E2E_JOBS at a time, each one's output printed whole when it ends (tests/e2e/lib/run_all.sh).
E2E      ?= $(sort $(basename $(notdir $(wildcard tests/e2e/*.sh))))
E2E_JOBS ?= $(NPROC)
test-e2e:
	@$(MAKE) --no-print-directory -j$(NPROC) $(BIN)
	@echo "== e2e scripts, $(E2E_JOBS) at a time [$$(date +%T)] ==" && \
	  BIN=$(BIN) PY=$(PY) bash tests/e2e/lib/run_all.sh $(E2E_JOBS) $(E2E)

# make test-cluster (root; after make test in .ci/run): a virtual Slurm cluster of 3 nodes in
# network namespaces on this machine (tests/cluster/virtual_cluster.sh) and the multi-node
# tests on it (tests/cluster/run.sh: placement, dp x tp / pp / ZeRO-1 across nodes = one rank,
# a checkpoint from two nodes read by one, SIGTERM, a lost node then resume on fewer nodes,
# the faults); torn down on exit and checked to leave nothing. ~2 minutes. Then the bounded chaos
# runs (tests/cluster/chaos.sh: seeded kills of a rank and of node3, resumes, the end bitwise an
# uninterrupted run's; dp and pp), ~4 minutes.
test-cluster:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@echo "== virtual Slurm cluster, 3 nodes (tests/cluster/run.sh) [$$(date +%T)] ==" && \
	  timeout 1200 env BIN=$(BIN) PY=$(PY) bash tests/cluster/run.sh
	@echo "== chaos on the virtual cluster: dp (seed 4: a rank, then node3), pp (seed 5) [$$(date +%T)] ==" && \
	  timeout 600 env BIN=$(BIN) PY=$(PY) SM_CHAOS_STEPS=150 bash tests/cluster/chaos.sh 2 4 && \
	  timeout 600 env BIN=$(BIN) PY=$(PY) SM_CHAOS_STEPS=120 SM_CHAOS_MODE=pp bash tests/cluster/chaos.sh 1 5

# CPUs of this machine: nproc alone honours OMP_NUM_THREADS / OMP_THREAD_LIMIT.
NPROC := $(shell env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)

# Module dependencies (docs/architecture.md §1): a lower module never includes
# a higher one, and only main.cpp and comm/mesh name MPI_COMM_WORLD. `make test` runs it first;
# CHECK_INCLUDES_FLAGS=--report lists the findings without failing.
check-includes:
	scripts/check_includes.sh $(CHECK_INCLUDES_FLAGS)

# ---- fuzzing: make fuzz, make fuzz-replay (tests/README.md "Fuzzing") -----------------------------
# libFuzzer harnesses, tests/fuzz/fuzz_*.cpp (one per input parser/validator).
# make fuzz [FUZZ_SECONDS=600] [FUZZ_JOBS=2] [FUZZ_TARGETS="fuzz_spec_loader ..."]: clang++
# builds the library objects the harnesses link (-fsanitize=fuzzer-no-link,address,undefined,
# CPU-only, incremental) and the harnesses into $(FUZZ_BUILD)/, then runs each for FUZZ_SECONDS
# (FUZZ_JOBS at a time) on $(FUZZ_BUILD)/corpus/<h> (new inputs) + the committed
# tests/fuzz/corpus/<h> and regressions/<h> (read only); crash/leak/timeout inputs land in
# $(FUZZ_BUILD)/crashes/<h>/; prints executions, cov/ft and findings per harness.
# make fuzz-replay (a step of make test; no clang): the same harnesses built with mpicxx
# against $(LIB) and tests/fuzz/replay_main.cpp, run over every committed corpus/regression input.
FUZZ_BUILD    ?= build-fuzz
FUZZ_SECONDS  ?= 60
FUZZ_JOBS     ?= 1
FUZZ_CXX      ?= clang++
FUZZ_HARNESS  := $(sort $(basename $(notdir $(wildcard tests/fuzz/fuzz_*.cpp))))
FUZZ_TARGETS  ?= $(FUZZ_HARNESS)
FUZZ_CXXFLAGS := -std=c++17 -O1 -g -march=$(MARCH) -fopenmp -Wall -Wno-unused-parameter -fno-omit-frame-pointer \
                 -fsanitize=address,undefined -fno-sanitize-recover=undefined $(shell mpicxx --showme:compile 2>/dev/null)
FUZZ_LIB_SRC  := $(filter-out src/app/%,$(SRC_CPP))   # the library without the front end
FUZZ_LIB      := $(FUZZ_BUILD)/lib/libspikemesh_fuzz.a
FUZZ_LDLIBS   := $(LDLIBS) $(shell mpicxx --showme:link 2>/dev/null)
FUZZ_REPLAY   := $(patsubst %,$(BUILD)/bin/fuzz_replay/%,$(FUZZ_HARNESS))
.PHONY: fuzz fuzz-bins fuzz-replay gpu-bundle gpu-rehearsal

# The GPU procedure (scripts/README.md): the bundle, and its rehearsal on a bare root (downloads
# Debian packages once, takes minutes; never part of make test).
gpu-bundle:
	@bash scripts/gpu_bundle.sh

gpu-rehearsal:
	@bash scripts/gpu_rehearsal.sh

# Harness objects are not intermediates: keep them (no recompiling on every link). The replay
# objects are named one by one: a pattern here does not cover files that the generic
# $(BUILD)/obj/%.o rule makes.
.PRECIOUS: $(FUZZ_BUILD)/obj/tests/fuzz/%.o $(BUILD)/obj/tests/fuzz/%.o
.SECONDARY: $(patsubst %,$(BUILD)/obj/tests/fuzz/%.o,$(FUZZ_HARNESS) replay_main)

fuzz:
	@$(MAKE) --no-print-directory -j$(NPROC) CUDA=0 fuzz-bins
	bash tests/fuzz/run_fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_JOBS) $(FUZZ_TARGETS)

fuzz-bins: $(patsubst %,$(FUZZ_BUILD)/bin/%,$(FUZZ_TARGETS))

$(FUZZ_BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(CPPFLAGS) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_LIB): $(patsubst %.cpp,$(FUZZ_BUILD)/obj/%.o,$(FUZZ_LIB_SRC))
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/bin/%: $(FUZZ_BUILD)/obj/tests/fuzz/%.o $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer $^ -o $@ $(FUZZ_LDLIBS)

$(BUILD)/bin/fuzz_replay/%: $(BUILD)/obj/tests/fuzz/%.o $(BUILD)/obj/tests/fuzz/replay_main.o $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

fuzz-replay: $(FUZZ_REPLAY)
	@echo "== fuzz corpus replay (tests/fuzz/corpus, tests/fuzz/regressions) =="
	@set -e; for h in $(FUZZ_HARNESS); do \
	  $(BUILD)/bin/fuzz_replay/$$h tests/fuzz/corpus/$$h tests/fuzz/regressions/$$h; done

run:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@test -f input/fashion_mnist.h5 || $(BIN) data fashion-mnist --out input/fashion_mnist.h5
	$(BIN) train --config input/configs/default.toml --resume auto $(RUN_ARGS)
	@echo "output: output/default (metrics.h5, log.txt, checkpoints); plots: $(PY) scripts/plot_metrics.py output/default"

# ---- sanitizers: make sanitize -----------------------------------------------------------
# The unit and MPI test binaries built CPU-only with AddressSanitizer +
# UndefinedBehaviorSanitizer into $(SAN_BUILD)/ (gcc, the same mpicxx through the compiler
# cache, keyed like the normal build; no extra package), then: every unit test (LeakSanitizer
# on) and the dp / tp / pp equivalence tests on 2 ranks. The spikemesh binary is not built:
# nothing here runs it. SAN_FILTER='Conv*' runs a subset of the unit tests.
# Any ASan/UBSan/LSan report fails the run (UB is not recoverable; halt_on_error). Findings
# inside third-party libraries only are suppressed in tests/sanitize/*.supp (one reason per
# entry); tests/README.md "Sanitizers". SAN_MPI_FILTER / SAN_OPT override the subset / the flags.
SAN_BUILD  ?= build-asan
SAN_OPT    ?= -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SAN_DIR    := $(CURDIR)/tests/sanitize
SAN_ASAN   := detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1:detect_odr_violation=2
# SPIKEMESH_CONV_ALGO=dense: the model tests run oneDNN's (uninstrumented) convolutions; the
# binary-input kernels, instrumented at -O1 ~2.5x slower, run under the sanitizers in their
# own tests (test_spike_conv.cpp sets each mode itself), which keeps the run within CI's time.
SAN_ENV    := SPIKEMESH_CONV_ALGO=dense ASAN_OPTIONS=$(SAN_ASAN) \
              UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$(SAN_DIR)/ubsan.supp \
              LSAN_OPTIONS=suppressions=$(SAN_DIR)/lsan.supp:print_suppressions=0
# MPI ranks: the slow unwinder, so leak stacks reach through Open MPI (no frame pointers) to
# the frame tests/sanitize/lsan.supp matches; their leaks at exit are Open MPI's own.
SAN_MPI_ENV := $(SAN_ENV) ASAN_OPTIONS=$(SAN_ASAN):fast_unwind_on_malloc=0
SAN_MPI_FILTER ?= ParallelEquivalence.*:TensorParallel.*:PipelineParallel.*
# The unit tests run as SAN_SHARDS gtest shards, SAN_JOBS at once (tests/sanitize/run_shards.sh),
# one OpenMP thread each: most tests are small and serial, so shards use the cores that threads
# cannot, and four shards per core even out a shard that holds a slow test.
SAN_JOBS   ?= $(NPROC)
SAN_SHARDS ?= $(shell echo $$((4 * $(SAN_JOBS))))
SAN_MPIRUN := timeout 1500 mpirun --bind-to none -np 2 $(foreach v,SPIKEMESH_CONV_ALGO ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS OMP_NUM_THREADS,-x $(v))

sanitize:
	@$(MAKE) --no-print-directory deps
	@mkdir -p $(SAN_BUILD); if [ "$$(cat $(SAN_BUILD)/.san_flags 2>/dev/null)" != "$(SAN_OPT)" ]; then \
	  rm -rf $(SAN_BUILD)/obj $(SAN_BUILD)/lib $(SAN_BUILD)/bin; echo "$(SAN_OPT)" > $(SAN_BUILD)/.san_flags; fi
	@$(MAKE) --no-print-directory -j$(NPROC) BUILD=$(SAN_BUILD) CUDA=0 OPT="$(SAN_OPT)" \
	  $(SAN_BUILD)/bin/spikemesh_tests $(SAN_BUILD)/bin/spikemesh_mpi_tests
	@echo "== unit tests (ASan + UBSan + LSan; $(SAN_SHARDS) shards, $(SAN_JOBS) at once, one thread each) [$$(date +%T)] ==" && \
	  SAN_ENV='$(SAN_ENV)' SHARD_JOBS=$(SAN_JOBS) bash $(SAN_DIR)/run_shards.sh $(SAN_SHARDS) $(SAN_BUILD)/bin/spikemesh_tests $(SAN_BUILD)/shards \
	    $(if $(SAN_FILTER),--gtest_filter='$(SAN_FILTER)')
	@echo "== MPI tests, np 2: dp / tp / pp equivalence (ASan + UBSan + LSan) [$$(date +%T)] ==" && \
	  $(SAN_MPI_ENV) OMP_NUM_THREADS=1 $(SAN_MPIRUN) $(SAN_BUILD)/bin/spikemesh_mpi_tests --gtest_color=no --gtest_brief=1 \
	    --gtest_filter='$(SAN_MPI_FILTER)'
	@echo "== sanitizers: clean [$$(date +%T)] =="

# ---- dependencies ----------------------------------------------------------------------
DEB_PKGS := openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools libdnnl-dev libcli11-dev \
            nlohmann-json3-dev libtomlplusplus-dev libgtest-dev ccache libzip-dev dataset-fashion-mnist \
            python3-torch python3-h5py python3-numpy python3-matplotlib slurm-wlm munge iproute2 util-linux
MISSING = $(shell for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done)

deps:
	@m="$(MISSING)"; \
	if [ -z "$$m" ]; then echo "✓ all Debian packages present"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  echo "installing: $$m"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$m; \
	else echo "✗ missing Debian packages (run 'make deps' as root, or: sudo apt-get install $$m)"; exit 1; fi

# spikemesh and its peers side by side in one command (CPU, fp32): SpikingJelly and the
# same-model PyTorch script on a current torch (eager and torch.compile, from .venv-bench/ made
# by `make bench-deps`) and on Debian's torch; interleaved rounds, medians, two-rank
# trajectories; writes output/bench/report.md and report.png (bench/README.md). Without the
# venv it says how to create it and still runs spikemesh against Debian's PyTorch.
# Override: make bench BENCH_MODEL=cifar10dvs_vgg BENCH_ARGS="--batch-size 4 --T 10 --rounds 5"
BENCH_MODEL ?= cifar10dvs_vgg
BENCH_ARGS  ?= --batch-size 4 --T 10 --steps 5 --warmup 2 --rounds 3
BENCH_THREADS ?= $(NPROC)
bench:
	@$(MAKE) --no-print-directory -j$(NPROC) all
	$(PY) bench/report.py --model $(BENCH_MODEL) $(BENCH_ARGS) --threads $(BENCH_THREADS)

# .venv-bench/ with a current torch and SpikingJelly from PyPI (bench/requirements.txt; about
# 2.1 GB; never part of make test or make run)
bench-deps:
	bash scripts/bench_deps.sh

# make recipes-check: the event-data recipes of input/configs/ on synthetic stand-ins (also in test-e2e)
recipes-check: all
	@BIN=$(BIN) PY=$(PY) bash tests/e2e/recipes.sh

# The event-dataset importers against SpikingJelly 2.0's own readers, integrators and dataset
# classes (bench/datasets_check.py; needs make bench-deps; never part of make test).
datasets-check: all
	@[ -x .venv-bench/bin/python ] || { echo "datasets-check: run make bench-deps first (.venv-bench/)"; exit 1; }
	.venv-bench/bin/python bench/datasets_check.py --bin $(BIN)
	.venv-bench/bin/python bench/spike_datasets_check.py --bin $(BIN)

# make chaos [N=10] [SEED=...]: N seeded random kills (ranks, a node) and resumes on the virtual cluster (root)
N ?= 10
chaos: all
	@$(MAKE) --no-print-directory deps
	BIN=$(BIN) PY=$(PY) bash tests/cluster/chaos.sh $(N) $(SEED)

# make soak [SOAK_STEPS=30000]: a long run that must not grow (tests/soak/soak.sh; ~1 min per 30000 steps)
SOAK_STEPS ?= 30000
soak: all
	BIN=$(BIN) PY=$(PY) bash tests/soak/soak.sh $(SOAK_STEPS) 1000

interop-check: all
	@[ -x .venv-bench/bin/python ] || { echo "interop-check: run make bench-deps first (.venv-bench/)"; exit 1; }
	.venv-bench/bin/python bench/interop_check.py --bin $(BIN)

format:
	clang-format -i $$(find src include tests -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh')

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
