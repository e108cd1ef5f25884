// The regex compiler: each construct on strings it must and must not match, every refusal, the
// JSON-string encoding, and a differential test against std::regex (ECMAScript) on every
// short string over a small alphabet.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/regex_to_gbnf.h"
#include "grammar_test_util.h"

namespace ferry::grammar {
namespace {

struct Re : GbnfUnderTest {
    explicit Re(std::string_view pattern, RegexTarget target = RegexTarget::Raw) {
        auto e = regex_to_gbnf(pattern, target);
        load(e ? Expected<std::string>("root ::= " + *e + "\n") : e);
    }
};

// Every string in `yes` matches, none in `no` does.
void check(std::string_view pattern, const std::vector<std::string>& yes,
           const std::vector<std::string>& no, RegexTarget target = RegexTarget::Raw) {
    Re re(pattern, target);
    ASSERT_TRUE(re.grammar) << pattern << ": " << re.error;
    for (const auto& s : yes)
        EXPECT_TRUE(re(s)) << pattern << " should match '" << s << "'\n" << re.gbnf;
    for (const auto& s : no)
        EXPECT_FALSE(re(s)) << pattern << " should not match '" << s << "'\n" << re.gbnf;
}

std::string refusal(std::string_view pattern) {
    auto e = regex_to_gbnf(pattern);
    return e ? std::string() : e.error().message;
}

TEST(RegexGbnf, Literals) {
    check("abc", {"abc"}, {"", "ab", "abcd", "abd", "ABC"});
    check("", {""}, {"a"});
    check("^abc$", {"abc"}, {"", "xabc", "abcx"});
    check("^", {""}, {"a"});
    check("h\xC3\xA9llo \xE6\x97\xA5", {"h\xC3\xA9llo \xE6\x97\xA5"}, {"hello \xE6\x97\xA5"});
    check("\"q\"", {"\"q\""}, {"q"});
    // '{' that does not start a quantifier is a literal in both dialects, as are ']' and '}'.
    check("a{", {"a{"}, {"a"});
    check("{}", {"{}"}, {""});
    check("a{x}", {"a{x}"}, {"a"});
    check("a]}", {"a]}"}, {"a"});
}

TEST(RegexGbnf, Escapes) {
    check("\\d", {"0", "9"}, {"a", "", "00"});
    // What both ECMA-262 and Python's Unicode-aware classes agree on.
    check("\\D", {"a", " "}, {"5", "", "\xC3\xA9", "\xD9\xA3"});
    check("\\w+", {"a_Z9"}, {"a-b", "", "\xC3\xA9"});
    check("\\W", {"-", " "}, {"a", "_", "0", "\xC3\xA9"});
    check("[^\\d\\w]", {"-"}, {"a", "1", "\xC3\xA9"});
    check("\\s", {" ", "\t", "\n", "\r", "\f", "\v", "\xC2\xA0", "\xE3\x80\x80"},
          {"a", "", "\x1c", "\xEF\xBB\xBF"});
    check("\\S", {"a", "-", "\xC3\xA9"}, {" ", "\n", "\x1c", "\xC2\x85", "\xEF\xBB\xBF"});
    check("[^\\s]", {"a"}, {" ", "\x1f", "\xEF\xBB\xBF"});
    check("\\.\\\\\\/\\-", {".\\/-"}, {"a\\/-"});
    check("\\n\\t\\r\\f\\v", {"\n\t\r\f\v"}, {"ntrfv"});
    check("\\x41\\u00e9\\U0001F600", {"A\xC3\xA9\xF0\x9F\x98\x80"}, {"A"});
    check("\\0", {std::string(1, '\0')}, {"0"});
    check("\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$", {"*+?()[]{}|^$"}, {""});
    check("a\\$", {"a$"}, {"a"});  // an escaped $ at the end is a literal
}

TEST(RegexGbnf, Classes) {
    check("[a-c]", {"a", "b", "c"}, {"d", "", "ab"});
    check("[^a-c]", {"d", "\xC3\xA9", "\xE6\x97\xA5", "\n"}, {"a", "c", ""});
    check("[\\d_]+", {"0_9"}, {"a"});
    check("[a\\-z]", {"a", "-", "z"}, {"b"});
    check("[-a]", {"-", "a"}, {"b"});
    check("[a-]", {"-", "a"}, {"b"});
    check("[\\]\\\\]", {"]", "\\"}, {"["});
    check("[\\b]", {"\b"}, {"b"});
    check("[.*+]", {".", "*", "+"}, {"a"});
    check("[^\\s]", {"a"}, {" ", "\n"});
    check("[\\s\\S]", {"a", "\n", " "}, {""});
    check("[\\x00-\\x1f]", {"\x01", "\x1f"}, {" "});
    check("[\"\\^]", {"\"", "^"}, {"a"});
    check("[^\"]", {"a"}, {"\""});
}

TEST(RegexGbnf, Dot) {
    // Python's '.' excludes only \n, ECMA-262's all line terminators: the common part.
    check(".", {"a", " ", "\xC3\xA9", "\t"}, {"\n", "\r", "\xE2\x80\xA8", ""});
    check("a.c", {"abc", "a.c"}, {"ac", "abbc"});
}

TEST(RegexGbnf, GroupsAndAlternation) {
    check("(ab)+", {"ab", "abab"}, {"", "a", "aba"});
    check("(?:ab|cd)*e", {"e", "abe", "cdabe"}, {"ab", "ace"});
    check("(?P<x>a)b", {"ab"}, {"a"});
    check("(?<word>a|b)c", {"ac", "bc"}, {"c"});
    check("a|bc|", {"", "a", "bc"}, {"b", "abc"});
    check("x(a|)y", {"xy", "xay"}, {"xaay"});
    check("((a))", {"a"}, {""});
    check("a|b|c", {"a", "b", "c"}, {"ab", ""});
}

TEST(RegexGbnf, Quantifiers) {
    check("a{3}", {"aaa"}, {"aa", "aaaa"});
    check("a{2,}", {"aa", "aaaaa"}, {"a", ""});
    check("a{1,3}", {"a", "aaa"}, {"", "aaaa"});
    check("a{0}b", {"b"}, {"ab"});
    check("a{0,0}", {""}, {"a"});
    check("ab*c", {"ac", "abbbc"}, {"abd"});
    check("ab+c", {"abc", "abbc"}, {"ac"});
    check("ab?c", {"ac", "abc"}, {"abbc"});
    // Lazy forms match the same strings.
    check("a*?", {"", "aaa"}, {"b"});
    check("a+?b", {"ab", "aab"}, {"b"});
    check("a??", {"", "a"}, {"aa"});
    check("a{2,3}?", {"aa", "aaa"}, {"a", "aaaa"});
    check("(ab){2}", {"abab"}, {"ab", "ababab"});
    check("(a{2}){3}", {"aaaaaa"}, {"aaaa"});
    check("a{1000}", {std::string(1000, 'a')}, {std::string(999, 'a')});
}

// Repeating what can be empty would be left recursion in GBNF; the compiler removes the empty
// string from the repeated part, which keeps the language.
TEST(RegexGbnf, RepeatedNullable) {
    check("(a*)*", {"", "a", "aaa"}, {"b"});
    check("(a|)+b", {"b", "ab", "aab"}, {"a"});
    check("(a?b?)*", {"", "ab", "ba", "bba"}, {"c"});
    check("(a*b*)+c", {"c", "abc", "bac"}, {"ab"});
    check("(()|a)*", {"", "aa"}, {"b"});
    check("(a{0,2}){2,}", {"", "a", "aaaaa"}, {"b"});
    check("(x?){3}y", {"y", "xy", "xxxy"}, {"xxxxy"});
}

TEST(RegexGbnf, JsonStringContent) {
    const auto json = RegexTarget::JsonStringContent;
    // a " b \ c: inside a JSON string, \" and \\.
    check("a\"b\\\\c", {"a\\\"b\\\\c"}, {"a\"b\\c", "a\"b\\\\c"}, json);
    check("[^a]",
          {"\\\"", "\\\\", "\\n", "\\t", "\\b", "\\f", "\\r", "\\u0001", "\\u001f", "b", "\xC3\xA9",
           "/"},
          {"a", "\"", "\\", "\n", "\\u000a", "\\x", ""}, json);
    check("\\n+", {"\\n", "\\n\\n"}, {"\n", "n"}, json);
    check(".", {"\\t", "\\u001f", "x"}, {"\\n", "\\r", "\n"}, json);
    check("\\d{2}-[a-z\"]", {"12-a", "12-\\\""}, {"12-\"", "1-a"}, json);
    check("[\\x00-\\x02\\x10]", {"\\u0000", "\\u0002", "\\u0010"}, {"\\u0003", "\\u0011"}, json);
    check("\\\\+", {"\\\\", "\\\\\\\\"}, {"\\", "\\\\\\"}, json);
}

TEST(RegexGbnf, GrammarIsComplete) {
    auto g = regex_grammar("^[a-z]+@[a-z]+\\.com$");
    ASSERT_TRUE(g.ok()) << g.error().message;
    auto parsed = Grammar::parse(*g);
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    EXPECT_TRUE(accepts(*parsed, "joe@example.com"));
    EXPECT_FALSE(accepts(*parsed, "joe@example.org"));
}

TEST(RegexGbnf, Refusals) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"(a)\\1", "backreference"},
        {"(?P<n>a)(?P=n)", "backreference"},
        {"(?<n>a)\\k<n>", "named backreference"},
        {"a(?=b)", "lookahead"},
        {"a(?!b)", "lookahead"},
        {"(?<=a)b", "lookbehind"},
        {"(?<!a)b", "lookbehind"},
        {"(?i)abc", "inline flag"},
        {"(?s:a.)", "inline flag"},
        {"(?>a)", "atomic group"},
        {"(?#note)a", "comment group"},
        {"a*+", "possessive"},
        {"a++", "possessive"},
        {"a{2}+", "possessive"},
        {"\\bfoo", "word boundary"},
        {"foo\\B", "word boundary"},
        {"\\Afoo", "anchor"},
        {"a^b", "anchor"},
        {"a$b", "anchor"},
        {"(^a)", "anchor"},
        {"a{3,2}", "n < m"},
        {"a{,3}", "{,n}"},
        {"a{1001}", "above 1000"},
        {"a{2,5000}", "above 1000"},
        {"(a{1000}){1000}", "expand"},
        {"(ab", "unbalanced"},
        {"ab)", "unbalanced"},
        {"*a", "nothing to repeat"},
        {"a|+", "nothing to repeat"},
        {"{2}", "nothing to repeat"},
        {"a**", "follows another"},
        {"[abc", "unterminated"},
        {"[]a]", "']' first"},
        {"[z-a]", "before its start"},
        {"[\\d-z]", "class escape"},
        {"[[:alpha:]]", "POSIX"},
        {"\\p{L}", "Unicode property"},
        {"\\q", "unknown escape"},
        {"\\x4", "hex digits"},
        {"\\01", "octal"},
        {"ab\\", "trailing backslash"},
        {"[^\\s\\S]", "matches nothing"},
        {"\xff", "UTF-8"},
    };
    for (const auto& [pattern, what] : cases) {
        const std::string err = refusal(pattern);
        EXPECT_NE(err.find(what), std::string::npos)
            << "pattern " << pattern << ": expected an error about '" << what << "', got '" << err
            << "'";
    }
}

