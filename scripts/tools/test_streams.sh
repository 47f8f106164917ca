# make test's suites in four groups that run at once on one GPU (nothing in make test is timed), each a TEST_ONLY
# regex: the CPU suites and the server's host tests; the kernel and engine tests; the dev programs' validation and
# the training checks; the d12 reference suites (transformers, the server). Sourced by scripts/tools/gpu_verify.sh;
# tests/cli/test_streams.sh checks that every suite of tests/run_tests.sh is in exactly one.
STREAMS=('^(cpu-reference|cpu-engine|cpu-trainer|preflight|cli-style|detect|layout|test-streams|unit-tests|tokenizer-tools|prepro-data|hellaswag-converter|gpt2-convert|bench-multi-gpu-table|trace-report|sass-hazards|cubin-stall|fp8-quality-verdict|hellaswag-paired|fuzzers|serve-tests|serve-scripts|gpu-programs-without-gpu|gpu-reference-tiny-materialized)$'
         '^(gpu-kernels-.*|gpu-decode|gpu-sass-scan|gpu-sampling|gpu-zero|gpu-serve-engine)$'
         '^(dev-.*|resume-bit-exact|cuda-graph-bit-exact|fp8-training|gemm-algorithm-files|checkpoint-directory|cpu-vs-gpu-fp32)$'
         '^(gpu-reference-d12-.*|generate-vs-transformers|hellaswag-vs-transformers|serve-vs-generate.*|page-vs-server)$')
