#!/usr/bin/env bash
# Runs every test suite, prints each one's output, and ends with one summary line
# "tests: N passed, N failed[, K GPU suites skipped (no GPU visible)][, K other skipped]". Exits non-zero if any
# suite failed.
# Environment: DATA_MIRROR (GPT-2 vocab + text corpora), GPU_TESTS=1 to add the GPU suites,
#              TEST_ONLY (an extended regex: only the suites whose names match run, e.g. TEST_ONLY='d12|generate';
#              the data and the d12 reference are still made when a selected suite needs them).
set -u
cd "$(dirname "$0")/.."
# the suites' own makes (of programs make test already built) are fresh ones: the jobserver of a make -j that ran
# this is not theirs to share (GNU make would warn "jobserver unavailable" in the log)
unset MAKEFLAGS MFLAGS
DATA_MIRROR=${DATA_MIRROR:-../shared/data}
export DATA_MIRROR

passed=0; failed=0; failed_names=(); skipped=(); deselected=0
selected() { [ -z "${TEST_ONLY:-}" ] || [[ "$1" =~ $TEST_ONLY ]]; }
gpu_not_run=0  # without a GPU: the GPU suites that would have run (the GPU block is walked with COUNT_ONLY=1)
run_suite() {  # name, command...
    local name=$1; shift
    if [ "${COUNT_ONLY:-0}" = 1 ]; then
        { [ "${PREREQ:-0}" = 1 ] || selected "$name"; } && gpu_not_run=$((gpu_not_run + 1))
        return 0
    fi
    if [ "${PREREQ:-0}" != 1 ] && ! selected "$name"; then deselected=$((deselected + 1)); return; fi
    echo "==== $name: $*"
    if "$@"; then
        passed=$((passed + 1)); echo "==== $name: PASS"
    else
        failed=$((failed + 1)); failed_names+=("$name"); echo "==== $name: FAIL"
    fi
}

# ---- CPU suites (everywhere)
run_suite cpu-reference ./test_gpt2 tests/fixtures/tiny
# the CPU trainer's engine against PyTorch's fixture and the reference (10 steps within 1e-4, thread-count
# independence), then train_gpt2 itself: flags and bad inputs, logs, checkpoints, resume bit for bit
run_suite cpu-engine ./tests/cpu/test_cpu_engine tests/fixtures/tiny
run_suite cpu-trainer bash tests/cpu/test_cpu_trainer.sh
# both trainers' preflight: each bad input one line, before any CUDA call, in under a second; --check
run_suite preflight bash tests/cli/test_preflight.sh
# every built program's --help (one usage, defaults) and --version (the commit, the precision)
run_suite cli-style bash tests/cli/test_cli_style.sh
# make's one-line note when GoogleTest is missing, and a test run without the unit tests
run_suite detect bash tests/cli/test_detect.sh
# the engine's folders include only the folders below them; no engine file over 400 lines but single algorithms
run_suite layout bash tests/cli/check_layout.sh
if [ "${GTEST_TESTS:-1}" = 1 ]; then
    run_suite unit-tests ./tests/unit/unit_tests
else
    skipped+=("the unit tests (GoogleTest not found: apt-get install libgtest-dev)")
