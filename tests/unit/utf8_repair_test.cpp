// Utf8Repair: ill-formed UTF-8 becomes U+FFFD per maximal subpart (Python's
// bytes.decode("utf-8", "replace")), unfinished sequences wait for their bytes.
#include "core/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace pelican {
namespace {

const std::string R = "\xEF\xBF\xBD";  // U+FFFD

TEST(Utf8Repair, WholeStringsAsPythonReplace) {
    // Expected values: Python 3 bytes(...).decode("utf-8", "replace").
    EXPECT_EQ(utf8_repair(""), "");
    EXPECT_EQ(utf8_repair("abc"), "abc");
    EXPECT_EQ(utf8_repair("a\xC3\xA9"), "a\xC3\xA9");
    EXPECT_EQ(utf8_repair("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
    EXPECT_EQ(utf8_repair("a\xC3"), "a" + R);   // cut after the lead byte
    EXPECT_EQ(utf8_repair("\xF0\x9F\x98"), R);  // one subpart, one U+FFFD
    EXPECT_EQ(utf8_repair("\xF0\x9F\x98"
                          "a"),
              R + "a");
    EXPECT_EQ(utf8_repair("a\x80\x80"), "a" + R + R);           // stray continuation bytes
    EXPECT_EQ(utf8_repair("\xC0\xAF"), R + R);                  // overlong lead
    EXPECT_EQ(utf8_repair("\xE0\x80\x80"), R + R + R);          // E0 needs A0..BF next
    EXPECT_EQ(utf8_repair("\xED\xA0\x80"), R + R + R);          // surrogate
    EXPECT_EQ(utf8_repair("\xF4\x90\x80\x80"), R + R + R + R);  // above U+10FFFF
    EXPECT_EQ(utf8_repair("\xE2\x82"
                          "a\xE2\x82\xAC"),
              R + "a\xE2\x82\xAC");
    EXPECT_EQ(utf8_repair("\xFF\xFE"), R + R);
    EXPECT_TRUE(utf8_valid(utf8_repair("\xF1\x80\x80\xE1\x80\xC2")));
}

TEST(Utf8Repair, StreamingHoldsUnfinishedCharacters) {
    Utf8Repair r;
    EXPECT_EQ(r.push("a\xF0"), "a");
    EXPECT_TRUE(r.holding());
    EXPECT_EQ(r.push("\x9F"), "");
    EXPECT_EQ(r.push("\x98\x80"
                     "b"),
              "\xF0\x9F\x98\x80"
              "b");
    EXPECT_FALSE(r.holding());
    EXPECT_EQ(r.finish(), "");
    EXPECT_EQ(r.push("\xE2\x82"), "");
    EXPECT_EQ(r.push("x"), R + "x");  // the unfinished € is replaced once the next byte shows it
    EXPECT_EQ(r.push("\xC3"), "");
    EXPECT_EQ(r.finish(), R);  // unfinished at the end
    EXPECT_EQ(r.push("ok"), "ok");
}

TEST(Utf8Repair, PiecewiseEqualsWhole) {
    // Every split of every test string gives the whole-string result.
    const std::string cases[] = {"a\xC3\xA9\xF0\x9F\x98\x80z", "\xE2\x82\xE2\x82\xAC\x80",
                                 "\xF0\x9F\x98"
                                 "a\xED\xA0\x80",
                                 "\xC3\xC3\xA9"};
    for (const std::string& s : cases) {
        const std::string whole = utf8_repair(s);
        for (size_t cut = 0; cut <= s.size(); ++cut) {
            Utf8Repair r;
            std::string out = r.push(s.substr(0, cut));
            out += r.push(s.substr(cut));
            out += r.finish();
            EXPECT_EQ(out, whole) << "cut " << cut;
        }
    }
}

}  // namespace
}  // namespace pelican
