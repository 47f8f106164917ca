# What this machine has, shared by the top-level Makefile and dev/cuda/Makefile:
# OPENMP_FLAGS, CPU_ARCH_FLAGS (the CPU trainer's -march), COMPRESSION_FLAGS / COMPRESSION_LIBS (zlib and libzstd for
# data/prepro's .jsonl.gz and .jsonl.zst), NVCC_FOUND, GPU_VISIBLE and GPU_COMPUTE_CAPABILITY (read from nvidia-smi, sm_90 when no GPU is
# visible; setting GPU_COMPUTE_CAPABILITY overrides), and where the including Makefile asks, GTEST_OK (DETECT_GTEST=1)
# and the server's libraries (DETECT_SERVE=1). Each missing piece is reported in one line.
CXX ?= g++
NVCC ?= nvcc

OPENMP_OK := $(shell echo 'int main(){return 0;}' | $(CXX) -fopenmp -x c++ - -o /dev/null 2>/dev/null && echo 1)
ifeq ($(OPENMP_OK),1)
  OPENMP_FLAGS := -fopenmp
else
  $(info note: OpenMP not available, the CPU reference and train_gpt2 run single-threaded)
endif

# The CPU trainer's target (CPU_ARCH, default native: the vector instructions of the machine that builds it).
CPU_ARCH ?= native
CPU_ARCH_OK := $(shell echo 'int main(){return 0;}' | $(CXX) -march=$(CPU_ARCH) -x c++ - -o /dev/null 2>/dev/null && echo 1)
ifeq ($(CPU_ARCH_OK),1)
  CPU_ARCH_FLAGS := -march=$(CPU_ARCH)
else
  $(info note: $(CXX) does not take -march=$(CPU_ARCH), train_gpt2 is built for the compiler's default target)
endif

# zlib and libzstd (Debian: zlib1g-dev, libzstd-dev; .ci/run installs them): each links and runs a call, or is off.
ZLIB_OK := $(shell printf '\043include <zlib.h>\nint main(){return zlibVersion()[0]==0;}\n' | $(CXX) -x c++ - -lz -o /dev/null 2>/dev/null && echo 1)
ZSTD_OK := $(shell printf '\043include <zstd.h>\nint main(){return ZSTD_versionNumber()==0;}\n' | $(CXX) -x c++ - -lzstd -o /dev/null 2>/dev/null && echo 1)
ifeq ($(ZLIB_OK),1)
  COMPRESSION_FLAGS += -DLLMC_HAVE_ZLIB
  COMPRESSION_LIBS += -lz
else
  $(info note: zlib not found (Debian: zlib1g-dev), data/prepro cannot read .jsonl.gz)
endif
ifeq ($(ZSTD_OK),1)
  COMPRESSION_FLAGS += -DLLMC_HAVE_ZSTD
  COMPRESSION_LIBS += -lzstd
else
  $(info note: libzstd not found (Debian: libzstd-dev), data/prepro cannot read .jsonl.zst)
endif

# GoogleTest (Debian: libgtest-dev), for the unit tests (tests/unit/unit_tests, tests/serving/serve_tests): its header and library.
ifeq ($(DETECT_GTEST),1)
  GTEST_OK := $(shell printf '\043include <gtest/gtest.h>\n' | $(CXX) -std=c++17 -E -x c++ - >/dev/null 2>&1 && \
                echo 'int main(){return 0;}' | $(CXX) -x c++ - -lgtest -pthread -o /dev/null 2>/dev/null && echo 1)
  ifneq ($(GTEST_OK),1)
    $(info note: GoogleTest not found (Debian: libgtest-dev): the unit tests (tests/unit/unit_tests, tests/serving/serve_tests) are skipped)
  endif
endif

NVCC_FOUND := $(shell command -v $(NVCC) 2>/dev/null)
GPU_VISIBLE := $(shell nvidia-smi -L 2>/dev/null | grep -q GPU && echo 1)
ifeq ($(GPU_COMPUTE_CAPABILITY),)
  ifeq ($(GPU_VISIBLE),1)
    GPU_COMPUTE_CAPABILITY := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d '. ')
  else
    GPU_COMPUTE_CAPABILITY := 90
    ifneq ($(NVCC_FOUND),)
      $(info note: no GPU visible, CUDA code is built for sm_90 (set GPU_COMPUTE_CAPABILITY to change))
    endif
  endif