fi
run_suite tokenizer-tools bash tests/cli/test_tokenizer_tools.sh
# prepro on .jsonl.gz / .jsonl.zst (same shards as plain JSONL, any -j), --fineweb-layout, the inputs it refuses
run_suite prepro-data bash tests/cli/test_prepro_data.sh
# data/hellaswag: the fixture against the golden eval file (llm.c's layout), bad lines, the golden script
run_suite hellaswag-converter bash tests/cli/test_hellaswag.sh
run_suite gpt2-convert bash tests/cli/test_gpt2_convert.sh
# scripts/bench/bench_multi_gpu.sh's table (medians, efficiency, memory, the clock column, n/a rows) on stand-ins
run_suite bench-multi-gpu-table bash tests/cli/test_bench_multi_gpu.sh
# scripts/tools/trace_report.py's figures on two hand-made traces (the step's split against one GPU, gaps, kernels)
run_suite trace-report bash tests/cli/test_trace_report.sh
# scripts/tools/sass_hazards.py (the GPU gate's scan of every kernel for a ptxas schedule that failed) on hand-made SASS
run_suite sass-hazards bash tests/cli/test_sass_hazards.sh
# scripts/tools/cubin_stall.py (one instruction's stall count read and set in a cubin) on a hand-made ELF file
run_suite cubin-stall bash tests/cli/test_cubin_stall.sh
# scripts/tools/test_streams.sh: every suite here in exactly one of the GPU gate's parallel streams
run_suite test-streams bash tests/cli/test_streams.sh
# scripts/bench/fp8_quality.py's verdict (issue 64's quality points) on hand-made logs: each failure with its reason
run_suite fp8-quality-verdict bash tests/cli/test_fp8_quality.sh
# scripts/bench/hellaswag_paired.py (two models' HellaSwag picks item by item) on hand-made picks files, bad input refused
run_suite hellaswag-paired bash tests/cli/test_hellaswag_paired.sh
# a second of every reader's fuzzer on its seed corpus, so they stay alive (longer: FUZZ_SECONDS=N)
run_suite fuzzers bash tests/fuzz/run_fuzzers.sh "${FUZZ_SECONDS:-1}" 2
# the server's host side (requests, scheduler, HTTP) on a fake engine, and the GPU session's scripts against the server
# on that engine (tests/serving/serve_mock); SERVE_TESTS=1 when make found its libraries
if [ "${SERVE_TESTS:-0}" = 1 ]; then
    [ "${GTEST_TESTS:-1}" = 1 ] && run_suite serve-tests ./tests/serving/serve_tests
    run_suite serve-scripts bash tests/serving/test_serve_scripts.sh
else
    skipped+=("the server (cpp-httplib or nlohmann/json not found: apt-get install libcpp-httplib-dev nlohmann-json3-dev pkg-config)")
fi

# ---- without a GPU: the GPU trainer (built when nvcc is present) fails in one clear line
if [ "${GPU_TESTS:-0}" != 1 ] && [ -x ./train_gpt2cu ]; then
    run_suite gpu-programs-without-gpu bash tests/cli/test_without_gpu.sh
fi

