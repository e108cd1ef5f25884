#include "grammar/grammar.h"

#include <algorithm>
#include <map>
#include <optional>

#include "grammar/stack.h"

namespace ferry::grammar {

bool Element::matches(uint32_t cp) const {
    bool in = false;
    for (const auto& [lo, hi] : ranges)
        if (cp >= lo && cp <= hi) {
            in = true;
            break;
        }
    return in != negated;
}

namespace {

// Beyond these a grammar is refused: repetition counts expand into rules, and a schema's
// maxLength or a regex's {m,n} must not turn into gigabytes.
constexpr size_t kMaxElements = 4'000'000;
constexpr uint32_t kMaxRepeat = 10'000;

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

}  // namespace

// Reads GBNF into rules of alternatives of element sequences, then flattens them.
class GbnfParser {
  public:
    explicit GbnfParser(std::string_view src) : s_(src) {}

    Expected<Grammar> run() {
        skip(true);
        while (pos_ < s_.size()) {
            if (!parse_rule()) return *err_;
            skip(true);
        }
        return finish();
    }

  private:
    using Seq = std::vector<Element>;
    using Alts = std::vector<Seq>;

    bool fail(std::string what) {
        if (!err_) {
            size_t line = 1 + std::count(s_.begin(), s_.begin() + std::min(pos_, s_.size()), '\n');
            err_ = make_error("grammar line {}: {}", line, what);
        }
        return false;
    }
    bool at_end() const { return pos_ >= s_.size(); }
    char peek() const { return at_end() ? '\0' : s_[pos_]; }

    // Blanks and comments; newlines only when `newlines` is set.
    void skip(bool newlines) {
        while (!at_end()) {
            const char c = s_[pos_];
            if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
                ++pos_;
            } else if (c == '#') {
                while (!at_end() && s_[pos_] != '\n') ++pos_;
            } else {
                break;
            }
        }
    }

    uint32_t rule_id(const std::string& name) {
        auto [it, fresh] = ids_.try_emplace(name, static_cast<uint32_t>(rules_.size()));
        if (fresh) {
            rules_.emplace_back();
            names_.push_back(name);
            defined_.push_back(false);
        }
        return it->second;
    }
    uint32_t new_rule(const std::string& base, Alts alts) {
        std::string name;
        do name = base + "-" + std::to_string(++generated_);
        while (ids_.count(name));
        const uint32_t id = rule_id(name);
        rules_[id] = std::move(alts);
        defined_[id] = true;
        return id;
    }
    static Element ref(uint32_t rule) {
        Element e;
        e.kind = Element::Ref;
        e.rule = rule;
        return e;
    }
    static Element chars(std::vector<std::pair<uint32_t, uint32_t>> r, bool negated = false) {
        Element e;
        e.kind = Element::Chars;
        e.ranges = std::move(r);
        e.negated = negated;
        return e;
    }

    bool parse_rule() {
        const size_t start = pos_;
        while (!at_end() && is_name_char(s_[pos_])) ++pos_;
        if (pos_ == start) return fail(fmt::format("expected a rule name, found '{}'", peek()));
        const std::string name(s_.substr(start, pos_ - start));
        skip(false);
        if (s_.substr(pos_, 3) != "::=")
            return fail(fmt::format("expected '::=' after '{}'", name));
        pos_ += 3;
        skip(true);
        const uint32_t id = rule_id(name);
        if (defined_[id]) return fail(fmt::format("rule '{}' is defined twice", name));
        current_ = name;
        Alts alts;
        if (!parse_alternates(alts, false)) return false;
        rules_[id] = std::move(alts);
        defined_[id] = true;
        if (!at_end() && peek() != '\n')
            return fail(fmt::format("unexpected '{}' in rule '{}'", peek(), name));
        return true;
    }

    bool parse_alternates(Alts& out, bool nested) {
        out.emplace_back();
        if (!parse_sequence(out.back(), nested)) return false;
        while (peek() == '|') {
            ++pos_;
            skip(true);
            out.emplace_back();
            if (!parse_sequence(out.back(), nested)) return false;
        }
        return true;
    }

