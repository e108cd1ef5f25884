// The GBNF parser, the reference acceptor, and the token masks checked against it: a mask
// must admit exactly the tokens whose bytes can continue a valid output.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "engine/constraint.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/shared_tops.h"
#include "grammar/stack.h"
#include "test_util.h"

namespace ferry::grammar {
namespace {

Grammar parse_ok(const std::string& text) {
    auto g = Grammar::parse(text);
    EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
    return g.ok() ? std::move(*g) : Grammar{};
}

std::string parse_error(const std::string& text) {
    auto g = Grammar::parse(text);
    EXPECT_FALSE(g.ok()) << "parsed: " << text;
    return g.ok() ? "" : g.error().message;
}

TEST(Grammar, LiteralsClassesAndRepetition) {
    Grammar g = parse_ok(R"(root ::= "a" [b-d]+ ("x" | "yz")? [^0-9]{2,3} .)");
    EXPECT_TRUE(accepts(g, "abxqqz"));
    EXPECT_TRUE(accepts(g, "abcdyzqqqz"));
    EXPECT_TRUE(accepts(g, "abqqz"));
    EXPECT_FALSE(accepts(g, "aqqz"));     // [b-d]+ needs one
    EXPECT_FALSE(accepts(g, "ab1qz"));    // a digit in [^0-9]
    EXPECT_FALSE(accepts(g, "abqqqqz"));  // {2,3} then one char
    EXPECT_FALSE(accepts(g, "abxq"));     // the final . is missing
}

TEST(Grammar, RulesRecursionCommentsAndNewlines) {
    Grammar g = parse_ok(R"(# nested lists
root ::= list
list ::= "[" (
    item ("," item)*
  )? "]"
item ::= list | [0-9]+   # a number or a list
)");
    EXPECT_TRUE(accepts(g, "[]"));
    EXPECT_TRUE(accepts(g, "[1,[2,[]],33]"));
    EXPECT_FALSE(accepts(g, "[1,]"));
    EXPECT_FALSE(accepts(g, "[[1]"));
}

TEST(Grammar, EscapesAndUnicode) {
    Grammar g = parse_ok(R"(root ::= "\x41\u00e9\n" [\u4e00-\u9fff]* "\"" [\]\\]?)");
    EXPECT_TRUE(accepts(g, "A\xc3\xa9\n\""));
    EXPECT_TRUE(accepts(g, "A\xc3\xa9\n\xe4\xb8\xad\xe6\x96\x87\"\\"));
    EXPECT_FALSE(accepts(g, "A\xc3\xa9\nx\""));
    EXPECT_EQ(gbnf_literal("a\"b\\c\n"), R"("a\"b\\c\n")");
    Grammar lit = parse_ok("root ::= " + gbnf_literal("q\"\\\t\x01z"));
    EXPECT_TRUE(accepts(lit, "q\"\\\t\x01z"));
}

TEST(Grammar, RefusesWhatCannotBeMatched) {
    EXPECT_NE(parse_error("root ::= foo").find("'foo' is used but never defined"),
              std::string::npos);
    EXPECT_NE(parse_error("root ::= root \"a\" | \"b\"").find("left recursion"), std::string::npos);
    EXPECT_NE(parse_error("root ::= x\nx ::= y? x \"a\"\ny ::= \"b\"").find("left recursion"),
              std::string::npos);
    EXPECT_NE(parse_error("item ::= \"a\"").find("no 'root' rule"), std::string::npos);
    EXPECT_NE(parse_error("root ::= \"abc").find("unterminated"), std::string::npos);
    EXPECT_NE(parse_error("root ::= [a-").find("unterminated"), std::string::npos);
    EXPECT_NE(parse_error("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
    EXPECT_NE(parse_error("root ::= \"a\"{3,2}").find("n < m"), std::string::npos);
    EXPECT_NE(parse_error("root ::= \"a\"{99999}").find("repetition count"), std::string::npos);
    EXPECT_NE(parse_error("root ::= (\"a\"").find("expected ')'"), std::string::npos);
    EXPECT_NE(parse_error("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"),
              std::string::npos);
    EXPECT_NE(parse_error("root ::= * \"a\"").find("nothing before it"), std::string::npos);
    EXPECT_NE(parse_error("root ::= \"a\"\n\nbad line").find("line 3"), std::string::npos);
}

// The reference for one token: feed its bytes through the plain stacks; an unfinished
// character at the end is viable when some completion of it is accepted.
bool reference_allows(const Grammar& g, const std::vector<Stack>& stacks,
                      const std::string& bytes) {
    std::vector<Stack> st = stacks;
    size_t i = 0;
    while (i < bytes.size()) {
        const auto b = static_cast<unsigned char>(bytes[i]);
        const int n = b < 0x80         ? 0
                      : (b >> 5) == 6  ? 1
                      : (b >> 4) == 14 ? 2
                      : (b >> 3) == 30 ? 3
                                       : -1;
        if (n < 0) return false;
        if (i + n >= bytes.size()) {
            // Unfinished: the code points with this prefix are one range [lo, hi]; whether a
            // stack accepts changes only at its ranges' ends, so those (and lo, hi) decide.
            for (size_t k = i + 1; k < bytes.size(); ++k)
                if ((static_cast<unsigned char>(bytes[k]) >> 6) != 2) return false;
            std::string lo_s = bytes.substr(i), hi_s = lo_s;
            lo_s.append(n + 1 - lo_s.size(), '\x80');
            hi_s.append(n + 1 - hi_s.size(), '\xbf');
            size_t a = 0, z = 0;
            // Only scalar values count: no overlong forms, surrogates or values past U+10FFFF.
            const uint32_t lo = std::max(decode_utf8(lo_s, a), n == 1   ? 0x80u
                                                               : n == 2 ? 0x800u
                                                                        : 0x10000u);
            const uint32_t hi = std::min(decode_utf8(hi_s, z), 0x10FFFFu);
            std::set<uint32_t> probe = {lo, hi, 0xD7FF, 0xE000};
            for (size_t e = 0; e < g.n_elements(); ++e)
                for (const auto& [x, y] : g.element(static_cast<uint32_t>(e)).ranges)
                    for (uint32_t c : {x - 1, x, y, y + 1})
                        if (c >= lo && c <= hi) probe.insert(c);
            for (uint32_t cp : probe)
                if (cp >= lo && cp <= hi && !(cp >= 0xD800 && cp <= 0xDFFF) &&
                    !advance(g, st, cp).empty())
                    return true;
            return false;
        }
        size_t j = i;
        const uint32_t cp = decode_utf8(bytes, j);
        if (j != i + n + 1) return false;
        i = j;
        st = advance(g, st, cp);
        if (st.empty()) return false;
    }
    return true;
}

// Steps the plain stacks over `buf`'s whole characters; returns the bytes of an unfinished
// last character.
std::string feed(const Grammar& g, std::vector<Stack>& stacks, const std::string& buf) {
    size_t i = 0;
    while (i < buf.size()) {
        const auto b = static_cast<unsigned char>(buf[i]);
        const int n = b < 0x80 ? 0 : (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : 3;
        if (i + n >= buf.size()) break;
        size_t j = i;
        stacks = advance(g, stacks, decode_utf8(buf, j));
        i = j;
    }
    return buf.substr(i);
}

// Random tokens over the characters the grammar talks about, with multi-byte characters whole
// and split, walked along random valid paths: at every state the mask equals the reference.
TEST(GrammarMask, EqualsTheReferenceOnRandomWalks) {
    const std::vector<std::string> grammars = {
        R"(root ::= "{" ws "\"k\":" ws ("\"" [^"\\]* "\"" | [0-9]+) ws "}"
ws ::= [ ]?)",
        R"(root ::= ("ab" | "a" [bc]* "d")+ "é"?)",
        R"(root ::= item ("," item)*
item ::= [a-c]+ | "[" root "]" | "中" [\u00e0-\u00ff]?)",
        R"(root ::= [^a]{1,4} "z")",
        // Bounded repetitions long enough that masks inside them come from the widest link's
        // (Grammar::widest): a character class, a rule as the unit, one inside another, and a
        // unit that can be empty (not linked).
        R"(root ::= "\"" [^"\\]{0,12} "\"" [0-9]{2,6})",
        R"(root ::= ( [a-c] | "[" [a-c]{0,3} "]" ){0,8} "z")",
        R"(root ::= ( "{" [a-d]{1,5} "}" ){0,7} ","?)",
        R"(root ::= ( "a"? "b"? ){0,6} "z")",
    };
    const std::vector<std::string> atoms = {"{",
                                            "}",
                                            "\"",
                                            "k",
                                            ":",
                                            " ",
                                            "0",
                                            "7",
                                            "a",
                                            "b",
                                            "c",
                                            "d",
                                            ",",
                                            "[",
                                            "]",
                                            "z",
                                            "\\",
                                            "\xc3\xa9",
                                            "\xe4\xb8\xad",
                                            "\xc3\xa0",
                                            "\xf0\x9f\x98\x80"};
    std::mt19937 rng(7);
    std::vector<std::string> pieces;
    std::set<std::string> seen;
    while (pieces.size() < 600) {
        std::string t;
        const int len = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < len; ++k) t += atoms[rng() % atoms.size()];
        // split a multi-byte character at a random byte sometimes
        if (rng() % 4 == 0 && t.size() > 1) t = t.substr(0, 1 + rng() % (t.size() - 1));
        if (seen.insert(t).second) pieces.push_back(t);
    }
    pieces.push_back("<eos>");
    const int32_t eos = static_cast<int32_t>(pieces.size() - 1);
    std::vector<bool> usable(pieces.size(), true);
    auto vocab = std::make_shared<const Vocabulary>(pieces, usable, std::vector<int32_t>{eos});

    for (const std::string& text : grammars) {
        SCOPED_TRACE(text);
        auto cg = std::make_shared<const CompiledGrammar>(parse_ok(text), vocab);
        for (int walk = 0; walk < 6; ++walk) {
            Matcher m(cg);
            std::vector<Stack> stacks = cg->start();
            std::string pending;
            for (int step = 0; step < 12; ++step) {
                const auto mask = m.mask();
                std::vector<int32_t> allowed;
                for (int32_t id = 0; id < eos; ++id) {
                    const bool want = reference_allows(cg->grammar(), stacks, pending + pieces[id]);
                    ASSERT_EQ(mask->test(id), want)
                        << "token '" << pieces[id] << "' at step " << step << " after '" << pending
                        << "' walk " << walk;
                    if (want) allowed.push_back(id);
                }
                const bool complete =
                    pending.empty() && std::any_of(stacks.begin(), stacks.end(),
                                                   [](const Stack& s) { return s.empty(); });
                ASSERT_EQ(mask->test(eos), complete);
                ASSERT_EQ(m.complete(), complete);
                if (allowed.empty()) break;
                const int32_t pick = allowed[rng() % allowed.size()];
                ASSERT_TRUE(m.accept(pick));
                // follow the same step on the reference side
                pending = feed(cg->grammar(), stacks, pending + pieces[pick]);
            }
        }
    }
}

// A link of a bounded repetition maps to the longest link's same position, and accepts the
// same text up to its count left; a unit that can match nothing is not linked.
TEST(Grammar, BoundedRepetitionLinksMapToTheLongest) {
    Grammar g = parse_ok(R"(root ::= "x" [a-z]{0,5} "y")");
    std::vector<Stack> stacks = initial_stacks(g);
    stacks = advance(g, stacks, 'x');
    std::vector<uint32_t> upto;
    std::set<uint32_t> longest;
    for (int i = 0; i < 5; ++i) {
        uint32_t seen = 0;
        for (const Stack& s : stacks)
            for (uint32_t p : s)
                if (auto w = g.widest(p)) {
                    seen = std::max(seen, w->upto);
                    longest.insert(w->pos);
                }
        upto.push_back(seen);
        stacks = advance(g, stacks, 'q');
        ASSERT_FALSE(stacks.empty());
    }
    // 5 left (the longest link: not mapped), then 4, 3, 2, 1.
    EXPECT_EQ(upto, (std::vector<uint32_t>{0, 4, 3, 2, 1}));
    EXPECT_LE(longest.size(), 2u);  // the longest link's unit and its rest

    Grammar nullable = parse_ok(R"(root ::= ( "a"? "b"? ){0,6} "z")");
    for (size_t p = 0; p < nullable.n_elements(); ++p)
        EXPECT_FALSE(nullable.widest(static_cast<uint32_t>(p))) << "position " << p;
}

TEST(GrammarMask, RefusesForbiddenTokensAndEndsWhenComplete) {
    auto vocab = std::make_shared<const Vocabulary>(
        std::vector<std::string>{"yes", "no", "y", "es", "<eos>", "<ctl>"},
        std::vector<bool>{true, true, true, true, true, false}, std::vector<int32_t>{4});
    auto cg = std::make_shared<const CompiledGrammar>(parse_ok(R"(root ::= "yes" | "no")"), vocab);
    Matcher m(cg);
    EXPECT_FALSE(m.accept(4));  // the end before anything
    EXPECT_FALSE(m.accept(3));  // "es" cannot start
    EXPECT_FALSE(m.accept(5));  // a control token is never text
    EXPECT_FALSE(m.mask()->test(5));
    ASSERT_TRUE(m.accept(2));
    EXPECT_FALSE(m.complete());
    ASSERT_TRUE(m.accept(3));
    EXPECT_TRUE(m.complete());
    EXPECT_FALSE(m.can_continue());
    const auto mask = m.mask();
    EXPECT_EQ(mask->count(), 1);
    EXPECT_TRUE(mask->test(4));
    EXPECT_TRUE(m.accept(4));
    EXPECT_TRUE(m.ended());
}

TEST(GrammarMask, OnlyWellFormedUtf8) {
    // Byte tokens can spell overlong forms of ASCII, surrogates and values past U+10FFFF:
    // none of them is a character, so none may pass, whole or split.
    const std::vector<std::string> pieces = {
        "\xC1\xA1",         "\xE0\x81\xA1", "\xE0\x81",     "\xED\xA0\x80",
        "\xF4\x90\x80\x80", "\xC0",         "\xF5",         "a",
        "\xE0\xA0\x80",     "\xE0",         "\xED\x9F\xBF", "<e>"};
    auto vocab = std::make_shared<const Vocabulary>(pieces, std::vector<bool>(pieces.size(), true),
                                                    std::vector<int32_t>{11});
    auto cg = std::make_shared<const CompiledGrammar>(parse_ok("root ::= .+"), vocab);
    Matcher m(cg);
    const auto mask = m.mask();
    for (int id : {0, 1, 2, 3, 4, 5, 6}) EXPECT_FALSE(mask->test(id)) << id;
    for (int id : {7, 8, 9, 10}) EXPECT_TRUE(mask->test(id)) << id;
    EXPECT_FALSE(m.accept(1));
    ASSERT_TRUE(m.accept(9));  // E0 alone may still become U+0800..U+0FFF
    EXPECT_FALSE(m.accept(0));
}

TEST(GrammarMask, SharedAcrossSequencesInTheSameState) {
    auto vocab = std::make_shared<const Vocabulary>(std::vector<std::string>{"a", "b", "<e>"},
                                                    std::vector<bool>{true, true, true},
                                                    std::vector<int32_t>{2});
    auto cg = std::make_shared<const CompiledGrammar>(parse_ok(R"(root ::= [ab]*)"), vocab);
    Matcher a(cg), b(cg);
    (void)a.mask();
    ASSERT_TRUE(a.accept(0));
    ASSERT_TRUE(b.accept(1));
    (void)a.mask();
    (void)b.mask();  // the same state as a's: [ab]* loops without growing its stack
    const auto st = cg->stats();
    EXPECT_EQ(st.computed, 1);
    EXPECT_EQ(st.hits, 2);
}

// The fast path (each top's own mask, the context tokens checked against the whole stacks)
// against the whole-vocabulary walk, on SmolLM2's 49,152 tokens and the grammars requests
// bring: nested objects, arrays of objects, bounded strings, recursion, a regex, any JSON.
// Random walks pick among the allowed tokens, so strings, numbers, keys and whitespace states
// all come up; the tops are shared across states as the server shares them.
TEST(GrammarMask, TopMasksEqualTheWholeWalkOnARealVocabulary) {
    const auto vocab = engine::grammar_vocabulary(*testing::default_model().tokenizer);
    using Kind = engine::Constraint::Kind;
    std::vector<engine::Constraint> constraints(5);
    constraints[0].kind = Kind::JsonSchema;
    constraints[0].schema = nlohmann::ordered_json::parse(R"({"type":"object","properties":{
        "name":{"type":"string","maxLength":12},"tags":{"type":"array","items":{"type":"object",
        "properties":{"k":{"type":"string"},"v":{"type":"integer","minimum":-5,"maximum":500}},
        "required":["k","v"]}},"ok":{"type":"boolean"}},"required":["name","tags","ok"]})");
    constraints[1].kind = Kind::JsonSchema;
    constraints[1].schema = nlohmann::ordered_json::parse(R"({"$defs":{"node":{"type":"object",
        "properties":{"label":{"type":"string"},"children":{"type":"array",
        "items":{"$ref":"#/$defs/node"}}},"required":["label","children"]}},
        "$ref":"#/$defs/node"})");
    constraints[2].kind = Kind::Regex;
    constraints[2].text = R"((\+?[0-9]{1,3} )?[0-9]{3}-[0-9]{4}|[a-z]+@[a-z]+\.(com|org))";
    constraints[3].kind = Kind::JsonObject;
    constraints[4].kind = Kind::JsonSchema;
    constraints[4].schema = nlohmann::ordered_json::parse(
        R"({"type":"object","properties":{"when":{"type":"string","format":"date-time"},
        "id":{"type":"string","format":"uuid"},"n":{"type":"number"}},"required":["when","id"]})");
    engine::ConstraintCompiler compiler(vocab);
    std::mt19937 rng(11);
    int compared = 0, with_context = 0;
    for (size_t c = 0; c < constraints.size(); ++c) {
        SCOPED_TRACE("constraint " + std::to_string(c));
        auto cg = compiler.compile(constraints[c]);
        ASSERT_TRUE(cg.ok()) << cg.error().message;
        const Grammar& g = (*cg)->grammar();
        std::map<Stack, TopMask> tops;
        for (int walk = 0; walk < 3; ++walk) {
            std::vector<Stack> stacks = (*cg)->start();
            std::string pending;
            for (int step = 0; step < 40; ++step) {
                const TokenMask want = compute_mask(g, *vocab, stacks, pending);
                if (pending.empty()) {
                    std::vector<const TopMask*> ts;
                    std::set<Stack> seen;
                    for (const Stack& s : stacks)
                        if (!s.empty() && seen.insert(stack_top(s)).second) {
                            const Stack top = stack_top(s);
                            auto it = tops.find(top);
                            if (it == tops.end())
                                it = tops.emplace(top, compute_top_mask(g, *vocab, top)).first;
                            ts.push_back(&it->second);
                            with_context += !it->second.context.empty();
                        }
                    const TokenMask got = mask_from_tops(g, *vocab, stacks, ts);
                    ASSERT_EQ(got.bits, want.bits) << "walk " << walk << " step " << step;
                    ++compared;
                }
                std::vector<int32_t> allowed;
                for (int32_t id : vocab->sorted)
                    if (want.test(id)) allowed.push_back(id);
                if (allowed.empty()) break;
                pending = feed(g, stacks, pending + vocab->pieces[allowed[rng() % allowed.size()]]);
                ASSERT_FALSE(stacks.empty());
            }
        }
    }
    EXPECT_GT(compared, 300);
    EXPECT_GT(with_context, 0);  // the check against the whole stacks was exercised
}

