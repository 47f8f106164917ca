// HellaSwag as published (rowanz/hellaswag's hellaswag_{train,val}.jsonl: one object per line with "ind",
// "activity_label", "ctx_a", "ctx_b", "ctx", "split", "split_type", "label", "endings", "source_id") -> the examples
// of llm.c's eval file (llmc/formats/eval_file.h), rendered exactly as llm.c's dev/data/hellaswag.py does:
//   - only "ctx", "endings" and "label" are used (llm.c ignores ctx_a, ctx_b and activity_label too);
//   - the context is encode(ctx), each ending encode(" " + ending) (the leading space: GPT-2's words carry the
//     space before them), with tiktoken's encode, which refuses "<|endoftext|>" in the text, so we refuse it too;
//   - endings: exactly 4 strings (write_evalfile asserts 4); label: an integer in [0, 4).
// parse_hellaswag_line does no I/O; every problem is one FileError "<file>: line N: <field>: <problem>".
// Not lm-evaluation-harness's rendering (activity label + ": " + ctx_a + " " + ctx_b.capitalize(), preprocessed).
#pragma once

#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "llmc/core/utils.h"
#include "llmc/formats/eval_file.h"
#include "llmc/formats/json_reader.h"
#include "llmc/formats/tokenizer_file.h"
#include "llmc/tokenizer/bpe_encoder.h"

constexpr int kHellaSwagEndings = 4;

struct HellaSwagItem {
    std::string ctx;
    std::vector<std::string> endings;
    int label = -1;
};

// One JSONL line (not blank) -> its item. line_no names the line in errors.
inline HellaSwagItem parse_hellaswag_line(std::string_view line, const std::string& path, size_t line_no) {
    HellaSwagItem item;
    bool has_ctx = false, has_endings = false, has_label = false;
    std::unordered_set<std::string> keys;
    auto fail = [&](const std::string& field, const std::string& problem) {
        file_error(path, "line %zu: %s: %s", line_no, printable_bytes(field).c_str(), problem.c_str());
    };
    JsonCursor cur(line);
    // One member's value, the cursor on it.
    auto parse_member = [&](const std::string& key) {
        if (key == "ctx") {
            if (cur.peek() != '"') fail("ctx", "not a string");
            item.ctx = cur.parse_string();
            has_ctx = true;
        } else if (key == "endings") {
            if (cur.peek() != '[') fail("endings", "not an array (of 4 strings)");
            cur.expect('[');
            if (!cur.accept(']')) {
                do {
                    if (cur.peek() != '"') fail("endings", "ending " + std::to_string(item.endings.size()) + " is not a string");
                    item.endings.push_back(cur.parse_string());
                } while (cur.accept(','));
                cur.expect(']');
            }
            has_endings = true;
        } else if (key == "label") {
            const char c = cur.peek();
            if (c != '-' && (c < '0' || c > '9')) fail("label", "not an integer");
            const int64_t label = cur.parse_int();
            if (label < 0 || label >= kHellaSwagEndings) {
                fail("label", std::to_string(label) + " is not in [0, " + std::to_string(kHellaSwagEndings) + ")");
            }
            item.label = (int)label;
            has_label = true;
        } else {
            cur.skip_value();
        }
    };
    try {
        if (line_no == 1) cur.skip_byte_order_mark();
        cur.for_each_member([&](std::string& key) {
            if (!keys.insert(key).second) fail(key, "the key appears twice");
            try {
                parse_member(key);
            } catch (const JsonError& e) {
                fail(key, e.what());  // the field's value is not valid JSON
            }
        });
        cur.expect_end();
    } catch (const JsonError& e) {
        file_error(path, "line %zu: %s", line_no, e.what());
    }
    if (!has_ctx) fail("ctx", "missing");
    if (!has_endings) fail("endings", "missing");
    if (!has_label) fail("label", "missing (the test split has no labels)");
    if (item.endings.size() != (size_t)kHellaSwagEndings) {
        fail("endings", std::to_string(item.endings.size()) + " endings, expected " + std::to_string(kHellaSwagEndings));
    }
    return item;
}

// The item as llm.c's render_example tokenizes it (ctx_tokens, ending_tokens, label). line_no names the line.
inline EvalExample render_hellaswag(const HellaSwagItem& item, BPEEncoder& enc, const std::string& path, size_t line_no) {
    auto tokens = [&](const std::string& text, const std::string& field) {
        if (text.find(BPETokenizer::kEndOfText) != std::string::npos) {
            file_error(path, "line %zu: %s: contains <|endoftext|>, which llm.c's hellaswag.py (tiktoken's encode) refuses",
                       line_no, field.c_str());
        }
        std::vector<uint16_t> out;
        for (int id : enc.encode_ordinary(text)) {
            if (id >= kEvalTokenLimit) file_error(path, "line %zu: %s: token %d does not fit the eval file", line_no, field.c_str(), id);
            out.push_back((uint16_t)id);
        }
        return out;
    };
    EvalExample e;
    e.label = item.label;
    e.context = tokens(item.ctx, "ctx");
    if (e.context.empty()) file_error(path, "line %zu: ctx: empty (llm.c's eval loader needs a context)", line_no);
    for (size_t c = 0; c < item.endings.size(); c++) {
        e.endings.push_back(tokens(" " + item.endings[c], "endings[" + std::to_string(c) + "]"));
    }
    const int64_t bytes = eval_example_bytes(e);
    if (bytes > kEvalMaxExampleBytes) {
        file_error(path, "line %zu: the example takes %lld bytes, more than the eval file's %d", line_no, (long long)bytes,
                   kEvalMaxExampleBytes);
    }
    return e;
}
