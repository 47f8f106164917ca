// The checkpoint files of a run in its output directory: their names, which steps are complete, which to keep.
//
// A checkpoint after `step` completed optimizer steps is the pair
//   <dir>/model_%08d.bin   the weights (llmc/model_file.h, llm.c-compatible)
//   <dir>/state_%08d.bin   the run state (llmc/run_state.h)
// The trainer writes the model first and the state last, each atomically, so the state file marks a complete
// pair: resume picks the newest step that has both.
#pragma once

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "utils.h"

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

// Steps that have both a model and a state file, ascending. A missing directory has none.
inline std::vector<int> list_complete_checkpoints(const std::string& dir) {
    std::vector<int> models, states, both;
    DIR* d = opendir(dir.c_str());
    if (!d) {
        if (errno == ENOENT) return both;
        file_error(dir, "cannot list directory (%s)", strerror(errno));
    }
    while (struct dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        int s;
        if ((s = checkpoint_step_of(name, "model")) >= 0) models.push_back(s);
        if ((s = checkpoint_step_of(name, "state")) >= 0) states.push_back(s);
    }
    closedir(d);
    std::sort(models.begin(), models.end());
    std::sort(states.begin(), states.end());
    std::set_intersection(models.begin(), models.end(), states.begin(), states.end(), std::back_inserter(both));
    return both;
}

// Newest complete checkpoint step, or -1.
inline int latest_checkpoint(const std::string& dir) {
    std::vector<int> steps = list_complete_checkpoints(dir);
    return steps.empty() ? -1 : steps.back();
}

// Keeps the newest `keep` complete checkpoints (0 = keep all) and removes the older ones, state first
// so an interrupted removal never leaves a state file without its model.
inline void remove_old_checkpoints(const std::string& dir, int keep) {
    if (keep <= 0) return;
    std::vector<int> steps = list_complete_checkpoints(dir);
    for (size_t i = 0; i + (size_t)keep < steps.size(); i++) {
        for (const std::string& p : {checkpoint_state_path(dir, steps[i]), checkpoint_model_path(dir, steps[i])}) {
            if (remove(p.c_str()) != 0 && errno != ENOENT) file_error(p, "cannot remove old checkpoint (%s)", strerror(errno));
        }
    }
}