// The server's path (CompiledGrammar: tops cached, tops inside bounded strings and arrays taken
// from the widest link's with the long tokens walked again) against the whole-vocabulary walk,
// on SmolLM2's vocabulary, through every length a bounded string can be at.
TEST(GrammarMask, MasksInsideBoundedRepetitionsEqualTheWholeWalk) {
    const auto vocab = engine::grammar_vocabulary(*testing::default_model().tokenizer);
    engine::Constraint c;
    c.kind = engine::Constraint::Kind::JsonSchema;
    c.schema = nlohmann::ordered_json::parse(R"({"type":"object","properties":{
        "a":{"type":"string","maxLength":3},"b":{"type":"string","minLength":2,"maxLength":40},
        "c":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":4},
        "d":{"type":"string","pattern":"^[a-z]{2,30}$"}},"required":["a","b","c","d"],
        "additionalProperties":false})");
    engine::ConstraintCompiler compiler(vocab);
    auto cg = compiler.compile(c);
    ASSERT_TRUE(cg.ok()) << cg.error().message;
    const Grammar& g = (*cg)->grammar();
    std::mt19937 rng(5);
    int compared = 0;
    for (int walk = 0; walk < 4; ++walk) {
        Matcher m(*cg);
        std::vector<Stack> stacks = (*cg)->start();
        std::string pending;
        for (int step = 0; step < 70 && !m.complete(); ++step) {
            const TokenMask want = compute_mask(g, *vocab, stacks, pending);
            ASSERT_EQ(m.mask()->bits, want.bits) << "walk " << walk << " step " << step;
            ++compared;
            // Short tokens mostly, so strings pass through many lengths.
            std::vector<int32_t> allowed, short_ones;
            for (int32_t id : vocab->sorted)
                if (want.test(id)) {
                    allowed.push_back(id);
                    if (vocab->pieces[id].size() <= 2) short_ones.push_back(id);
                }
            if (allowed.empty()) break;
            const auto& from = !short_ones.empty() && rng() % 4 != 0 ? short_ones : allowed;
            const int32_t pick = from[rng() % from.size()];
            ASSERT_TRUE(m.accept(pick));
            pending = feed(g, stacks, pending + vocab->pieces[pick]);
        }
    }
    EXPECT_GT(compared, 150);
    EXPECT_GT((*cg)->stats().tops_derived, 20);
}