// std::regex (ECMAScript, ASCII here) is an independent implementation of the same language.
TEST(RegexGbnf, DifferentialAgainstStdRegex) {
    const std::vector<std::string> patterns = {
        "a*b",
        "(ab|a)*b?",
        "[a-c]{1,3}",
        "a{2}b{0,2}",
        "(a|b)*c(a|b)*",
        "[^ab]+",
        "a?b?c?",
        "(a*)*b",
        "(a|)+",
        "((a|b)c?)+",
        "\\d+(\\.\\d{1,2})?",
        "[abc-]+",
        "(?:ab)+|c",
        ".b.",
        "a.*c",
        "\\w\\W\\s",
        "(a{1,2}b){2}",
        "[\\da]+x",
        "(a|ab)(c|bcd)",
        "a+?b",
        "x{0}",
        "(a?){3}",
        "a{2,}b",
        "[^\\d]c",
        "\\S\\D",
        "(b|(a(b)*)*)+",
        "[.]a|b\\.",
        "(a|b|)(c|)d?",
        "(?:a|b){1,2}c{0,1}",
        "[a-c][^a-c]*",
    };
    const std::string alphabet = "abcdx1. ";
    std::vector<std::string> inputs = {""};
    for (size_t len = 1, from = 0; len <= 4; ++len) {
        const size_t to = inputs.size();
        for (size_t i = from; i < to; ++i)
            for (char c : alphabet) inputs.push_back(inputs[i] + c);
        from = to;
    }
    std::mt19937 rng(1234);
    for (int i = 0; i < 400; ++i) {
        std::string s;
        const int len = 5 + static_cast<int>(rng() % 5);
        for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
        inputs.push_back(s);
    }
    for (const auto& p : patterns) {
        Re re(p);
        ASSERT_TRUE(re.grammar) << p << ": " << re.error;
        const std::regex ref(p, std::regex::ECMAScript);
        int mismatches = 0;
        for (const auto& s : inputs) {
            const bool want = std::regex_match(s, ref);
            if (re(s) != want && ++mismatches <= 3)
                ADD_FAILURE() << "pattern " << p << " on '" << s << "': std::regex says " << want
                              << "\n"
                              << re.gbnf;
        }
    }
}

}  // namespace
}  // namespace ferry::grammar
