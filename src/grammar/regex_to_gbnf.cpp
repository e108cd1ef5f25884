#include "grammar/regex_to_gbnf.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "grammar/utf8.h"

namespace ferry::grammar {

namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;
constexpr size_t kMaxPatternChars = 16384;
constexpr int kMaxDepth = 200;
// Characters after expanding counted repetitions: the GBNF parser expands {m,n} into rules, so
// (a{1000}){1000} must stop here rather than there.
constexpr double kMaxExpanded = 200000;
// Nodes made while removing the empty string from repeated nullable groups (see strip_empty).
constexpr size_t kMaxStripNodes = 100000;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges normalize(Ranges r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (const auto& [lo, hi] : r) {
        if (!out.empty() && lo <= out.back().second + 1)
            out.back().second = std::max(out.back().second, hi);
        else
            out.emplace_back(lo, hi);
    }
    return out;
}

Ranges complement(const Ranges& r) {  // r normalized
    Ranges out;
    uint32_t next = 0;
    for (const auto& [lo, hi] : r) {
        if (lo > next) out.emplace_back(next, lo - 1);
        next = hi + 1;
    }
    if (next <= kMaxCp) out.emplace_back(next, kMaxCp);
    return out;
}

Ranges unite(Ranges a, const Ranges& b) {
    a.insert(a.end(), b.begin(), b.end());
    return normalize(std::move(a));
}

Ranges intersect(const Ranges& a, const Ranges& b) {
    return complement(unite(complement(a), complement(b)));
}

bool contains(const Ranges& r, uint32_t cp) {
    for (const auto& [lo, hi] : r)
        if (cp >= lo && cp <= hi) return true;
    return false;
}

size_t count(const Ranges& r) {
    size_t n = 0;
    for (const auto& [lo, hi] : r) n += hi - lo + 1;
    return n;
}

// A class escape as two sets, so that what it produces is right under both ECMA-262 and
// Python (whose \d \w are Unicode-aware and whose \s differs at a few code points): `gen`, the
// characters both dialects put in the class, is what a positive use produces; `excl`, those
// either dialect might put in it, is what a negated class leaves out. Python's Unicode digits
// and letters are all outside ASCII, so for \d and \w everything non-ASCII counts as "might".
struct ClassEscape {
    Ranges gen, excl;
};

ClassEscape negate(const ClassEscape& e) {
    return {complement(e.excl), complement(e.gen)};
}

const ClassEscape& digit_class() {
    static const ClassEscape c = {{{'0', '9'}}, {{'0', '9'}, {0x80, kMaxCp}}};
    return c;
}
const ClassEscape& word_class() {
    static const Ranges ascii = normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
    static const ClassEscape c = {ascii, unite(ascii, {{0x80, kMaxCp}})};
    return c;
}
const ClassEscape& space_class() {
    // Both: ASCII blanks and the Unicode spaces; Python only: \x1C-\x1F, U+0085; ECMA only: U+FEFF.
    static const Ranges both = normalize({{'\t', '\r'},
                                          {' ', ' '},
                                          {0xA0, 0xA0},
                                          {0x1680, 0x1680},
                                          {0x2000, 0x200A},
                                          {0x2028, 0x2029},
                                          {0x202F, 0x202F},
                                          {0x205F, 0x205F},
                                          {0x3000, 0x3000}});
    static const ClassEscape c = {both,
                                  unite(both, {{0x1C, 0x1F}, {0x85, 0x85}, {0xFEFF, 0xFEFF}})};
    return c;
}
const Ranges& dot_set() {
    static const Ranges r = complement(normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
    return r;
}

struct Node {
    enum Kind { Empty, Set, Seq, Alt, Repeat } kind = Empty;
    Ranges set;              // Set, normalized and never empty
    std::vector<Node> kids;  // Seq, Alt: the parts; Repeat: the one repeated
    int min = 0, max = -1;   // Repeat; max < 0: unbounded
};

Node make_set(Ranges r) {
    Node n;
    n.kind = Node::Set;
    n.set = std::move(r);
    return n;
}

// Decodes UTF-8 strictly: a pattern is text, so a broken byte is an error, not a character.
bool decode(std::string_view s, std::vector<uint32_t>& out) {
    for (size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        const int n = utf8_continuations(b);
        if (n < 0 || i + n >= s.size()) return false;
        uint32_t cp = n == 0 ? b : b & (0x3Fu >> n);
        for (int k = 1; k <= n; ++k) {
            const auto c = static_cast<unsigned char>(s[i + k]);
            if ((c >> 6) != 2) return false;
            cp = (cp << 6) | (c & 0x3Fu);
        }
        if (cp > kMaxCp) return false;
        out.push_back(cp);
        i += n + 1;
    }
    return true;
}

class RegexParser {
  public:
    RegexParser(std::vector<uint32_t> cps, size_t offset) : s_(std::move(cps)), offset_(offset) {}

    Expected<Node> run() {
        Node n;
        if (!parse_alt(n, 0)) return *err_;
        if (!at_end()) {
            fail("an unbalanced ')' with no '(' before it");
            return *err_;
        }
        return n;
    }

  private:
    bool at_end() const { return pos_ >= s_.size(); }
    uint32_t peek(size_t ahead = 0) const {
        return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : 0xFFFFFFFF;
    }
    bool eat(uint32_t c) {
        if (peek() != c) return false;
        ++pos_;
        return true;
    }
    bool fail(const std::string& what) {
        if (!err_) err_ = make_error("regex: {} (at character {})", what, pos_ + offset_);
        return false;
    }
    bool refuse(const std::string& what) { return fail(what + " is not supported"); }

    static bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
    static int hex_value(uint32_t c) {
        if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
        if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
        if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
        return -1;
    }

    bool parse_alt(Node& out, int depth) {
        if (depth > kMaxDepth) return fail("groups nested too deeply");
        Node alt;
        alt.kind = Node::Alt;
        do {
            alt.kids.emplace_back();
            if (!parse_seq(alt.kids.back(), depth)) return false;
        } while (eat('|'));
        out = alt.kids.size() == 1 ? std::move(alt.kids[0]) : std::move(alt);
        return true;
    }

    bool parse_seq(Node& out, int depth) {
        Node seq;
        seq.kind = Node::Seq;
        while (!at_end() && peek() != '|' && peek() != ')') {
            Node atom;
            if (!parse_atom(atom, depth) || !parse_quantifiers(atom)) return false;
            seq.kids.push_back(std::move(atom));
        }
        out = std::move(seq);
        return true;
    }

    // `{` starts a quantifier only as {m}, {m,} or {m,n}; otherwise it is a literal, as in both
    // dialects. `{,n}` means {0,n} to Python and is text to ECMA-262, so it is refused.
    enum class Brace { Literal, Quantifier, Ambiguous };
    Brace brace_at(size_t p) const {
        if (p >= s_.size() || s_[p] != '{') return Brace::Literal;
        size_t i = p + 1;
        const size_t start = i;
        while (i < s_.size() && is_digit(s_[i])) ++i;
        const bool lo = i > start;
        if (i < s_.size() && s_[i] == ',') {
            ++i;
            while (i < s_.size() && is_digit(s_[i])) ++i;
        }
        if (i >= s_.size() || s_[i] != '}') return Brace::Literal;
        return lo ? Brace::Quantifier : i == start ? Brace::Literal : Brace::Ambiguous;
    }

    bool parse_number(int& v) {
        int64_t x = 0;
        const size_t start = pos_;
        while (!at_end() && is_digit(peek())) {
            x = x * 10 + (s_[pos_++] - '0');
            if (x > kMaxRegexRepeat)
                return fail(fmt::format("a repetition count above {}", kMaxRegexRepeat));
        }
        if (pos_ == start) return fail("expected a number in {m,n}");
        v = static_cast<int>(x);
        return true;
    }

    bool parse_quantifiers(Node& atom) {
        bool quantified = false;
        while (true) {
            const uint32_t c = peek();
            int lo = 0, hi = -1;
            if (c == '*' || c == '+' || c == '?') {
                ++pos_;
                lo = c == '+' ? 1 : 0;
                hi = c == '?' ? 1 : -1;
            } else if (brace_at(pos_) == Brace::Ambiguous) {
                return refuse("'{,n}' (Python reads it as {0,n}, ECMA-262 as text)");
            } else if (brace_at(pos_) == Brace::Quantifier) {
                ++pos_;
                if (!parse_number(lo)) return false;
                hi = lo;
                if (eat(',')) {
                    hi = -1;
                    if (peek() != '}' && !parse_number(hi)) return false;
                }
                ++pos_;  // '}'
                if (hi >= 0 && hi < lo) return fail("a repetition {m,n} with n < m");
            } else {
                return true;
            }
            if (quantified) return fail("a quantifier that follows another (as in a**)");
            quantified = true;
            if (eat('+')) return refuse("a possessive quantifier");
            eat('?');  // lazy: the same strings, only a different preference
            Node r;
            r.kind = Node::Repeat;
            r.min = lo;
            r.max = hi;
            r.kids.push_back(std::move(atom));
            atom = std::move(r);
        }
    }

    bool parse_atom(Node& out, int depth) {
        const uint32_t c = s_[pos_];
        switch (c) {
            case '(':
                ++pos_;
                return parse_group(out, depth);
            case '[':
                ++pos_;
                return parse_class(out);
            case '.':
                ++pos_;
                out = make_set(dot_set());
                return true;
            case '\\': {
                ++pos_;
                ClassEscape r;
                if (!parse_escape(r, false)) return false;
                out = make_set(std::move(r.gen));
                return true;
            }
            case '^':
            case '$':
                return refuse(fmt::format("an anchor ('{}') that is not at the very start or end",
                                          static_cast<char>(c)));
            case '*':
            case '+':
            case '?':
                return fail(fmt::format("'{}' with nothing to repeat", static_cast<char>(c)));
            default:
                if (brace_at(pos_) != Brace::Literal)
                    return fail("a '{' repetition with nothing to repeat");
                ++pos_;
                out = make_set({{c, c}});
                return true;
        }
    }

    bool parse_name() {
        const size_t start = pos_;
        auto ok = [&](uint32_t c, bool first) {
            return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                   (!first && is_digit(c));
        };
        while (!at_end() && ok(peek(), pos_ == start)) ++pos_;
        if (pos_ == start || !eat('>')) return fail("a malformed group name");
        return true;
    }

    bool parse_group(Node& out, int depth) {
        if (eat('?')) {
            const uint32_t c = peek();
            if (c == ':') {
                ++pos_;
            } else if (c == 'P' && peek(1) == '<') {
                pos_ += 2;
                if (!parse_name()) return false;
            } else if (c == 'P' && peek(1) == '=') {
                return refuse("a backreference (?P=name)");
            } else if (c == '<' && (peek(1) == '=' || peek(1) == '!')) {
                return refuse("a lookbehind (?<= or (?<!");
            } else if (c == '<') {
                ++pos_;
                if (!parse_name()) return false;
            } else if (c == '=' || c == '!') {
                return refuse("a lookahead (?= or (?!");
            } else if (c == '>') {
                return refuse("an atomic group (?>");
            } else if (c == '#') {
                return refuse("a comment group (?#");
            } else if (c == '(') {
                return refuse("a conditional group (?(");
            } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-') {
                return refuse("an inline flag group such as (?i)");
            } else {
                return refuse("this (? group syntax");
            }
        }
        if (!parse_alt(out, depth + 1)) return false;
        if (!eat(')')) return fail("an unbalanced '(' with no ')' after it");
        return true;
    }

    // A class item or escape yields a set; a single character is a one-element set.
    bool parse_escape(ClassEscape& out, bool in_class) {
        if (at_end()) return fail("a trailing backslash");
        const uint32_t c = s_[pos_++];
        auto one = [&](uint32_t cp) {
            out.gen = out.excl = {{cp, cp}};
            return true;
        };
        auto hex = [&](int n) {
            uint32_t v = 0;
            for (int k = 0; k < n; ++k) {
                const int d = hex_value(peek());
                if (d < 0)
                    return fail(fmt::format("a '\\{}' escape without {} hex digits",
                                            static_cast<char>(c), n));
                v = v * 16 + static_cast<uint32_t>(d);
                ++pos_;
            }
            if (v > kMaxCp) return fail("a code point above U+10FFFF");
            return one(v);
        };
        switch (c) {
            case 'd':
                out = digit_class();
                return true;
            case 'D':
                out = negate(digit_class());
                return true;
            case 'w':
                out = word_class();
                return true;
            case 'W':
                out = negate(word_class());
                return true;
            case 's':
                out = space_class();
                return true;
            case 'S':
                out = negate(space_class());
                return true;
            case 'n':
                return one('\n');
            case 't':
                return one('\t');
            case 'r':
                return one('\r');
            case 'f':
                return one('\f');
            case 'v':
                return one('\v');
            case '0':
                if (is_digit(peek())) return refuse("an octal escape");
                return one(0);
            case 'x':
                return hex(2);
            case 'u':
                if (peek() == '{') return refuse("a '\\u{...}' escape");
                return hex(4);
            case 'U':
                return hex(8);
            case 'b':
                if (in_class) return one('\b');
                return refuse("a word boundary '\\b'");
            case 'B':
                return refuse("a word boundary '\\B'");
            case 'A':
            case 'Z':
            case 'z':
            case 'G':
                return refuse(fmt::format("an anchor '\\{}'", static_cast<char>(c)));
            case 'k':
                return refuse("a named backreference '\\k'");
            case 'p':
            case 'P':
                return refuse("a Unicode property escape '\\p'");
            case 'c':
                return refuse("a control escape '\\c'");
            case 'N':
                return refuse("a named character escape '\\N'");
            default:
                if (c >= '1' && c <= '9')
                    return refuse(fmt::format("a backreference '\\{}'", c - '0'));
                if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
                    return fail(fmt::format("an unknown escape '\\{}'", static_cast<char>(c)));
                return one(c);  // escaped punctuation stands for itself
        }
    }

    bool parse_class(Node& out) {
        const bool negated = eat('^');
        if (peek() == ']') return refuse("a ']' first in a class (write '\\]')");
        Ranges gen, excl;
        while (!eat(']')) {
            if (at_end()) return fail("an unterminated character class");
            if (peek() == '[' && (peek(1) == ':' || peek(1) == '=' || peek(1) == '.'))
                return refuse("a POSIX class such as [:alpha:]");
            ClassEscape item;
            if (!parse_class_atom(item)) return false;
            if (peek() == '-' && pos_ + 1 < s_.size() && peek(1) != ']') {
                ++pos_;
                ClassEscape end;
                if (!parse_class_atom(end)) return false;
                if (count(item.excl) != 1 || count(end.excl) != 1)
                    return fail("a class range with a class escape at one end");
                const uint32_t lo = item.gen[0].first, hi = end.gen[0].first;
                if (hi < lo) return fail("a class range whose end is before its start");
                item.gen = item.excl = {{lo, hi}};
            }
            gen = unite(std::move(gen), item.gen);
            excl = unite(std::move(excl), item.excl);
        }
        Ranges set = negated ? complement(excl) : std::move(gen);
        if (set.empty()) return fail("a character class that matches nothing");
        out = make_set(std::move(set));
        return true;
    }

    bool parse_class_atom(ClassEscape& out) {
        if (at_end()) return fail("an unterminated character class");
        const uint32_t c = s_[pos_++];
        if (c == '\\') return parse_escape(out, true);
        out.gen = out.excl = {{c, c}};
        return true;
    }

    std::vector<uint32_t> s_;
    size_t pos_ = 0;
    size_t offset_ = 0;
    std::optional<Error> err_;
};

// ---- simplification ----

bool nullable(const Node& n) {
    switch (n.kind) {
        case Node::Empty:
            return true;
        case Node::Set:
            return false;
        case Node::Seq:
            return std::all_of(n.kids.begin(), n.kids.end(),
                               [](const Node& k) { return nullable(k); });
        case Node::Alt:
            return std::any_of(n.kids.begin(), n.kids.end(),
                               [](const Node& k) { return nullable(k); });
        case Node::Repeat:
            return n.min == 0 || nullable(n.kids[0]);
    }
    return false;
}

Node simplify(Node n) {
    for (auto& k : n.kids) k = simplify(std::move(k));
    switch (n.kind) {
        case Node::Seq: {
            Node out;
            out.kind = Node::Seq;
            for (auto& k : n.kids) {
                if (k.kind == Node::Empty) continue;
                if (k.kind == Node::Seq)
                    for (auto& g : k.kids) out.kids.push_back(std::move(g));
                else
                    out.kids.push_back(std::move(k));
            }
            if (out.kids.empty()) return Node{};
            if (out.kids.size() == 1) return std::move(out.kids[0]);
            return out;
        }
        case Node::Alt: {
            Node out;
            out.kind = Node::Alt;
            for (auto& k : n.kids) {
                if (k.kind == Node::Alt)
                    for (auto& g : k.kids) out.kids.push_back(std::move(g));
                else
                    out.kids.push_back(std::move(k));
            }
            if (out.kids.size() == 1) return std::move(out.kids[0]);
            return out;
        }
        case Node::Repeat:
            if (n.max == 0 || n.kids[0].kind == Node::Empty) return Node{};
            if (n.min == 1 && n.max == 1) return std::move(n.kids[0]);
            return n;
        default:
            return n;
    }
}

// The language of `n` without the empty string (nullopt: nothing is left). A repetition of
// something that can match nothing would make `x*` expand to a left-recursive rule (`r ::= x r`
// with x empty), which the GBNF parser refuses; (x - empty){0,n} is the same language.
class EmptyStripper {
  public:
    bool overflow() const { return made_ > kMaxStripNodes; }