// Tops look the same from inside wherever they are: the same bounded string in two schemas
// has one signature (another length, another)...
TEST(GrammarMask, TopSignaturesNameWhatATopSees) {
    auto top_in = [](const std::string& gbnf, const std::string& prefix) {
        Grammar g = parse_ok(gbnf);
        std::vector<Stack> st = initial_stacks(g);
        for (char c : prefix) st = advance(g, st, static_cast<unsigned char>(c));
        // The stack inside the string ([^"]), not the one at its closing quote.
        for (const Stack& one : st)
            if (!one.empty() && g.element(one.back()).negated)
                return top_signature(g, stack_top(one), 4096);
        ADD_FAILURE() << "no stack inside the string after " << prefix;
        return std::string();
    };
    const std::string a = top_in(R"(root ::= "{\"a\":" s "}"
s ::= "\"" [^"]{0,9} "\"")",
                                 "{\"a\":\"xy");
    const std::string b = top_in(R"(root ::= "[" [0-9]+ "," t "]"
t ::= "\"" [^"]{0,9} "\"")",
                                 "[12,\"pq");
    const std::string c = top_in(R"(root ::= "[" [0-9]+ "," t "]"
t ::= "\"" [^"]{0,12} "\"")",
                                 "[12,\"pq");
    EXPECT_FALSE(a.empty());
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
}

// ...so a second schema takes the string tops the first computed, and its masks still equal
// the whole walk.
TEST(GrammarMask, SchemasShareTopsThroughTheirCompiler) {
    const auto vocab = engine::grammar_vocabulary(*testing::default_model().tokenizer);
    engine::ConstraintCompiler compiler(vocab);
    auto schema = [&](const char* text) {
        engine::Constraint c;
        c.kind = engine::Constraint::Kind::JsonSchema;
        c.schema = nlohmann::ordered_json::parse(text);
        auto cg = compiler.compile(c);
        EXPECT_TRUE(cg.ok()) << cg.error().message;
        return *cg;
    };
    auto first = schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":20}},
        "required":["name"],"additionalProperties":false})");
    auto second = schema(R"({"type":"object","properties":{"id":{"type":"integer"},
        "title":{"type":"string","maxLength":20}},"required":["id","title"],
        "additionalProperties":false})");
    auto walk = [&](const std::shared_ptr<const CompiledGrammar>& cg, const std::string& text) {
        Matcher m(cg);
        std::vector<Stack> stacks = cg->start();
        for (char ch : text) {
            ASSERT_EQ(m.mask()->bits, compute_mask(cg->grammar(), *vocab, stacks, "").bits)
                << "before '" << ch << "'";
            ASSERT_TRUE(m.accept_text(std::string(1, ch)));
            stacks = advance(cg->grammar(), stacks, static_cast<unsigned char>(ch));
        }
    };
    walk(first, R"({"name":"a short one"})");
    EXPECT_EQ(first->stats().tops_shared, 0);
    walk(second, R"({"id":7,"title":"another"})");
    EXPECT_GT(second->stats().tops_shared, 8);  // the title's characters
}

}  // namespace
}  // namespace ferry::grammar

