// Fuzzes the data loader (llmc/data/dataloader.h) over 1..4 token shards and its saved state: settings, an
// optional DataLoaderState (as a run-state file hands it over) and the shards come from the input
// (fuzz_inputs.h); the shards are written as files and the loader finds them by a glob, as the trainer does.
// Expected: FileError (shards, tokens >= vocab_size) and std::invalid_argument (bad settings or state,
// as documented).
// Findings: a crash or sanitizer report, another exception, a leak, a batch that is not the shard's tokens at
// the reported offset (or whose targets are not the inputs shifted by one), an epoch that does not visit
// every window exactly once or wraps at the wrong batch, or a get_state/set_state round trip that does not
// continue with the same batches.
#include <memory>
#include <set>
#include <stdexcept>
#include <utility>

#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_inputs.h"

// true if fn returned; false on the loader's documented errors.
template <typename Fn>
static bool loader_accepts(Fn&& fn) {
    try {
        return fuzz::accepts(fn);
    } catch (const std::invalid_argument&) {
        return false;
    }
}

static void check_batch(const DataLoader& d, int B, int T, int vocab_size) {
    const int64_t BT = (int64_t)B * T;
    std::vector<uint16_t> expect((size_t)BT + 1);
    read_shard_tokens(d.current_shard_path(), d.current_token_offset(), BT + 1, expect.data());
    for (int64_t i = 0; i < BT; i++) {
        FUZZ_REQUIRE(d.inputs()[i] == expect[(size_t)i] && d.targets()[i] == expect[(size_t)i + 1],
                     "batch token %lld is not the shard's token at offset %lld", (long long)i,
                     (long long)d.current_token_offset() + i);
        FUZZ_REQUIRE(vocab_size < 0 || d.targets()[i] < vocab_size, "token %d >= vocab_size %d passed", d.targets()[i],
                     vocab_size);
    }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const fuzz::LoaderInput in = fuzz::unpack_loader_input(data, size);
    static size_t files_written = 0;
    for (size_t i = 0; i < std::max(files_written, in.shards.size()); i++) {
        const std::string name = "shard_" + std::to_string(i) + ".bin";
        if (i < in.shards.size()) fuzz::write_scratch_file(name, in.shards[i]);
        else remove((fuzz::scratch_dir() + "/" + name).c_str());
    }
    files_written = in.shards.size();
    const std::string pattern = fuzz::scratch_dir() + "/shard_*.bin";
    auto make = [&] {
        return std::make_unique<DataLoader>(pattern, in.B, in.T, in.process_rank, in.num_processes, in.shuffle, in.seed,
                                            in.vocab_size, in.micro_steps);
    };
    std::unique_ptr<DataLoader> d;
    if (!loader_accepts([&] { d = make(); })) return 0;

    if (in.restore) {  // a saved state from a file: set_state either refuses it or continues from it
        if (!loader_accepts([&] { d->set_state(in.state); })) return 0;
        for (int i = 0; i < in.steps && loader_accepts([&] { d->next_batch(); }); i++) {
            check_batch(*d, in.B, in.T, in.vocab_size);
        }
        return 0;
    }

    const size_t per_epoch = d->num_batches_per_epoch();
    FUZZ_REQUIRE(per_epoch >= 1, "no batches per epoch");
    std::set<std::pair<std::string, int64_t>> seen;  // the windows of epoch 0
    int loaded = 0;
    bool failed = false;  // a batch with a token >= vocab_size: the position is past it, nothing to restore
    for (; loaded < in.steps; loaded++) {
        bool wrapped = false;
        if (!fuzz::accepts([&] { wrapped = d->next_batch(); })) {
            failed = true;
            break;
        }
        FUZZ_REQUIRE(wrapped == (loaded > 0 && loaded % per_epoch == 0), "batch %d: wrapped=%d with %zu batches an epoch",
                     loaded, (int)wrapped, per_epoch);
        FUZZ_REQUIRE(d->epoch() == (int)(loaded / per_epoch), "batch %d is in epoch %d", loaded, d->epoch());
        check_batch(*d, in.B, in.T, in.vocab_size);
        if ((size_t)loaded < per_epoch) {
            FUZZ_REQUIRE(seen.emplace(d->current_shard_path(), d->current_token_offset()).second,
                         "epoch 0 visits %s offset %lld twice", d->current_shard_path().c_str(),
                         (long long)d->current_token_offset());
        }
    }
    if (loaded == 0 || failed) return 0;
    // between steps only (a window's last micro-batch); mid-window get_state refuses
    if (loaded % in.micro_steps != 0) {
        bool refused = false;
        try {
            d->get_state();
        } catch (const std::logic_error&) {
            refused = true;
        }
        FUZZ_REQUIRE(refused, "get_state in the middle of a window");
        return 0;
    }

    // Save, restore into a fresh loader, and both must go on alike.
    const DataLoaderState s = d->get_state();
    std::unique_ptr<DataLoader> e = make();
    e->set_state(s);
    for (int i = 0; i < 3; i++) {
        const std::vector<int> a(d->inputs(), d->inputs() + (size_t)in.B * in.T);
        const std::vector<int> b(e->inputs(), e->inputs() + (size_t)in.B * in.T);
        FUZZ_REQUIRE(a == b && d->current_token_offset() == e->current_token_offset() &&
                         d->current_shard_path() == e->current_shard_path(),
                     "a restored loader's batch %d differs", i);
        const bool d_ok = fuzz::accepts([&] { d->next_batch(); });
        const bool e_ok = fuzz::accepts([&] { e->next_batch(); });
        FUZZ_REQUIRE(d_ok == e_ok, "the original and the restored loader disagree on an error");
        if (!d_ok) break;
    }
    return 0;
}