    void fix(Node& n) {
        for (auto& k : n.kids) fix(k);
        if (n.kind != Node::Repeat || !nullable(n.kids[0])) return;
        std::optional<Node> k = strip(n.kids[0]);
        if (!k) {
            n = Node{};
            return;
        }
        n.kids[0] = std::move(*k);
        n.min = 0;
    }

  private:
    std::optional<Node> strip(const Node& n) {
        ++made_;
        if (!nullable(n)) return n;
        if (overflow()) return std::nullopt;
        switch (n.kind) {
            case Node::Alt: {
                Node out;
                out.kind = Node::Alt;
                for (const auto& k : n.kids)
                    if (auto s = strip(k)) out.kids.push_back(std::move(*s));
                if (out.kids.empty()) return std::nullopt;
                if (out.kids.size() == 1) return std::move(out.kids[0]);
                return out;
            }
            case Node::Seq: {
                // All parts can be empty: the first non-empty one is part i.
                Node out;
                out.kind = Node::Alt;
                for (size_t i = 0; i < n.kids.size(); ++i) {
                    auto first = strip(n.kids[i]);
                    if (!first) continue;
                    Node seq;
                    seq.kind = Node::Seq;
                    seq.kids.push_back(std::move(*first));
                    for (size_t j = i + 1; j < n.kids.size(); ++j) seq.kids.push_back(n.kids[j]);
                    made_ += n.kids.size() - i;
                    out.kids.push_back(simplify(std::move(seq)));
                }
                if (out.kids.empty()) return std::nullopt;
                if (out.kids.size() == 1) return std::move(out.kids[0]);
                return out;
            }
            case Node::Repeat: {
                auto k = strip(n.kids[0]);
                if (!k) return std::nullopt;
                Node out = n;
                out.kids[0] = std::move(*k);
                out.min = 1;
                return simplify(std::move(out));
            }
            default:
                return std::nullopt;  // Empty
        }
    }