    bool parse_escape(uint32_t& cp) {
        // at the character after the backslash
        if (at_end()) return fail("a '\\' at the end of the grammar");
        const char c = s_[pos_++];
        auto hex = [&](int n) {
            if (pos_ + n > s_.size()) return fail("a truncated escape");
            uint32_t v = 0;
            for (int k = 0; k < n; ++k) {
                const char h = s_[pos_ + k];
                int d = (h >= '0' && h <= '9')   ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
                if (d < 0) return fail(fmt::format("'{}' is not a hex digit in an escape", h));
                v = v * 16 + static_cast<uint32_t>(d);
            }
            pos_ += n;
            cp = v;
            return true;
        };
        switch (c) {
            case 'n':
                cp = '\n';
                return true;
            case 'r':
                cp = '\r';
                return true;
            case 't':
                cp = '\t';
                return true;
            case 'x':
                return hex(2);
            case 'u':
                return hex(4);
            case 'U':
                return hex(8);
            case '\\':
            case '"':
            case '[':
            case ']':
            case '-':
            case '^':
            case '/':
            case '.':
            case '(':
            case ')':
            case '*':
            case '+':
            case '?':
            case '|':
            case '{':
            case '}':
                cp = static_cast<uint8_t>(c);
                return true;
            default:
                return fail(fmt::format("unknown escape '\\{}'", c));
        }
    }

    bool parse_char(uint32_t& cp) {
        if (s_[pos_] == '\\') {
            ++pos_;
            return parse_escape(cp);
        }
        cp = decode_utf8(s_, pos_);
        return true;
    }

    bool parse_class(Seq& seq) {
        ++pos_;  // '['
        bool negated = false;
        if (peek() == '^') {
            negated = true;
            ++pos_;
        }
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        while (!at_end() && s_[pos_] != ']') {
            uint32_t lo = 0, hi = 0;
            if (!parse_char(lo)) return false;
            hi = lo;
            if (peek() == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
                ++pos_;
                if (!parse_char(hi)) return false;
                if (hi < lo) return fail("a character range whose end is before its start");
            }
            ranges.emplace_back(lo, hi);
        }
        if (at_end()) return fail("an unterminated character class");
        ++pos_;
        seq.push_back(chars(std::move(ranges), negated));
        return true;
    }

    // Wraps seq[from, end) into `atom{lo,hi}` (hi < 0: unbounded).
    bool repeat(Seq& seq, size_t from, uint32_t lo, int64_t hi) {
        if (from >= seq.size()) return fail("a repetition operator with nothing before it");
        if (lo > kMaxRepeat || hi > static_cast<int64_t>(kMaxRepeat))
            return fail(fmt::format("a repetition count above {}", kMaxRepeat));
        if (hi >= 0 && hi < lo) return fail("a repetition {m,n} with n < m");
        Seq atom(seq.begin() + from, seq.end());
        seq.resize(from);
        Element unit = atom.size() == 1 ? atom[0] : ref(new_rule(current_, Alts{atom}));
        for (uint32_t k = 0; k < lo; ++k) seq.push_back(unit);
        if (hi < 0) {
            // rest ::= unit rest | (empty)
            const uint32_t rest = new_rule(current_, {});
            rules_[rest] = Alts{Seq{unit, ref(rest)}, Seq{}};
            seq.push_back(ref(rest));
        } else if (hi > lo) {
            // opt_k ::= unit opt_{k-1} | (empty), nested hi - lo deep
            uint32_t inner = new_rule(current_, Alts{Seq{unit}, Seq{}});
            chains_.push_back({unit.kind == Element::Ref ? unit.rule : kCharClass, {inner}});
            for (int64_t k = lo + 1; k < hi; ++k) {
                inner = new_rule(current_, Alts{Seq{unit, ref(inner)}, Seq{}});
                chains_.back().links.push_back(inner);
            }
            seq.push_back(ref(inner));
        }
        elements_budget_ += (lo + (hi < 0 ? 2 : hi - lo)) * 3;
        if (elements_budget_ > kMaxElements) return fail("the grammar is too large");
        return true;
    }

    bool parse_number(uint32_t& v) {
        const size_t start = pos_;
        uint64_t x = 0;
        while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') {
            x = x * 10 + (s_[pos_++] - '0');
            if (x > 1'000'000'000) return fail("a repetition count is too large");
        }
        if (pos_ == start) return fail("expected a number in {m,n}");
        v = static_cast<uint32_t>(x);
        return true;
    }