# ---- GPU suites (only when a GPU is visible; otherwise only counted, for the summary line)
skipped_before_gpu=("${skipped[@]}")
[ "${GPU_TESTS:-0}" = 1 ] || COUNT_ONLY=1
if true; then
    backends="materialized"
    [ "${PRECISION:-BF16}" = BF16 ] && backends="materialized flash flash-nondet"   # flash attention is bf16-only
    # what the selected suites need (TEST_ONLY): the d12 reference, the Tiny Shakespeare shards
    needs_d12=0; needs_data=0
    for name in $(printf 'gpu-reference-d12-%s ' $backends) gpu-reference-d12-flash-cublas-dgelu generate-vs-transformers hellaswag-vs-transformers \
                serve-vs-generate serve-vs-generate-chunks page-vs-server; do
        selected "$name" && needs_d12=1 && needs_data=1
    done
    for name in gpu-data resume-bit-exact cuda-graph-bit-exact fp8-training checkpoint-directory cpu-vs-gpu-fp32; do selected "$name" && needs_data=1; done
    # every kernel against the CPU reference in double, one program per kernel family
    for src in tests/gpu/kernels/test_*.cu; do
        family=$(basename "$src" .cu)
        run_suite "gpu-kernels-${family#test_}" "./${src%.cu}"
    done
    # the FP8 linear layers again with a scale per block (llmc/model/gpt2_fp8_blocks.cuh)
    run_suite gpu-kernels-fp8_linear-blocks env LLMC_FP8_BLOCKS=1 ./tests/gpu/kernels/test_fp8_linear
    run_suite gpu-kernels-fp8_linear-recast env LLMC_FP8_RECAST=1 ./tests/gpu/kernels/test_fp8_linear
    # generation's KV cache and decode step (as a CUDA Graph) against the full forward
    run_suite gpu-decode ./tests/gpu/test_decode
    # every CUDA program's kernels through cuobjdump, for the ptxas schedule that broke the tiled decode step
    # (scripts/tools/sass_hazards.py; docs/DECODE.md, "The tile path's failure, found")
    run_suite gpu-sass-scan python3 scripts/tools/sass_hazards.py --tree .
    # the GPU token picker against the host sampler
    run_suite gpu-sampling ./tests/gpu/test_sampling
    # ZeRO-1's and -2's sharded AdamW with a simulated reduce-scatter / all-gather (1-3 ranks) against the unsharded
    # update; a backward into ZeRO-2's gradient slots against the flat backward
    run_suite gpu-zero ./tests/gpu/test_zero
    # the server's scheduler over the GPU engine: requests in a changing batch against each alone
    run_suite gpu-serve-engine ./tests/gpu/test_serve_engine
    # the dev programs' strict validation: every variant at every shape against the fp64 reference, no timing
    run_suite dev-attention-forward ./dev/cuda/attention_forward -c
    run_suite dev-attention-backward ./dev/cuda/attention_backward -c
    run_suite dev-matmul-forward ./dev/cuda/matmul_forward -c
    run_suite dev-attention-decode ./dev/cuda/attention_decode -c
    run_suite dev-layernorm ./dev/cuda/layernorm -c
    run_suite dev-matmul-backward-dgelu ./dev/cuda/matmul_backward_dgelu -c
    run_suite dev-adamw ./dev/cuda/adamw -c
    run_suite dev-fp8-cast ./dev/cuda/fp8_cast -c
    run_suite dev-graph-gaps ./dev/cuda/graph_gaps -c
    run_suite dev-peer-traffic ./dev/cuda/peer_traffic -c
    # flash needs head size 64 or 128; the tiny fixture's is 16, so it runs the materialized backend only
    # (flash is checked by tests/gpu/kernels/test_attention and by the d12 reference below)
    run_suite gpu-reference-tiny-materialized ./test_gpt2cu tests/fixtures/tiny --backend materialized
    # Tiny Shakespeare shards for the resume check and the d12 reference
    [ $needs_data = 1 ] && PREREQ=1 run_suite gpu-data make -s data DATA_MIRROR="$DATA_MIRROR"
    # checkpoint + resume must continue bit for bit (weights, optimizer state, data position, log, console)
    run_suite resume-bit-exact bash tests/gpu/check_resume.sh
    # the trainer's CUDA Graph replays the same kernels: model, optimizer state and losses bit for bit as without it
    run_suite cuda-graph-bit-exact bash tests/gpu/check_graph.sh
    # -fp8 1 (BF16 builds on Hopper): near BF16's losses, deterministic, resumed bit for bit; refused elsewhere
    run_suite fp8-training bash tests/gpu/check_fp8_train.sh
    # a GEMM tuning run records every shape; runs that read its file repeat bit for bit; foreign files are refused
    run_suite gemm-algorithm-files bash tests/gpu/check_gemm_algos.sh
    # runs never mix or lose checkpoints: -nk, a fresh run among another's, -ow 1, a mixed pair, stale temporaries
    run_suite checkpoint-directory bash tests/gpu/check_checkpoint_dir.sh
    # FP32 builds: the CPU trainer and the GPU trainer from the same checkpoint, 10 steps within 1e-4, and each
    # resuming the other's checkpoint
    [ "${PRECISION:-BF16}" = FP32 ] && run_suite cpu-vs-gpu-fp32 bash tests/gpu/check_cpu_gpu.sh
    # The d12 (124M) reference is made here, never committed: PyTorch pre-trains it 300 steps on Tiny
    # Shakespeare so activations and gradients are realistic, then writes the files test_gpt2cu reads.
    if python3 -c "import torch" 2>/dev/null; then
        d12=ref/d12
        # remade when missing or older than the script that writes it (a reference from an older script may lack a file)
        if [ $needs_d12 = 1 ] && { [ ! -f ${d12}_bf16_error.txt ] || [ scripts/reference/train_gpt2.py -nt ${d12}_bf16_error.txt ]; }; then
            PREREQ=1 run_suite d12-reference-make python3 scripts/reference/train_gpt2.py --preset d12 -b 4 -t 64 --pretrain-steps 300 \
                --pretrain-data data/tinyshakespeare/tiny_shakespeare_train.bin -o $d12
        fi
        for backend in $backends; do
            run_suite "gpu-reference-d12-$backend" ./test_gpt2cu $d12 --backend "$backend"
        done
        # on sm_90 the GELU backward and its recompute run in the Hopper kernel (llmc/kernels/matmul/matmul_hopper_dgelu.cuh); this
        # run keeps the GELU kernel and cuBLASLt's epilogues, the path off Hopper (elsewhere it is the same run again)
        [ "${PRECISION:-BF16}" = BF16 ] && LLMC_HOPPER_DGELU=0 run_suite gpu-reference-d12-flash-cublas-dgelu \
            ./test_gpt2cu $d12 --backend flash
        # generate_gpt2cu's greedy text against transformers' generate on the d12 (identical in FP32; in BF16 up
        # to the first near-tie), and each prompt alone against the batch
        if python3 -c "import transformers, tiktoken" 2>/dev/null; then
            run_suite generate-vs-transformers python3 tests/gpu/check_generate_hf.py --precision "${PRECISION:-BF16}" \
                --model ${d12}_model.bin --out ref/generate_check
            # the trainer's HellaSwag picks (-h 1) against transformers' on the d12, item by item, on an eval file
            # made from Tiny Shakespeare through data/hellaswag (FP32: every pick; BF16: all but near-ties)
            run_suite hellaswag-vs-transformers python3 tests/gpu/check_hellaswag_hf.py --precision "${PRECISION:-BF16}" \
                --model ${d12}_model.bin --out ref/hellaswag_check
        else
            skipped+=("generate and HellaSwag vs transformers (no transformers/tiktoken)")
        fi
        # the server against generate_gpt2cu on the d12: each greedy response equal up to near-ties (FP32: 0.001
        # nats), alone vs in a batch, streams, stop strings, logprobs, every bad-input case, a client leaving, SIGTERM
        if [ "${SERVE_TESTS:-0}" = 1 ] && [ -x ./serve_gpt2cu ]; then
            run_suite serve-vs-generate python3 tests/serving/check_serve.py --model ${d12}_model.bin --vocab-dir data/cache/gpt2 \
                --out ref/serve_check $([ "${PRECISION:-BF16}" = FP32 ] && echo --near-tie 0.001)
            # the same with every prompt over 8 tokens prefilled in chunks of 8, each continuing the cached prefix
            run_suite serve-vs-generate-chunks python3 tests/serving/check_serve.py --model ${d12}_model.bin \
                --vocab-dir data/cache/gpt2 --out ref/serve_check_chunks --server-args "--prefill-chunk 8" \
                --skip-small-server $([ "${PRECISION:-BF16}" = FP32 ] && echo --near-tie 0.001)
            # the playground page in headless Chromium against the GPU server (a long greedy completion, so a look
            # may catch it streaming; the screenshot goes to ref/page_check)
            if command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null; then
                run_suite page-vs-server python3 tests/serving/check_page.py --model ${d12}_model.bin \
                    --vocab-dir data/cache/gpt2 --max-tokens 512 --screenshot ref/page_check/page.png --out ref/page_check
            else
                [ "${COUNT_ONLY:-0}" = 1 ] || skipped+=("the page in a browser on the GPU server (no Chromium)")
            fi
        fi
    else
        [ "${COUNT_ONLY:-0}" = 1 ] || echo "note: python3 with PyTorch not found: the d12 reference suites are skipped"
        skipped+=("d12 reference (no PyTorch)")
    fi
fi

if [ "${COUNT_ONLY:-0}" = 1 ]; then
    skipped=("${skipped_before_gpu[@]}")  # notes from the counted-only GPU block are not about this machine
    unset COUNT_ONLY
fi
[ ${#failed_names[@]} -gt 0 ] && echo "failed suites: ${failed_names[*]}"
[ ${#skipped[@]} -gt 0 ] && echo "skipped: ${skipped[*]}"
[ $deselected -gt 0 ] && echo "TEST_ONLY='$TEST_ONLY': $deselected suites not selected"
summary="tests: $passed passed, $failed failed"
[ $gpu_not_run -gt 0 ] && summary+=", $gpu_not_run GPU suites skipped (no GPU visible)"
[ ${#skipped[@]} -gt 0 ] && summary+=", ${#skipped[@]} other skipped"
echo "$summary"
[ "$failed" -eq 0 ]