    size_t made_ = 0;
};

double expanded_size(const Node& n) {
    switch (n.kind) {
        case Node::Empty:
            return 0;
        case Node::Set:
            return 1;
        case Node::Seq:
        case Node::Alt: {
            double s = 0;
            for (const auto& k : n.kids) s += expanded_size(k);
            return s;
        }
        case Node::Repeat: {
            const int copies = n.max < 0 ? std::max(n.min, 1) + 1 : n.max;
            return expanded_size(n.kids[0]) * copies;
        }
    }
    return 0;
}

// ---- emission ----

std::string hex_escape(uint32_t cp) {
    if (cp < 0x80) return fmt::format("\\x{:02X}", cp);
    if (cp <= 0xFFFF) return fmt::format("\\u{:04X}", cp);
    return fmt::format("\\U{:08X}", cp);
}

// Everything outside printable ASCII is written as an escape, so the grammar text is ASCII.
std::string class_char(uint32_t cp) {
    if (cp == '\\' || cp == ']' || cp == '[' || cp == '-' || cp == '^' || cp == '"')
        return std::string("\\") + static_cast<char>(cp);
    if (cp >= 0x20 && cp < 0x7F) return std::string(1, static_cast<char>(cp));
    return hex_escape(cp);
}

std::string literal_char(uint32_t cp) {
    if (cp == '\\' || cp == '"') return std::string("\\") + static_cast<char>(cp);
    if (cp >= 0x20 && cp < 0x7F) return std::string(1, static_cast<char>(cp));
    return hex_escape(cp);
}

std::string literal(const std::vector<uint32_t>& cps) {
    std::string s = "\"";
    for (uint32_t cp : cps) s += literal_char(cp);
    return s + "\"";
}

std::string char_class(const Ranges& set) {
    const Ranges comp = complement(set);
    const bool neg = comp.size() < set.size();
    std::string s = neg ? "[^" : "[";
    for (const auto& [lo, hi] : neg ? comp : set) {
        s += class_char(lo);
        if (hi > lo) s += (hi > lo + 1 ? "-" : "") + class_char(hi);
    }
    return s + "]";
}

// The JSON encoding of one character, as the code points written between the quotes.
void json_encode(uint32_t cp, std::vector<uint32_t>& out) {
    auto text = [&](const char* t) {
        for (; *t; ++t) out.push_back(static_cast<unsigned char>(*t));
    };
    switch (cp) {
        case '"':
            text("\\\"");
            return;
        case '\\':
            text("\\\\");
            return;
        case '\b':
            text("\\b");
            return;
        case '\f':
            text("\\f");
            return;
        case '\n':
            text("\\n");
            return;
        case '\r':
            text("\\r");
            return;
        case '\t':
            text("\\t");
            return;
        default:
            if (cp < 0x20)
                text(fmt::format("\\u{:04x}", cp).c_str());
            else
                out.push_back(cp);
    }
}

struct Expr {
    std::string text;
    bool atomic = true;  // can take a postfix operator without parentheses
};

class Emitter {
  public:
    explicit Emitter(RegexTarget target) : json_(target == RegexTarget::JsonStringContent) {}

