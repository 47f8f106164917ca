// Shared by the flag-parser tests (test_train_args.cpp, test_generate_args.cpp): run a parser on a command line,
// and require that a command line is rejected with one line that contains a given text.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "llmc/core/flag_parse.h"

template <typename Args>
struct ParsedFlags {
    ParseStatus status;
    Args args;
    std::string error;
};

// parser: ParseStatus(int argc, const char* const* argv, Args*, std::string* error); argv[0] is `program`.
template <typename Args, typename Parser>
ParsedFlags<Args> parse_flags(Parser&& parser, const char* program, const std::vector<std::string>& flags) {
    std::vector<const char*> argv = {program};
    for (const std::string& f : flags) argv.push_back(f.c_str());
    ParsedFlags<Args> p;
    p.status = parser((int)argv.size(), argv.data(), &p.args, &p.error);
    return p;
}

// The command line must be rejected with a one-line message containing `expect` (which names the flag).
template <typename Args>
void expect_rejected_flags(const ParsedFlags<Args>& p, const std::vector<std::string>& flags, const std::string& expect) {
    std::string joined;
    for (const std::string& f : flags) joined += f + " ";
    EXPECT_EQ(p.status, ParseStatus::Error) << joined;
    EXPECT_NE(p.error.find(expect), std::string::npos) << joined << "-> '" << p.error << "' lacks '" << expect << "'";
    EXPECT_EQ(p.error.find('\n'), std::string::npos) << p.error;
}
