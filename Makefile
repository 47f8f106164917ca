# GPT-2 training and inference in C++/CUDA (README.md; what each part needs: README, "Prerequisites").
#   make test                 every test this machine can run: the CPU suites, and the GPU suites when a GPU is visible
#                             (the test data from DATA_MIRROR or data/cache; no `make data` needed)
#   make train_gpt2cu         the GPU trainer                 make train_gpt2      the CPU trainer (fp32, OpenMP)
#   make generate_gpt2cu      text for prompts                make serve_gpt2cu    the completions server (docs/SERVING.md)
#   make test_gpt2cu          the GPU engine vs PyTorch       make test_gpt2       the CPU reference vs PyTorch
#   make tokenizer data/prepro data/hellaswag gpt2_convert   the data tools and the Hugging Face converter
#   make data                 the Tiny Shakespeare shards and gpt2_tokenizer.bin (online, else from DATA_MIRROR)
#   make fuzz                 the readers' fuzzers (clang)     make dev / make -C dev/cuda NAME   the kernel programs
#   make clean
# Options: PRECISION=BF16|FP32, GPU_COMPUTE_CAPABILITY=90, DATA_MIRROR=../shared/data, NO_MULTI_GPU=1, CPU_ARCH=native,
#          SERVE_PREFIX=DIR (the server's libraries unpacked by scripts/tools/serve_deps.sh). What this machine lacks, make
#          says in one line each (detect.mk).

.DEFAULT_GOAL := all
SHELL := /bin/bash

CXX ?= g++
NVCC ?= nvcc
PRECISION ?= BF16
DATA_MIRROR ?= ../shared/data

# make test reads the GPT-2 vocabulary, Tiny Shakespeare and Alice from DATA_MIRROR (else data/cache, which
# `make data` fills): without them it says in one line what is missing, before it builds anything (tests/lib/lib.sh).
ifneq ($(filter test check,$(MAKECMDGOALS)),)
  TEST_DATA_ERROR := $(shell DATA_MIRROR='$(DATA_MIRROR)' TEST_DATA_CACHE='$(TEST_DATA_CACHE)' \
                       bash -c 'source tests/lib/lib.sh && test_data_root' 2>&1 >/dev/null)
  ifneq ($(TEST_DATA_ERROR),)
    $(error $(TEST_DATA_ERROR))
  endif
endif

# What --version prints (llmc/core/version.h): the commit the programs are built from.
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo "unknown (not a git checkout)")
VERSION_FLAG := -DLLMC_VERSION='"$(VERSION)"'

# ---------------------------------------------------------------- host compiler
CXXFLAGS_COMMON := -O3 -std=c++17 -Wall -Wextra -Wno-unused-parameter -I. $(VERSION_FLAG)
# detect.mk also looks for GoogleTest (GTEST_OK) and the server's libraries (SERVE_DEPS, HTTPLIB_CFLAGS, HTTPLIB_LIBS)
DETECT_GTEST := 1
DETECT_SERVE := 1
include detect.mk
CXXFLAGS := $(CXXFLAGS_COMMON) $(OPENMP_FLAGS) $(COMPRESSION_FLAGS)

GTEST_LIBS := -lgtest -lgtest_main -pthread

# ---------------------------------------------------------------- GPU compiler
ifeq ($(NVCC_FOUND),)
  $(info note: nvcc not found, GPU programs are skipped)
endif
ifneq ($(GPU_VISIBLE),1)
  $(info note: no GPU visible, GPU tests are skipped)
endif

ifeq ($(PRECISION),BF16)
  PRECISION_FLAG := -DENABLE_BF16
else ifeq ($(PRECISION),FP32)
  PRECISION_FLAG := -DENABLE_FP32
else
  $(error PRECISION must be BF16 or FP32, not '$(PRECISION)')
endif

NVCC_ARCH := $(HOPPER_ARCH)  # sm_90a at compute capability 9.0: the Hopper kernels (detect.mk)
NVCCFLAGS := -O3 -std=c++17 -I. --use_fast_math --expt-relaxed-constexpr $(NVCC_ARCH) $(PRECISION_FLAG) $(VERSION_FLAG) \
             -Xcompiler "-Wall -Wextra -Wno-unused-parameter $(OPENMP_FLAGS)" --Werror all-warnings
NVCC_LIBS := -lcublas -lcublasLt -ldl

# Multi-GPU: NCCL (from the CUDA install or the pip package nvidia.nccl) and, optionally, MPI for launch.
NCCL_DIR ?= $(shell python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null)
ifeq ($(NO_MULTI_GPU),1)
  $(info note: multi-GPU disabled (NO_MULTI_GPU=1))
