// A completion's text (llmc/serving/completion_text.h): invalid UTF-8 replaced as Python's
// bytes.decode(errors="replace") does, pieces handed out one by one that join to the whole, characters never cut,
// stop strings found across token boundaries and left out, text that may start a stop string held back; and a
// randomised comparison with a direct reference (join everything, cut at the first stop, sanitise).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/serving/completion_text.h"

namespace {

const std::string kFFFD = "\xEF\xBF\xBD";

// The outcome of feeding tokens one by one: the pieces taken after each, the finish, and the token that stopped it.
struct Fed {
    std::vector<std::string> pieces;
    std::string text;
    int stopped_at = -1;
};

Fed feed(const std::vector<std::string>& tokens, const std::vector<std::string>& stops) {
    CompletionText t(stops);
    Fed f;
    for (size_t i = 0; i < tokens.size(); i++) {
        const bool stop = t.add(tokens[i]);
        f.pieces.push_back(t.take());
        f.text += f.pieces.back();
        if (stop) {
            f.stopped_at = (int)i;
            break;
        }
    }
    f.text += t.finish();
    return f;
}

TEST(ServeText, SanitizeAsPythonReplaces) {
    // expectations from Python 3: bytes.decode("utf-8", errors="replace")
    EXPECT_EQ(utf8::sanitize("h\xC3\xA9llo \xE2\x82\xAC \xF0\x90\x8D\x88"), "h\xC3\xA9llo \xE2\x82\xAC \xF0\x90\x8D\x88");
    EXPECT_EQ(utf8::sanitize("\xE2\x82"), kFFFD);                         // unfinished at the end: one
    EXPECT_EQ(utf8::sanitize("\xE2\x82" "A"), kFFFD + "A");               // a maximal subpart: one
    EXPECT_EQ(utf8::sanitize("\xE0\x80"), kFFFD + kFFFD);                 // E0 needs A0..BF second
    EXPECT_EQ(utf8::sanitize("\xF0\x90\x41"), kFFFD + "A");
    EXPECT_EQ(utf8::sanitize("\xED\xA0\x80"), kFFFD + kFFFD + kFFFD);     // a surrogate
    EXPECT_EQ(utf8::sanitize("\xC0\xAF"), kFFFD + kFFFD);                 // overlong
    EXPECT_EQ(utf8::sanitize("\xFF" "a\x80"), kFFFD + "a" + kFFFD);
    EXPECT_EQ(utf8::sanitize("\xF4\x90\x80\x80"), kFFFD + kFFFD + kFFFD + kFFFD);  // past U+10FFFF
    EXPECT_TRUE(utf8::is_valid("h\xC3\xA9"));
    EXPECT_FALSE(utf8::is_valid("\xC3"));
}

TEST(ServeText, CharactersAreNeverCut) {
    const Fed f = feed({"a\xE2", "\x82", "\xAC" "b", "\xF0\x9F", "\x98\x80"}, {});
    EXPECT_EQ(f.pieces, (std::vector<std::string>{"a", "", "\xE2\x82\xAC" "b", "", "\xF0\x9F\x98\x80"}));
    EXPECT_EQ(f.text, "a\xE2\x82\xAC" "b\xF0\x9F\x98\x80");
    // an unfinished character at the end is released by finish() as U+FFFD
    EXPECT_EQ(feed({"x\xE2\x82"}, {}).text, "x" + kFFFD);
    // a bad byte after a lead: released at once, as Python would decode the whole
    EXPECT_EQ(feed({"\xE2", "("}, {}).pieces.back(), kFFFD + "(");
}

TEST(ServeText, StopStringsAcrossTokens) {
    Fed f = feed({"Hel", "lo W", "orld", "!"}, {"o Wo"});
    EXPECT_EQ(f.text, "Hell");
    EXPECT_EQ(f.stopped_at, 2);
    EXPECT_EQ(f.pieces[0], "Hel");
    EXPECT_EQ(f.pieces[1], "l");  // "o W" held: it may start the stop string
    // the earliest of several; a stop at the very start; one that never comes
    EXPECT_EQ(feed({"abcdef"}, {"de", "bc"}).text, "a");
    EXPECT_EQ(feed({"xy", "z"}, {"xy"}).text, "");
    f = feed({"ab", "cd"}, {"zz"});
    EXPECT_EQ(f.text, "abcd");
    EXPECT_EQ(f.stopped_at, -1);
    // held text that turns out not to be a stop is released with what follows
    f = feed({"xxA", "BD", "q"}, {"ABC"});
    EXPECT_EQ(f.pieces, (std::vector<std::string>{"xx", "ABD", "q"}));
    // a stop inside one token, text after it dropped
    EXPECT_EQ(feed({"one\n\ntwo"}, {"\n\n"}).text, "one");
    // stops with multi-byte characters, split across tokens
    EXPECT_EQ(feed({"caf\xC3", "\xA9 au", " lait"}, {"\xC3\xA9 a"}).text, "caf");
}

// Random tokens (ASCII letters from a small alphabet and pieces of UTF-8) and random stops, against the reference.
TEST(ServeText, RandomAgainstReference) {
    Rng rng(7);
    const std::vector<std::string> atoms = {"a", "b", "ab", "ba", "\xE2", "\x82", "\xAC", "\xC3", "\xA9", "\xFF", "aba"};
    for (int round = 0; round < 3000; round++) {
        std::vector<std::string> tokens(1 + rng.next_u32() % 12);
        for (std::string& t : tokens) {
            const int parts = 1 + (int)(rng.next_u32() % 3);
            for (int k = 0; k < parts; k++) t += atoms[rng.next_u32() % atoms.size()];
        }
        std::vector<std::string> stops(rng.next_u32() % 3);
        for (std::string& s : stops) {
            const int parts = 1 + (int)(rng.next_u32() % 3);
            for (int k = 0; k < parts; k++) s += atoms[rng.next_u32() % 4];
        }
        // reference: after each token, the joined bytes so far; the first time some stop is in them, cut at the
        // earliest start among the stops found (generation ends then: a stop that would complete later never does)
        std::string all;
        size_t cut = std::string::npos;
        int stop_token = -1;
        for (size_t i = 0; i < tokens.size() && stop_token < 0; i++) {
            all += tokens[i];
            for (const std::string& s : stops) cut = std::min(cut, all.find(s));
            if (cut != std::string::npos) stop_token = (int)i;
        }
        const std::string expect = utf8::sanitize(all.substr(0, std::min(cut, all.size())));
        const Fed f = feed(tokens, stops);
        ASSERT_EQ(f.text, expect) << "round " << round;
        ASSERT_EQ(f.stopped_at, stop_token) << "round " << round;
        // every piece is valid UTF-8, and what was handed out is always a prefix of the final text
        std::string so_far;
        for (const std::string& p : f.pieces) {
            ASSERT_TRUE(utf8::is_valid(p));
            so_far += p;
            ASSERT_EQ(expect.compare(0, so_far.size(), so_far), 0) << "round " << round;
        }
    }
}

}  // namespace
