// The checkpoint files of a run in its output directory: their names, which pairs are complete and belong
// together, whose run they are, which to keep.
//
// A checkpoint after `step` completed optimizer steps is the pair
//   <dir>/model_%08d.bin   the weights (llmc/formats/model_file.h, llm.c-compatible)
//   <dir>/state_%08d.bin   the run state (llmc/formats/run_state.h)
// The trainer writes the model first and the state last, each atomically (a temporary file renamed into place),
// so the state file marks a complete pair. The state carries the model file's fingerprint (file_hash64) and the
// id of the run that wrote it: a state never pairs with a model file another run or a later crash left under the
// same name, and a run deletes (-nk) only its own older checkpoints.
#pragma once

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "llmc/core/process.h"
#include "llmc/core/rand.h"
#include "llmc/core/utils.h"
#include "llmc/formats/run_state.h"

inline std::string checkpoint_file(const std::string& dir, const char* kind, int step) {
    char name[64];
    snprintf(name, sizeof(name), "%s_%08d.bin", kind, step);
    return dir + "/" + name;
}
inline std::string checkpoint_model_path(const std::string& dir, int step) { return checkpoint_file(dir, "model", step); }
inline std::string checkpoint_state_path(const std::string& dir, int step) { return checkpoint_file(dir, "state", step); }

// "<kind>_NNNNNNNN.bin" -> NNNNNNNN, else -1.
inline int checkpoint_step_of(const std::string& name, const std::string& kind) {
    const std::string prefix = kind + "_";
    if (name.size() != prefix.size() + 8 + 4 || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - 4, 4, ".bin") != 0) {
        return -1;
    }
    int step = 0;
    for (size_t i = prefix.size(); i < prefix.size() + 8; i++) {
        if (name[i] < '0' || name[i] > '9') return -1;
        step = step * 10 + (name[i] - '0');
    }
    return step;
}

// The names in `dir` (none for a missing directory).
inline std::vector<std::string> list_directory(const std::string& dir) {
    std::vector<std::string> names;
    DIR* d = opendir(dir.c_str());
    if (!d) {
        if (errno == ENOENT) return names;
        file_error(dir, "cannot list directory (%s)", strerror(errno));
    }
    while (struct dirent* e = readdir(d)) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    return names;
}

// Steps that have both a model and a state file, ascending (whether or not they belong together).
inline std::vector<int> list_complete_checkpoints(const std::string& dir) {
    std::vector<int> models, states, both;
    for (const std::string& name : list_directory(dir)) {
        int s;
        if ((s = checkpoint_step_of(name, "model")) >= 0) models.push_back(s);
        if ((s = checkpoint_step_of(name, "state")) >= 0) states.push_back(s);
    }
    std::set_intersection(models.begin(), models.end(), states.begin(), states.end(), std::back_inserter(both));
    return both;
}

// Whether the pair at `step` belongs together: its state file reads and carries the model file's fingerprint
// (a version 1 state carries none and is taken on trust). *why says what is wrong.
inline bool checkpoint_is_consistent(const std::string& dir, int step, std::string* why) {
    try {
        const RunState s = read_run_state_header(checkpoint_state_path(dir, step));
        if (s.model_hash != 0 && s.model_hash != file_hash64(checkpoint_model_path(dir, step))) {
            *why = checkpoint_model_path(dir, step) + " is not the model file its state was written with";
            return false;
        }
        return true;
    } catch (const FileError& e) {
        *why = e.what();
        return false;
    }
}

// The newest checkpoint whose pair belongs together, or -1; each newer pair skipped adds a note saying why.
inline int latest_checkpoint(const std::string& dir, std::vector<std::string>* notes) {
    const std::vector<int> steps = list_complete_checkpoints(dir);
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
        std::string why;
        if (checkpoint_is_consistent(dir, *it, &why)) return *it;
        notes->push_back("skipping checkpoint " + std::to_string(*it) + ": " + why);
    }
    return -1;
}