    Expr emit(const Node& n) {
        switch (n.kind) {
            case Node::Empty:
                return {"\"\"", true};
            case Node::Set:
                return emit_set(n.set);
            case Node::Seq:
                return emit_seq(n);
            case Node::Alt:
                return emit_alt(n);
            case Node::Repeat:
                return emit_repeat(n);
        }
        return {};
    }

  private:
    std::vector<uint32_t> encode(uint32_t cp) const {
        std::vector<uint32_t> out;
        if (json_)
            json_encode(cp, out);
        else
            out.push_back(cp);
        return out;
    }

    static bool single(const Node& n) { return n.kind == Node::Set && count(n.set) == 1; }

    Expr emit_set(const Ranges& set) {
        if (count(set) == 1) return {literal(encode(set[0].first)), true};
        if (!json_) return {char_class(set), true};
        // Characters JSON writes as themselves are one class; the rest are escapes.
        std::vector<std::string> parts;
        const Ranges plain =
            intersect(set, complement(normalize({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}})));
        if (count(plain) == 1)
            parts.push_back(literal({plain[0].first}));
        else if (!plain.empty())
            parts.push_back(char_class(plain));
        if (contains(set, '"')) parts.push_back("\"\\\\\\\"\"");
        if (contains(set, '\\')) parts.push_back("\"\\\\\\\\\"");
        std::string shorts;
        for (const auto& [cp, letter] : {std::pair<uint32_t, char>{'\b', 'b'},
                                         {'\f', 'f'},
                                         {'\n', 'n'},
                                         {'\r', 'r'},
                                         {'\t', 't'}})
            if (contains(set, cp)) shorts += letter;
        if (shorts.size() == 1) parts.push_back("\"\\\\" + shorts + "\"");
        if (shorts.size() > 1) parts.push_back("\"\\\\\" [" + shorts + "]");
        // Other control characters: \u00xx, grouped by the high hex digit.
        std::string u[2];
        for (uint32_t cp = 0; cp < 0x20; ++cp) {
            if (!contains(set, cp) || cp == '\b' || cp == '\f' || cp == '\n' || cp == '\r' ||
                cp == '\t')
                continue;
            u[cp >> 4] += "0123456789abcdef"[cp & 15];
        }
        std::vector<std::string> us;
        for (int hi = 0; hi < 2; ++hi) {
            if (u[hi].empty()) continue;
            const std::string h(1, static_cast<char>('0' + hi));
            us.push_back(u[hi].size() == 1 ? "\"" + h + u[hi] + "\""
                                           : "\"" + h + "\" [" + u[hi] + "]");
        }
        if (us.size() == 1) parts.push_back("\"\\\\u00\" " + us[0]);
        if (us.size() == 2) parts.push_back("\"\\\\u00\" (" + us[0] + " | " + us[1] + ")");
        if (parts.size() == 1) return {parts[0], parts[0].find(' ') == std::string::npos};
        std::string s = "(";
        for (size_t i = 0; i < parts.size(); ++i) s += (i ? " | " : "") + parts[i];
        return {s + ")", true};
    }