else ifneq ($(wildcard $(NCCL_DIR)/include/nccl.h),)
  NVCCFLAGS += -DMULTI_GPU -I$(NCCL_DIR)/include
  NVCC_LIBS += -L$(NCCL_DIR)/lib -Xlinker -rpath,$(NCCL_DIR)/lib -l:libnccl.so.2
else ifneq ($(shell printf '\043include <nccl.h>\n' | $(CXX) -E -x c++ -I/usr/local/cuda/include - >/dev/null 2>&1 && echo 1),)
  NVCCFLAGS += -DMULTI_GPU
  NVCC_LIBS += -lnccl
else
  $(info note: NCCL not found, building single-GPU only)
endif
MPI_CXX := $(shell command -v mpicxx 2>/dev/null)
ifneq ($(MPI_CXX),)
  NVCCFLAGS += -DUSE_MPI $(shell mpicxx --showme:compile 2>/dev/null)
  NVCC_LIBS += $(shell mpicxx --showme:link 2>/dev/null)
else
  $(info note: MPI not found, multi-GPU runs use the file-system rendezvous (no mpirun))
endif

# ---------------------------------------------------------------- sources
# Three audiences, three places (docs/ARCHITECTURE.md): the engine, the tokenizer and data tools, the references.
ENGINE_HEADERS := $(wildcard llmc/*/*.h llmc/*/*.cuh llmc/*/*/*.h llmc/*/*/*.cuh)
REFERENCE_HEADERS := $(wildcard reference/*.h)
TEST_HEADERS := $(wildcard tests/lib/*.h tests/serving/*.h)

# ---------------------------------------------------------------- CPU programs and tests
CPU_TESTS := test_gpt2 tests/cpu/test_cpu_engine $(if $(GTEST_OK),tests/unit/unit_tests)
CPU_PROGRAMS := train_gpt2
TOOLS := tokenizer data/prepro data/hellaswag gpt2_convert

# The CPU trainer (README, "Training on the CPU"): fp32, the host's vector instructions, OpenMP where available.
# Its engine test is built the same way, so it checks the code train_gpt2 runs.
CPU_TRAINER_FLAGS := $(CXXFLAGS) $(CPU_ARCH_FLAGS) -fno-math-errno
train_gpt2: train_gpt2.cpp $(ENGINE_HEADERS) detect.mk
	$(CXX) $(CPU_TRAINER_FLAGS) $< -o $@

tests/cpu/test_cpu_engine: tests/cpu/test_cpu_engine.cpp $(ENGINE_HEADERS) $(REFERENCE_HEADERS) detect.mk
	$(CXX) $(CPU_TRAINER_FLAGS) $< -o $@ -lm

# GPT-2 BPE tokenizer CLI and the dataset tool (docs/TOKENIZER.md).
tokenizer: data/tokenizer.cpp $(ENGINE_HEADERS)
	$(CXX) $(CXXFLAGS) $< -o $@ -pthread

DATA_HEADERS := $(wildcard data/*.h)
data/prepro: data/prepro.cpp $(DATA_HEADERS) $(ENGINE_HEADERS)
	$(CXX) $(CXXFLAGS) $< -o $@ -pthread $(COMPRESSION_LIBS)

# HellaSwag JSONL -> llm.c's eval file (docs/EVALUATION.md).
data/hellaswag: data/hellaswag.cpp $(DATA_HEADERS) $(ENGINE_HEADERS)
	$(CXX) $(CXXFLAGS) $< -o $@ -pthread $(COMPRESSION_LIBS)

# Our model files <-> Hugging Face GPT-2 directories (README, "Hugging Face models").
gpt2_convert: gpt2_convert.cpp $(ENGINE_HEADERS)
	$(CXX) $(CXXFLAGS) $< -o $@ -pthread

# Every data file the tests and the Tiny Shakespeare run read (online, else from DATA_MIRROR; SHA-256 checked)
# into data/cache, then gpt2_tokenizer.bin + the Tiny Shakespeare shards. The tests read DATA_MIRROR, else data/cache.
data: tokenizer data/prepro
	DATA_MIRROR=$(DATA_MIRROR) bash scripts/runs/prepare_tinyshakespeare.sh
.PHONY: data

test_gpt2: test_gpt2.cpp $(REFERENCE_HEADERS) $(ENGINE_HEADERS)
	$(CXX) $(CXXFLAGS) $< -o $@ -lm

# Tests by kind (tests/run_tests.sh runs them): tests/unit/ (GoogleTest, one binary), tests/cpu/ (the CPU engine,
# built with the CPU trainer's flags), tests/gpu/, tests/serving/ (the server's tests: their own binary, they need its
# libraries), tests/cli/ (the programs and scripts from the outside), tests/fuzz/, tests/fixtures/, tests/lib/.
# One object per test file, so make -j compiles them in parallel.
UNIT_TEST_SOURCES := $(wildcard tests/unit/test_*.cpp)
UNIT_TEST_OBJECTS := $(patsubst tests/unit/%.cpp,tests/obj/unit/%.o,$(UNIT_TEST_SOURCES))
tests/obj/unit/%.o: tests/unit/%.cpp $(ENGINE_HEADERS) $(DATA_HEADERS) $(REFERENCE_HEADERS) $(TEST_HEADERS)
	@mkdir -p tests/obj/unit
	$(CXX) $(CXXFLAGS) -c $< -o $@
tests/unit/unit_tests: $(UNIT_TEST_OBJECTS)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(GTEST_LIBS) -lm $(COMPRESSION_LIBS)

# ---------------------------------------------------------------- the server (docs/SERVING.md)
# Its request layer, scheduler and HTTP side are host code, tested here on a fake engine (tests/serving/serve_tests)
# and run as tests/serving/serve_mock (the server on the fake engine) for tests/serving/check_serve.py and
# scripts/bench/bench_serve.py.
SERVE_TEST_SOURCES := $(wildcard tests/serving/test_serve_*.cpp)
SERVE_TEST_OBJECTS := $(patsubst tests/serving/%.cpp,tests/obj/serving/%.o,$(SERVE_TEST_SOURCES))
tests/obj/serving/%.o: tests/serving/%.cpp $(ENGINE_HEADERS) $(TEST_HEADERS)
	@mkdir -p tests/obj/serving
	$(CXX) $(CXXFLAGS) $(HTTPLIB_CFLAGS) -c $< -o $@
tests/serving/serve_tests: $(SERVE_TEST_OBJECTS)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(HTTPLIB_LIBS) $(GTEST_LIBS)
tests/serving/serve_mock: tests/serving/serve_mock.cpp $(ENGINE_HEADERS) $(TEST_HEADERS)
	$(CXX) $(CXXFLAGS) $(HTTPLIB_CFLAGS) $< -o $@ $(HTTPLIB_LIBS) -pthread
SERVE_CPU := $(if $(SERVE_DEPS),$(if $(GTEST_OK),tests/serving/serve_tests) tests/serving/serve_mock)

# ---------------------------------------------------------------- GPU programs
# every engine kernel against the double-precision CPU reference, one program per kernel family
KERNEL_TESTS := $(patsubst %.cu,%,$(wildcard tests/gpu/kernels/test_*.cu))
GPU_PROGRAMS := train_gpt2cu test_gpt2cu generate_gpt2cu $(KERNEL_TESTS) tests/gpu/test_decode tests/gpu/test_sampling \
                tests/gpu/test_zero tests/gpu/test_serve_engine tests/gpu/test_peer_copy $(if $(SERVE_DEPS),serve_gpt2cu)

# GPU binaries are rebuilt when PRECISION or the target architecture changes (the stamp holds both).
BUILD_STAMP := .build-config
$(shell echo "$(PRECISION) sm_$(GPU_COMPUTE_CAPABILITY)" | cmp -s - $(BUILD_STAMP) || \
        echo "$(PRECISION) sm_$(GPU_COMPUTE_CAPABILITY)" > $(BUILD_STAMP))

train_gpt2cu: train_gpt2.cu $(ENGINE_HEADERS) $(BUILD_STAMP)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVCC_LIBS)

test_gpt2cu: test_gpt2.cu $(ENGINE_HEADERS) $(REFERENCE_HEADERS) $(BUILD_STAMP)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVCC_LIBS)

# Text for prompts (README, "Generate").
generate_gpt2cu: generate_gpt2.cu $(ENGINE_HEADERS) $(BUILD_STAMP)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVCC_LIBS)

# The completions server (docs/SERVING.md).
serve_gpt2cu: serve_gpt2.cu $(ENGINE_HEADERS) $(BUILD_STAMP)
	$(if $(SERVE_DEPS),,@echo "serve_gpt2cu needs $(SERVE_MISSING) (apt-get install libcpp-httplib-dev nlohmann-json3-dev pkg-config)"; exit 1)
	$(NVCC) $(NVCCFLAGS) $(HTTPLIB_CFLAGS) $< -o $@ $(NVCC_LIBS) $(HTTPLIB_LIBS)

$(KERNEL_TESTS): tests/gpu/kernels/%: tests/gpu/kernels/%.cu $(wildcard tests/gpu/kernels/*.cuh) $(ENGINE_HEADERS) \
                 $(REFERENCE_HEADERS) $(BUILD_STAMP)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVCC_LIBS)

tests/gpu/test_decode: tests/gpu/test_decode.cu $(ENGINE_HEADERS) $(TEST_HEADERS) $(REFERENCE_HEADERS) $(BUILD_STAMP)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVCC_LIBS)

# the GPU token picker (greedy, temperature, top-k, top-p) against the host sampler
# the server's scheduler over the GPU engine, many requests at once against each alone (no HTTP: no libraries needed)
tests/gpu/test_serve_engine: tests/gpu/test_serve_engine.cu $(ENGINE_HEADERS) $(TEST_HEADERS) $(BUILD_STAMP)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVCC_LIBS)

tests/gpu/test_sampling: tests/gpu/test_sampling.cu $(ENGINE_HEADERS) $(TEST_HEADERS) $(BUILD_STAMP)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVCC_LIBS)

# ZeRO-1's and -2's sharded AdamW, pack and unpack, gradient slots and shard, N ranks simulated on one GPU, against
# the unsharded update; a backward into -2's slots against the flat backward
tests/gpu/test_zero: tests/gpu/test_zero.cu $(ENGINE_HEADERS) $(TEST_HEADERS) $(BUILD_STAMP)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVCC_LIBS)

# the copy-engine exchange over N processes of one host against the fp64 mean (tests/gpu/check_multi_gpu.sh runs it)
tests/gpu/test_peer_copy: tests/gpu/test_peer_copy.cu $(ENGINE_HEADERS) $(TEST_HEADERS) $(BUILD_STAMP)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVCC_LIBS)

# the standalone kernel programs (dev/cuda/Makefile builds them with the same flags)
dev:
	$(MAKE) -C dev/cuda

# libFuzzer targets for every reader (tests/fuzz/); one line and nothing else without clang++ with libFuzzer
fuzz:
	$(MAKE) -C tests/fuzz

# ---------------------------------------------------------------- aggregate targets
ifneq ($(NVCC_FOUND),)
all: $(CPU_TESTS) $(CPU_PROGRAMS) $(TOOLS) $(SERVE_CPU) $(GPU_PROGRAMS)
else
all: $(CPU_TESTS) $(CPU_PROGRAMS) $(TOOLS) $(SERVE_CPU)
endif

# `make test`: CPU tests everywhere, GPU tests when a GPU is visible; ends with "N passed, N failed".
# With a GPU: the GPU programs and the dev/cuda programs (their -c validation) too. Without one but with nvcc:
# train_gpt2cu, generate_gpt2cu, test_gpt2cu (and serve_gpt2cu), to check their inputs before the GPU, that they then
# fail in one clear line there, and their --help and --version.
ifeq ($(GPU_VISIBLE),1)
test: $(CPU_TESTS) $(CPU_PROGRAMS) $(TOOLS) $(SERVE_CPU) $(GPU_PROGRAMS) dev fuzz
	DATA_MIRROR=$(DATA_MIRROR) GPU_TESTS=1 GTEST_TESTS=$(if $(GTEST_OK),1,0) SERVE_TESTS=$(if $(SERVE_DEPS),1,0) \
	    PRECISION=$(PRECISION) bash tests/run_tests.sh
else
test: $(CPU_TESTS) $(CPU_PROGRAMS) $(TOOLS) $(SERVE_CPU) fuzz \
      $(if $(NVCC_FOUND),train_gpt2cu generate_gpt2cu test_gpt2cu $(if $(SERVE_DEPS),serve_gpt2cu))
	DATA_MIRROR=$(DATA_MIRROR) GPU_TESTS=0 GTEST_TESTS=$(if $(GTEST_OK),1,0) SERVE_TESTS=$(if $(SERVE_DEPS),1,0) \
	    PRECISION=$(PRECISION) bash tests/run_tests.sh
endif
check: test

clean:
	rm -f $(CPU_TESTS) tests/unit/unit_tests $(CPU_PROGRAMS) tests/serving/serve_tests tests/serving/serve_mock serve_gpt2cu $(TOOLS) $(GPU_PROGRAMS) \
	      $(BUILD_STAMP) *.o
	rm -rf tests/obj
	$(MAKE) -C dev/cuda clean 2>/dev/null || true
	$(MAKE) -C tests/fuzz clean 2>/dev/null || true

.PHONY: all test check clean dev fuzz