    bool parse_sequence(Seq& seq, bool nested) {
        size_t last = seq.size();
        bool have_last = false;
        while (true) {
            skip(nested);
            if (at_end()) break;
            const char c = s_[pos_];
            if (c == '"') {
                ++pos_;
                last = seq.size();
                while (!at_end() && s_[pos_] != '"') {
                    uint32_t cp;
                    if (!parse_char(cp)) return false;
                    seq.push_back(chars({{cp, cp}}));
                }
                if (at_end()) return fail("an unterminated string literal");
                ++pos_;
                have_last = seq.size() > last;
                if (!have_last) {
                    last = seq.size();  // "" is empty: nothing to repeat
                }
            } else if (c == '[') {
                last = seq.size();
                if (!parse_class(seq)) return false;
                have_last = true;
            } else if (c == '.') {
                ++pos_;
                last = seq.size();
                seq.push_back(chars({}, true));
                have_last = true;
            } else if (is_name_char(c)) {
                const size_t start = pos_;
                while (!at_end() && is_name_char(s_[pos_])) ++pos_;
                // A name followed by ::= starts the next rule (only reachable when nested,
                // which is an unclosed parenthesis).
                last = seq.size();
                seq.push_back(ref(rule_id(std::string(s_.substr(start, pos_ - start)))));
                referenced_.emplace(seq.back().rule, line_at(start));
                have_last = true;
            } else if (c == '(') {
                ++pos_;
                skip(true);
                Alts alts;
                if (!parse_alternates(alts, true)) return false;
                skip(true);
                if (peek() != ')') return fail("expected ')'");
                ++pos_;
                last = seq.size();
                if (alts.size() == 1) {
                    for (auto& e : alts[0]) seq.push_back(std::move(e));
                    have_last = seq.size() > last;
                    if (have_last && seq.size() - last > 1) {
                        // keep the group as one unit for a following operator
                        Seq atom(seq.begin() + last, seq.end());
                        seq.resize(last);
                        seq.push_back(ref(new_rule(current_, Alts{atom})));
                    }
                } else {
                    seq.push_back(ref(new_rule(current_, std::move(alts))));
                    have_last = true;
                }
            } else if (c == '*' || c == '+' || c == '?') {
                ++pos_;
                if (!have_last) return fail(fmt::format("'{}' with nothing before it", c));
                if (!repeat(seq, last, c == '+' ? 1 : 0, c == '?' ? 1 : -1)) return false;
                have_last = false;
            } else if (c == '{') {
                ++pos_;
                if (!have_last) return fail("'{' with nothing before it");
                skip(false);
                uint32_t lo;
                if (!parse_number(lo)) return false;
                skip(false);
                int64_t hi = lo;
                if (peek() == ',') {
                    ++pos_;
                    skip(false);
                    if (peek() == '}') {
                        hi = -1;
                    } else {
                        uint32_t h;
                        if (!parse_number(h)) return false;
                        hi = h;
                    }
                    skip(false);
                }
                if (peek() != '}') return fail("expected '}' closing a repetition");
                ++pos_;
                if (!repeat(seq, last, lo, hi)) return false;
                have_last = false;
            } else {
                break;  // '|', ')', newline, or an error the caller reports
            }
            if (seq.size() > kMaxElements) return fail("the grammar is too large");
        }
        return true;
    }

    size_t line_at(size_t p) const { return 1 + std::count(s_.begin(), s_.begin() + p, '\n'); }

    Expected<Grammar> finish() {
        for (const auto& [rule, line] : referenced_)
            if (!defined_[rule])
                return make_error("grammar line {}: rule '{}' is used but never defined", line,
                                  names_[rule]);
        auto root = ids_.find("root");
        if (root == ids_.end() || !defined_[root->second])
            return make_error("the grammar has no 'root' rule");
        if (auto e = check_left_recursion()) return *e;

        Grammar g;
        g.root_ = root->second;
        g.names_ = names_;
        g.rules_.resize(rules_.size());
        for (size_t r = 0; r < rules_.size(); ++r)
            for (auto& alt : rules_[r]) {
                g.rules_[r].push_back(static_cast<uint32_t>(g.elements_.size()));
                for (auto& e : alt) g.elements_.push_back(std::move(e));
                g.elements_.emplace_back();  // End
                if (g.elements_.size() > kMaxElements)
                    return make_error("the grammar is too large");
            }
        link_chains(g);
        return g;
    }

    // Grammar::widest for every link of every bounded repetition whose unit cannot be empty.
    void link_chains(Grammar& g) const {
        const std::vector<char> empty_ok = nullable_rules();
        for (const Chain& c : chains_) {
            if (c.unit_rule != kCharClass && empty_ok[c.unit_rule]) continue;
            if (g.widest_.empty()) g.widest_.resize(g.elements_.size(), {0, 0});
            const uint32_t longest = g.rules_[c.links.back()][0];
            // Link k (from the innermost, k = 1) allows k units. At either of its positions
            // a unit is under way (the top of a stack is always a character to match), with
            // k - 1 more after it, so text of k bytes or fewer reaches no bound.
            for (size_t k = 1; k < c.links.size(); ++k) {
                const uint32_t at = g.rules_[c.links[k - 1]][0];
                const auto upto = static_cast<uint32_t>(k);
                g.widest_[at] = {longest, upto};
                if (k > 1) g.widest_[at + 1] = {longest + 1, upto};
            }
        }
    }