    Expr emit_seq(const Node& n) {
        std::vector<std::string> parts;
        std::vector<uint32_t> run;
        auto flush = [&] {
            if (!run.empty()) parts.push_back(literal(run));
            run.clear();
        };
        for (const auto& k : n.kids) {
            if (single(k)) {
                for (uint32_t cp : encode(k.set[0].first)) run.push_back(cp);
                continue;
            }
            flush();
            Expr e = emit(k);
            parts.push_back(k.kind == Node::Alt ? "(" + e.text + ")" : e.text);
        }
        flush();
        std::string s;
        for (size_t i = 0; i < parts.size(); ++i) s += (i ? " " : "") + parts[i];
        return {s, parts.size() == 1};
    }

    Expr emit_alt(const Node& n) {
        std::string s;
        bool optional = false;
        int shown = 0;
        for (const auto& k : n.kids) {
            if (k.kind == Node::Empty) {
                optional = true;
                continue;
            }
            s += (shown++ ? " | " : "") + emit(k).text;
        }
        if (shown == 0) return {"\"\"", true};
        // An empty alternative becomes `( ... )?`, which says the same more plainly.
        if (optional) return {"(" + s + ")?", false};
        return {s, false};
    }

    Expr emit_repeat(const Node& n) {
        const Expr k = emit(n.kids[0]);
        const std::string base = k.atomic ? k.text : "(" + k.text + ")";
        std::string op;
        if (n.min == 0 && n.max < 0)
            op = "*";
        else if (n.min == 1 && n.max < 0)
            op = "+";
        else if (n.min == 0 && n.max == 1)
            op = "?";
        else if (n.min == n.max)
            op = fmt::format("{{{}}}", n.min);
        else if (n.max < 0)
            op = fmt::format("{{{},}}", n.min);
        else
            op = fmt::format("{{{},{}}}", n.min, n.max);
        return {base + op, false};
    }

