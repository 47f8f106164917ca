// What every program prints for --version: its name, the commit it was built from (the Makefile passes
// `git describe --always --dirty` as LLMC_VERSION; outside a git checkout it says so) and, for the CUDA programs,
// the precision of the build. tests/cli/test_cli_style.sh runs each program's --help and --version.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#ifndef LLMC_VERSION
#define LLMC_VERSION "unknown (not built by make)"
#endif

// "train_gpt2cu 38c4e10-dirty (bf16)"; detail (the precision) in parentheses when given.
inline std::string version_line(const std::string& program, const std::string& detail = "") {
    return program + " " + LLMC_VERSION + (detail.empty() ? "" : " (" + detail + ")");
}

// --help and --version for the programs without a flag parser of llmc/ (tokenizer, data/prepro, data/hellaswag,
// gpt2_convert, test_gpt2, test_gpt2cu): printed on stdout, exit 0; any other argument returns.
inline void exit_on_help_or_version(const std::string& arg, const char* usage, const char* program,
                                    const std::string& detail = "") {
    if (arg == "-h" || arg == "--help") {
        fputs(usage, stdout);
        exit(0);
    }
    if (arg == "--version") {
        printf("%s\n", version_line(program, detail).c_str());
        exit(0);
    }
}