endif

# The architecture flags. Programs with Hopper kernels (wgmma, setmaxnreg: llmc/hopper/arch.cuh) take HOPPER_ARCH, which
# on compute capability 9.0 targets sm_90a (those instructions exist only there) and says so with -DLLMC_SM90A;
# elsewhere it is GPU_ARCH and the Hopper kernels are left out at run time (hopper_available()).
GPU_ARCH := -gencode arch=compute_$(GPU_COMPUTE_CAPABILITY),code=sm_$(GPU_COMPUTE_CAPABILITY)
ifeq ($(GPU_COMPUTE_CAPABILITY),90)
  HOPPER_ARCH := -gencode arch=compute_90a,code=sm_90a -DLLMC_SM90A
else
  HOPPER_ARCH := $(GPU_ARCH)
endif

# The server's libraries (serve_gpt2cu, tests/serving/serve_tests, tests/serving/serve_mock, the request fuzzer; docs/SERVING.md), when
# the including Makefile asks (DETECT_SERVE=1): cpp-httplib (Debian's libcpp-httplib-dev is a compiled library whose
# header must see the flags it was built with, so both come from pkg-config) and nlohmann/json (header-only). On a
# machine without apt (the GPU machines), SERVE_PREFIX=DIR takes them, and what they need, from Debian packages
# unpacked under DIR (scripts/tools/serve_deps.sh), with DIR's libraries on the programs' run path (DT_RPATH, which
# also serves the libraries' own dependencies).
# SERVE_DEPS=1 when both are here; else one line names what is missing and how to install it.
ifeq ($(DETECT_SERVE),1)
  ifneq ($(SERVE_PREFIX),)
    SERVE_ROOT := $(abspath $(SERVE_PREFIX))
    SERVE_LIBDIR := $(SERVE_ROOT)/usr/lib/x86_64-linux-gnu
    HTTPLIB_OK := $(if $(wildcard $(SERVE_ROOT)/usr/include/httplib.h $(SERVE_LIBDIR)/libcpp-httplib.so),1)
    HTTPLIB_CFLAGS := -I$(SERVE_ROOT)/usr/include -I$(SERVE_ROOT)/usr/include/x86_64-linux-gnu \
                      -DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_ZLIB_SUPPORT -DCPPHTTPLIB_BROTLI_SUPPORT
    SERVE_RPATH := $(SERVE_LIBDIR):$(SERVE_ROOT)/lib/x86_64-linux-gnu
    HTTPLIB_LIBS := -L$(SERVE_LIBDIR) -lcpp-httplib -Xlinker --disable-new-dtags -Xlinker -rpath=$(SERVE_RPATH) \
                    -Xlinker -rpath-link=$(SERVE_RPATH)
    NLOHMANN_JSON_OK := $(if $(wildcard $(SERVE_ROOT)/usr/include/nlohmann/json.hpp),1)
  else
    HTTPLIB_OK := $(shell pkg-config --exists cpp-httplib 2>/dev/null && echo 1)
    HTTPLIB_CFLAGS := $(if $(HTTPLIB_OK),$(shell pkg-config --cflags cpp-httplib))
    HTTPLIB_LIBS := $(if $(HTTPLIB_OK),$(shell pkg-config --libs cpp-httplib))
    NLOHMANN_JSON_OK := $(shell printf '\043include <nlohmann/json.hpp>\n' | $(CXX) -std=c++17 -E -x c++ - >/dev/null 2>&1 && echo 1)
  endif
  SERVE_MISSING := $(strip $(if $(HTTPLIB_OK),,cpp-httplib) $(if $(NLOHMANN_JSON_OK),,nlohmann/json))
  ifeq ($(SERVE_MISSING),)
    SERVE_DEPS := 1
  else
    $(info note: $(SERVE_MISSING) not found$(if $(SERVE_PREFIX), under SERVE_PREFIX=$(SERVE_PREFIX) (scripts/tools/serve_deps.sh), (apt-get install libcpp-httplib-dev nlohmann-json3-dev pkg-config)): serve_gpt2cu and its tests are skipped)
  endif
endif
