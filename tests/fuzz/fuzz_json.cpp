// Fuzzes the JSON reader (llmc/formats/json_reader.h: encoder.json, JSONL, config.json, safetensors headers). The first
// byte picks how the rest is read: 0 any value (what a JSONL field skips), 1 an object of string -> integer
// (encoder.json), 2 a sequence of strings, 3 a sequence of integers. Expected: JsonError.
// Findings: a crash or sanitizer report (deep nesting included), another exception, a leak, a hang, a
// parsed string that is not valid UTF-8, or one that does not parse back to itself once quoted again.
#include <cstdio>

#include "llmc/formats/json_reader.h"
#include "tests/fuzz/fuzz_common.h"

// s as a JSON string: quotes, backslashes and control characters escaped, the rest (valid UTF-8) as it is.
static std::string quote(const std::string& s) {
    std::string q = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            q += '\\';
            q += (char)c;
        } else if (c < 0x20) {
            char buf[8];
            snprintf(buf, sizeof(buf), "\\u%04x", c);
            q += buf;
        } else {
            q += (char)c;
        }
    }
    return q + "\"";
}

static void check_string(const std::string& s) {
    FUZZ_REQUIRE(fuzz::is_valid_utf8(s, false), "parse_string returned invalid UTF-8");
    const std::string q = quote(s);
    JsonCursor again(q);
    FUZZ_REQUIRE(again.parse_string() == s && again.at_end(), "a parsed string does not parse back once quoted");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const int mode = data[0] % 4;
    JsonCursor cur(std::string_view((const char*)data + 1, size - 1));
    try {
        cur.skip_byte_order_mark();
        switch (mode) {
            case 0:
                cur.skip_value();
                if (!cur.at_end()) cur.fail("trailing characters");
                break;
            case 1:
                cur.expect('{');
                if (!cur.accept('}')) {
                    do {
                        check_string(cur.parse_string());
                        cur.expect(':');
                        cur.parse_int();
                    } while (cur.accept(','));
                    cur.expect('}');
                }
                break;
            case 2:
                while (!cur.at_end()) check_string(cur.parse_string());
                break;
            case 3:
                while (!cur.at_end()) {
                    cur.parse_int();
                    cur.accept(',');
                }
                break;
        }
    } catch (const JsonError& e) {
        FUZZ_REQUIRE(e.offset <= size - 1, "error offset %zu past the end (%zu bytes)", e.offset, size - 1);
    }
    return 0;
}