namespace ferry::engine {
namespace {

// Greedy decoding under a mask reads the logits in place: the same pick as masking a copy and
// taking its argmax, over sparse and dense masks, whole and partial words, ties (the lowest
// id), a vocabulary that ends inside a word, and a mask that allows nothing.
TEST(MaskedArgmax, PicksWhatTheMaskedCopysArgmaxPicks) {
    std::mt19937 rng(3);
    for (int n_vocab : {1, 63, 64, 200, 1000}) {
        for (int trial = 0; trial < 60; ++trial) {
            std::vector<float> logits(n_vocab);
            for (float& x : logits) x = static_cast<float>(rng() % 7);  // many ties
            grammar::TokenMask mask(n_vocab);
            const int density = trial % 4;  // none, sparse, half, all
            for (int id = 0; id < n_vocab; ++id)
                if (density == 3 || (density == 2 && rng() % 2) ||
                    (density == 1 && rng() % 17 == 0))
                    mask.set(id);
            std::vector<float> masked;
            const bool any = mask_logits(mask, logits.data(), n_vocab, masked);
            const int32_t got = masked_argmax(mask, logits.data(), n_vocab);
            if (!any) {
                EXPECT_EQ(got, -1);
                continue;
            }
            const auto want = static_cast<int32_t>(std::max_element(masked.begin(), masked.end()) -
                                                   masked.begin());
            ASSERT_EQ(got, want) << "n_vocab " << n_vocab << " trial " << trial;
            EXPECT_TRUE(mask.test(got));
        }
    }
}

}  // namespace
}  // namespace ferry::engine