    // Rules that can match the empty string.
    std::vector<char> nullable_rules() const {
        const size_t n = rules_.size();
        std::vector<char> nullable(n, 0);
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t r = 0; r < n; ++r) {
                if (nullable[r]) continue;
                for (const auto& alt : rules_[r]) {
                    bool all = true;
                    for (const auto& e : alt)
                        if (e.kind != Element::Ref || !nullable[e.rule]) {
                            all = false;
                            break;
                        }
                    if (all) {
                        nullable[r] = 1;
                        changed = true;
                        break;
                    }
                }
            }
        }
        return nullable;
    }

    // A rule that can reach itself before consuming a character would expand forever.
    std::optional<Error> check_left_recursion() const {
        const size_t n = rules_.size();
        const std::vector<char> nullable = nullable_rules();
        std::vector<std::vector<uint32_t>> first(n);  // rules reachable with nothing consumed
        for (size_t r = 0; r < n; ++r)
            for (const auto& alt : rules_[r])
                for (const auto& e : alt) {
                    if (e.kind != Element::Ref) break;
                    first[r].push_back(e.rule);
                    if (!nullable[e.rule]) break;
                }
        std::vector<char> color(n, 0);  // 0 new, 1 on the path, 2 done
        std::optional<Error> err;
        std::vector<std::pair<uint32_t, size_t>> stack;
        for (uint32_t s = 0; s < n && !err; ++s) {
            if (color[s]) continue;
            stack.push_back({s, 0});
            color[s] = 1;
            while (!stack.empty() && !err) {
                auto& [r, i] = stack.back();
                if (i < first[r].size()) {
                    const uint32_t t = first[r][i++];
                    if (color[t] == 1)
                        err = make_error(
                            "rule '{}' can recurse into itself without consuming a character "
                            "(left recursion); rewrite it right-recursively",
                            names_[t]);
                    else if (color[t] == 0) {
                        color[t] = 1;
                        stack.push_back({t, 0});
                    }
                } else {
                    color[r] = 2;
                    stack.pop_back();
                }
            }
        }
        return err;
    }

    std::string_view s_;
    size_t pos_ = 0;
    std::optional<Error> err_;
    std::map<std::string, uint32_t> ids_;
    std::vector<Alts> rules_;
    std::vector<std::string> names_;
    std::vector<bool> defined_;
    std::map<uint32_t, size_t> referenced_;
    std::string current_;
    // The links of each bounded repetition, innermost (one unit left) first, and the rule its
    // unit is (kCharClass: a character class, which always takes a character).
    static constexpr uint32_t kCharClass = UINT32_MAX;
    struct Chain {
        uint32_t unit_rule;
        std::vector<uint32_t> links;
    };
    std::vector<Chain> chains_;
    int generated_ = 0;
    size_t elements_budget_ = 0;
};

Expected<Grammar> Grammar::parse(std::string_view gbnf) {
    return GbnfParser(gbnf).run();
}

bool accepts(const Grammar& g, std::string_view text) {
    std::vector<Stack> stacks = initial_stacks(g);
    size_t i = 0;
    while (i < text.size()) {
        const uint32_t cp = decode_utf8(text, i);
        stacks = advance(g, stacks, cp);
        if (stacks.empty()) return false;
    }
    return std::any_of(stacks.begin(), stacks.end(), [](const Stack& s) { return s.empty(); });
}

std::string prefix_rule_names(std::string_view g, std::string_view prefix) {
    std::string out;
    size_t i = 0;
    while (i < g.size()) {
        const char c = g[i];
        if (c == '"' || c == '[') {
            // A literal or a class: copied as is, escapes included.
            const char close = c == '"' ? '"' : ']';
            out += c;
            ++i;
            while (i < g.size() && g[i] != close) {
                if (g[i] == '\\' && i + 1 < g.size()) out += g[i++];
                out += g[i++];
            }
            if (i < g.size()) out += g[i++];
        } else if (c == '#') {
            while (i < g.size() && g[i] != '\n') out += g[i++];
        } else if (is_name_char(c) && !(c >= '0' && c <= '9' && i > 0 && g[i - 1] == '{')) {
            const size_t start = i;
            while (i < g.size() && is_name_char(g[i])) ++i;
            const std::string_view name = g.substr(start, i - start);
            // Digits inside {m,n} are counts, not names.
            const bool count = name.find_first_not_of("0123456789") == std::string_view::npos;
            if (!count) out += prefix;
            out += name;
        } else {
            out += g[i++];
        }
    }
    return out;
}

std::string gbnf_literal(std::string_view text) {
    std::string out = "\"";
    for (const char c : text) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20)
                    out += fmt::format("\\x{:02X}", static_cast<unsigned char>(c));
                else
                    out += c;
        }
    }
    return out + "\"";
}

}  // namespace ferry::grammar