// The run id in the state file of `step`, or 0 if it cannot be read.
inline uint64_t checkpoint_run_id(const std::string& dir, int step) {
    try {
        return read_run_state_header(checkpoint_state_path(dir, step)).run_id;
    } catch (const FileError&) {
        return 0;
    }
}

// Keeps the newest `keep` complete checkpoints of run `run_id` (0 = keep all) and removes its older ones, state
// first so an interrupted removal never leaves a state file without its model. Other runs' files stay.
inline void remove_old_checkpoints(const std::string& dir, int keep, uint64_t run_id) {
    if (keep <= 0) return;
    std::vector<int> ours;
    for (int step : list_complete_checkpoints(dir)) {
        if (checkpoint_run_id(dir, step) == run_id) ours.push_back(step);
    }
    for (size_t i = 0; i + (size_t)keep < ours.size(); i++) {
        for (const std::string& p : {checkpoint_state_path(dir, ours[i]), checkpoint_model_path(dir, ours[i])}) {
            if (remove(p.c_str()) != 0 && errno != ENOENT) file_error(p, "cannot remove old checkpoint (%s)", strerror(errno));
        }
    }
}

// An id for a fresh run, different for every run (also for runs with the same seed); never 0.
inline uint64_t new_run_id() {
    std::random_device device;
    const uint64_t t = (uint64_t)std::chrono::system_clock::now().time_since_epoch().count();
    const uint64_t id = mix_seed(((uint64_t)device() << 32 | device()) ^ t, (uint64_t)getpid());
    return id ? id : 1;
}

inline std::string run_id_hex(uint64_t id) {
    char buf[17];
    snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)id);
    return buf;
}

// Why a fresh run must not start in `dir` ("" if it may): it holds checkpoints, so another run's files (and its
// main.log) would be mixed with or overwritten by this one's.
inline std::string fresh_run_conflict(const std::string& dir) {
    const std::vector<int> steps = list_complete_checkpoints(dir);
    if (steps.empty()) return "";
    return "flag -o " + dir + ": holds checkpoints of another run (steps " + std::to_string(steps.front()) + ".." +
           std::to_string(steps.back()) + "); resume it with -y 1, write to another -o, or delete them and start " +
           "over with -ow 1";
}

// Removes every checkpoint file (model_*.bin, state_*.bin) in `dir`, for a fresh run asked to replace another
// run's (-ow 1); returns how many.
inline int remove_all_checkpoints(const std::string& dir) {
    int removed = 0;
    for (const std::string& name : list_directory(dir)) {
        if (checkpoint_step_of(name, "model") < 0 && checkpoint_step_of(name, "state") < 0) continue;
        const std::string p = dir + "/" + name;
        if (remove(p.c_str()) != 0) file_error(p, "cannot remove checkpoint (%s)", strerror(errno));
        removed++;
    }
    return removed;
}

// Temporary files "<name>.tmp.<pid>" that a writer (AtomicOutputFile) left behind when it crashed or was killed
// (a rank stopped by the watchdog mid-write, llmc/distributed/rank_watchdog.h): removed when process <pid> is gone
// (or a zombie), left alone while it runs. One note per file. No reader ever takes one for a checkpoint.
inline std::vector<std::string> clean_stale_temporaries(const std::string& dir) {
    std::vector<std::string> notes;
    for (const std::string& name : list_directory(dir)) {
        const size_t at = name.rfind(".tmp.");
        if (at == std::string::npos || at + 5 >= name.size()) continue;
        const std::string digits = name.substr(at + 5);
        if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
        const long pid = strtol(digits.c_str(), nullptr, 10);
        const std::string path = dir + "/" + name;
        if (process_alive((pid_t)pid)) {
            notes.push_back("leaving " + path + ": process " + digits + " is still writing it");
        } else if (remove(path.c_str()) == 0) {
            notes.push_back("removed " + path + ", left by a writer that crashed (process " + digits + " is gone)");
        } else {
            notes.push_back("cannot remove " + path + " (" + strerror(errno) + "); ignoring it");
        }
    }
    return notes;
}