    bool json_;
};

}  // namespace

Expected<std::string> regex_to_gbnf(std::string_view pattern, RegexTarget target) {
    std::vector<uint32_t> cps;
    if (!decode(pattern, cps)) return make_error("regex: the pattern is not valid UTF-8");
    if (cps.size() > kMaxPatternChars)
        return make_error("regex: the pattern is longer than {} characters", kMaxPatternChars);
    size_t offset = 1;  // error positions count from 1
    if (!cps.empty() && cps[0] == '^') {
        cps.erase(cps.begin());
        ++offset;
    }
    if (!cps.empty() && cps.back() == '$') {
        size_t backslashes = 0;
        for (size_t i = cps.size() - 1; i > 0 && cps[i - 1] == '\\'; --i) ++backslashes;
        if (backslashes % 2 == 0) cps.pop_back();
    }
    auto parsed = RegexParser(std::move(cps), offset).run();
    if (!parsed) return parsed.error();
    Node root = simplify(std::move(*parsed));
    EmptyStripper stripper;
    stripper.fix(root);
    if (stripper.overflow()) return make_error("regex: the pattern is too complex");
    root = simplify(std::move(root));
    if (expanded_size(root) > kMaxExpanded)
        return make_error("regex: the pattern's repetitions expand to more than {} characters",
                          kMaxExpanded);
    return Emitter(target).emit(root).text;
}

Expected<std::string> regex_grammar(std::string_view pattern) {
    auto e = regex_to_gbnf(pattern, RegexTarget::Raw);
    if (!e) return e.error();
    return "root ::= " + *e + "\n";
}

}  // namespace ferry::grammar
