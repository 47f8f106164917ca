# What this machine has, shared by the top-level Makefile and dev/cuda/Makefile:
# OPENMP_FLAGS, CPU_ARCH_FLAGS (the CPU trainer's -march), NVCC_FOUND, GPU_VISIBLE and GPU_COMPUTE_CAPABILITY (read from nvidia-smi, sm_90 when no GPU is
# visible; setting GPU_COMPUTE_CAPABILITY overrides). Each missing piece is reported in one line.
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

# The architecture flags. Programs with Hopper kernels (wgmma, setmaxnreg: llmc/kernels/hopper/hopper.cuh) take HOPPER_ARCH, which
# on compute capability 9.0 targets sm_90a (those instructions exist only there) and says so with -DLLMC_SM90A;
# elsewhere it is GPU_ARCH and the Hopper kernels are left out at run time (hopper_available()).
GPU_ARCH := -gencode arch=compute_$(GPU_COMPUTE_CAPABILITY),code=sm_$(GPU_COMPUTE_CAPABILITY)
ifeq ($(GPU_COMPUTE_CAPABILITY),90)
  HOPPER_ARCH := -gencode arch=compute_90a,code=sm_90a -DLLMC_SM90A
else
  HOPPER_ARCH := $(GPU_ARCH)
endif
