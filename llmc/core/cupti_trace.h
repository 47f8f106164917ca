// Every kernel, copy and memset the GPU runs between start() and stop(), with start and end times, through CUPTI's
// activity API (what PyTorch's profiler and Nsight Systems read; nsys is not on every machine). CUPTI is loaded at
// run time (dlopen), so programs need no CUPTI to build or run and only a trace asks for it; LLMC_CUPTI_LIB names the
// library when it is not on the loader's path. The records go to llmc/core/timeline.h for the arithmetic.
//
//   CuptiTrace t;  t.start();  ...queue and finish GPU work...  t.stop();  t.records, t.now()
// NCCL kernels are communication; so is every copy or memset on the stream NCCL kernels run on.
#pragma once

#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "llmc/core/timeline.h"

#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>
#define LLMC_HAVE_CUPTI_HEADER 1
#endif

namespace cupti_trace_detail {

// "ns::kernel_name<...>(args)" -> "ns::kernel_name": one row per kernel whatever its template arguments.
inline std::string short_name(const char* mangled) {
    int status = 0;
    char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : mangled;
    free(d);
    std::string out;
    int depth = 0;
    for (char c : s) {
        if (c == '(' && depth == 0) break;
        if (c == '<') depth++;
        else if (c == '>') depth--;
        else if (depth == 0) out += c;
    }
    if (out.rfind("void ", 0) == 0) out = out.substr(5);
    return out;
}

}  // namespace cupti_trace_detail

#ifdef LLMC_HAVE_CUPTI_HEADER

struct CuptiTrace {
    std::vector<TimelineRecord> records;

    // Loads CUPTI and starts recording; an error names what is missing, in one line, and exits.
    void start() {
        Api& a = api();
        records.clear();
        state().out = &records;
        check(a.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(kernels)");
        check(a.enable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(memcpy)");
        check(a.enable(CUPTI_ACTIVITY_KIND_MEMSET), "cuptiActivityEnable(memset)");
    }
    // After the GPU has finished the traced work (synchronize first): every record is in `records`.
    void stop() {
        Api& a = api();
        check(a.flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
        a.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        a.disable(CUPTI_ACTIVITY_KIND_MEMCPY);
        a.disable(CUPTI_ACTIVITY_KIND_MEMSET);
        check(a.flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
        std::lock_guard<std::mutex> lock(state().mutex);
        state().out = nullptr;
        // communication: NCCL's kernels, copies between GPUs, and whatever else ran on their streams
        std::set<uint32_t> comm_streams;
        for (const TimelineRecord& r : records)
            if (r.name.rfind("nccl", 0) == 0 || r.name == "memcpy PtoP") comm_streams.insert(r.stream);
        for (TimelineRecord& r : records) r.comm = comm_streams.count(r.stream) > 0;
    }
    // CUPTI's clock (ns), the one the records use.
    uint64_t now() {
        uint64_t t = 0;
        check(api().timestamp(&t), "cuptiGetTimestamp");
        return t;
    }

  private:
    struct Api {
        CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
        CUptiResult (*enable)(CUpti_ActivityKind);
        CUptiResult (*disable)(CUpti_ActivityKind);
        CUptiResult (*flush)(uint32_t);
        CUptiResult (*next)(uint8_t*, size_t, CUpti_Activity**);
        CUptiResult (*timestamp)(uint64_t*);
        CUptiResult (*result_string)(CUptiResult, const char**);
    };
    struct State {
        std::mutex mutex;
        std::vector<TimelineRecord>* out = nullptr;
    };
    static State& state() {
        static State s;
        return s;
    }

    static void check(CUptiResult r, const char* what) {
        if (r == CUPTI_SUCCESS) return;
        const char* text = "unknown";
        if (lib().result_string) lib().result_string(r, &text);
        fprintf(stderr, "error: LLMC_TRACE: %s failed: %s\n", what, text);
        exit(EXIT_FAILURE);
    }

    static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
        constexpr size_t kBytes = 8u << 20;
        *buffer = (uint8_t*)aligned_alloc(8, kBytes);
        *size = *buffer ? kBytes : 0;
        *max_records = 0;
    }
    static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
        std::lock_guard<std::mutex> lock(state().mutex);
        CUpti_Activity* rec = nullptr;
        while (state().out && api().next(buffer, valid, &rec) == CUPTI_SUCCESS) {
            TimelineRecord r;
            if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
                const auto* k = (const CUpti_ActivityKernel10*)rec;
                r.name = cupti_trace_detail::short_name(k->name), r.stream = k->streamId;
                r.start = k->start, r.end = k->end;
            } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
                const auto* m = (const CUpti_ActivityMemcpy6*)rec;
                // between GPUs: the copy engines' exchange (llmc/distributed/peer_copy.cuh)
                r.name = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_PTOP ? "memcpy PtoP" : "memcpy";
                r.stream = m->streamId, r.start = m->start, r.end = m->end;
            } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
                const auto* m = (const CUpti_ActivityMemset4*)rec;
                r.name = "memset " + std::to_string(m->bytes) + " B";
                r.stream = m->streamId, r.start = m->start, r.end = m->end;
            } else {
                continue;
            }
            state().out->push_back(r);
        }
        free(buffer);
    }

    static Api& lib() {
        static Api a = [] {
            Api x{};
            const char* env = getenv("LLMC_CUPTI_LIB");
            const std::vector<std::string> names = env && *env ? std::vector<std::string>{env}
                : std::vector<std::string>{"libcupti.so", "libcupti.so.13", "libcupti.so.12",
                                           "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
                                           "/usr/local/cuda/lib64/libcupti.so", "/usr/local/cuda/lib/libcupti.so"};
            void* lib = nullptr;
            for (const std::string& n : names)
                if ((lib = dlopen(n.c_str(), RTLD_NOW | RTLD_GLOBAL))) break;
            if (!lib) {
                fprintf(stderr, "error: LLMC_TRACE: CUPTI (libcupti.so) not found; set LLMC_CUPTI_LIB to its path\n");
                exit(EXIT_FAILURE);
            }
            auto get = [&](auto& fn, const char* name) {
                fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
                if (!fn) {
                    fprintf(stderr, "error: LLMC_TRACE: CUPTI has no %s\n", name);
                    exit(EXIT_FAILURE);
                }
            };
            get(x.register_callbacks, "cuptiActivityRegisterCallbacks");
            get(x.enable, "cuptiActivityEnable");
            get(x.disable, "cuptiActivityDisable");
            get(x.flush, "cuptiActivityFlushAll");
            get(x.next, "cuptiActivityGetNextRecord");
            get(x.timestamp, "cuptiGetTimestamp");
            get(x.result_string, "cuptiGetResultString");
            return x;
        }();
        return a;
    }
    // The library with the buffer callbacks registered (once).
    static Api& api() {
        static const bool registered = [] {
            check(lib().register_callbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
            return true;
        }();
        (void)registered;
        return lib();
    }
};

#else  // no CUPTI header at build time

struct CuptiTrace {
    std::vector<TimelineRecord> records;
    void start() {
        fprintf(stderr, "error: LLMC_TRACE: this build found no cupti_activity.h (CUDA's CUPTI headers)\n");
        exit(EXIT_FAILURE);
    }
    void stop() {}
    uint64_t now() { return 0; }
};

#endif
