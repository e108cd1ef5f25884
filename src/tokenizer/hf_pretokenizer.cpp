#include "tokenizer/hf_pretokenizer.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_json.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

namespace {

using Behavior = HfPreTokenizer::Behavior;
using Span = std::pair<size_t, size_t>;

// GPT-2's pattern, as tokenizers' ByteLevel spells it.
constexpr const char* kByteLevelRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::optional<Behavior> behavior_named(const std::string& s) {
    if (s == "Removed") return Behavior::Removed;
    if (s == "Isolated") return Behavior::Isolated;
    if (s == "MergedWithPrevious") return Behavior::MergedWithPrevious;
    if (s == "MergedWithNext") return Behavior::MergedWithNext;
    if (s == "Contiguous") return Behavior::Contiguous;
    return std::nullopt;
}

// tokenizers' NormalizedString::split: the text cut into matches and the gaps between them,
// then joined or dropped by the behaviour. Empty results are dropped.
std::vector<Span> split_by(std::string_view text, const std::vector<Span>& found, Behavior how,
                           bool invert) {
    std::vector<std::pair<Span, bool>> parts;  // (span, is a match)
    if (text.empty()) {
        parts.push_back({{0, 0}, false});
    } else {
        size_t prev = 0;
        for (auto [b, e] : found) {
            if (prev != b) parts.push_back({{prev, b}, false});
            parts.push_back({{b, e}, true});
            prev = e;
        }
        if (prev != text.size()) parts.push_back({{prev, text.size()}, false});
    }
    if (invert)
        for (auto& p : parts) p.second = !p.second;

    std::vector<std::pair<Span, bool>> kept;
    bool previous_match = false;
    switch (how) {
        case Behavior::Removed:
            for (auto& p : parts)
                if (!p.second) kept.push_back(p);
            break;
        case Behavior::Isolated:
            kept = parts;
            break;
        case Behavior::MergedWithPrevious:
            for (auto& p : parts) {
                if (p.second && !previous_match && !kept.empty())
                    kept.back().first.second = p.first.second;
                else
                    kept.push_back(p);
                previous_match = p.second;
            }
            break;
        case Behavior::MergedWithNext:
            for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
                if (it->second && !previous_match && !kept.empty())
                    kept.back().first.first = it->first.first;
                else
                    kept.push_back(*it);
                previous_match = it->second;
            }
            std::reverse(kept.begin(), kept.end());
            break;
        case Behavior::Contiguous:
            for (auto& p : parts) {
                if (p.second == previous_match && !kept.empty())
                    kept.back().first.second = p.first.second;
                else
                    kept.push_back({p.first, false});
                previous_match = p.second;
            }
            break;
    }
    std::vector<Span> out;
    for (auto& [span, m] : kept)
        if (span.second > span.first) out.push_back(span);
    return out;
}

void split_pieces(std::vector<PrePiece>& pieces, const Regex& pattern, Behavior how, bool invert) {
    std::vector<PrePiece> next;
    for (PrePiece& p : pieces) {
        for (auto [b, e] : split_by(p.text, pattern.find_all(p.text), how, invert))
            next.push_back({p.text.substr(b, e - b), p.at_origin && b == 0});
    }
    pieces.swap(next);
}

}  // namespace

Status HfPreTokenizer::add(const nlohmann::json& j, std::vector<Step>& steps) {
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        for (const auto& p : j.value("pretokenizers", nlohmann::json::array()))
            if (Status s = add(p, steps); !s) return s;
        return {};
    }
    if (type == "ByteLevel") {
        Step s{Kind::ByteLevel};
        s.add_prefix_space = j.value("add_prefix_space", true);
        if (j.value("use_regex", true)) {
            auto re = Regex::compile(kByteLevelRegex, false);
            if (!re) return re.error();
            s.pattern = std::move(re.value());
        }
        steps.push_back(std::move(s));
        return {};
    }
    if (type == "Metaspace") {
        Step s{Kind::Metaspace};
        s.replacement = j.value("replacement", "\xE2\x96\x81");
        if (utf8_valid_prefix(s.replacement) != s.replacement.size() || s.replacement.empty() ||
            static_cast<size_t>(utf8_len(static_cast<uint8_t>(s.replacement[0]))) !=
                s.replacement.size())
            return make_error("tokenizer.json: Metaspace replacement must be one character");
        // Older files say add_prefix_space instead of prepend_scheme.
        std::string scheme =
            j.value("prepend_scheme", j.value("add_prefix_space", true) ? "always" : "never");
        if (scheme == "always")
            s.prepend = Prepend::Always;
        else if (scheme == "first")
            s.prepend = Prepend::First;
        else if (scheme == "never")
            s.prepend = Prepend::Never;
        else
            return make_error("tokenizer.json: Metaspace prepend_scheme '{}' is unknown", scheme);
        s.split = j.value("split", true);
        auto re = Regex::compile(s.replacement, true);
        if (!re) return re.error();
        s.pattern = std::move(re.value());
        steps.push_back(std::move(s));
        return {};
    }
    if (type == "Split") {
        Step s{Kind::Split};
        auto re = json_pattern(j.value("pattern", nlohmann::json()));
        if (!re) return Error{"pre_tokenizer Split: " + re.error().message};
        s.pattern = std::move(re.value());
        auto how = behavior_named(j.value("behavior", ""));
        if (!how)
            return make_error("tokenizer.json: Split behavior '{}' is unknown",
                              j.value("behavior", ""));
        s.behavior = *how;
        s.invert = j.value("invert", false);
        steps.push_back(std::move(s));
        return {};
    }
    if (type == "Digits") {
        // char::is_numeric is the Unicode N categories; runs of them are Contiguous pieces.
        Step s{Kind::Split};
        bool individual = j.value("individual_digits", false);
        auto re = Regex::compile(individual ? R"(\p{N})" : R"(\p{N}+)", false);
        if (!re) return re.error();
        s.pattern = std::move(re.value());
        s.behavior = Behavior::Isolated;
        steps.push_back(std::move(s));
        return {};
    }
    if (type == "WhitespaceSplit") {
        Step s{Kind::Split};
        auto re = Regex::compile(R"(\s+)", false);
        if (!re) return re.error();
        s.pattern = std::move(re.value());
        s.behavior = Behavior::Removed;
        steps.push_back(std::move(s));
        return {};
    }
    return unsupported("pre_tokenizer", type,
                       "ByteLevel, Metaspace, Split, Digits, WhitespaceSplit, Sequence");
}

Expected<HfPreTokenizer> HfPreTokenizer::from_json(const nlohmann::json& j) {
    HfPreTokenizer p;
    if (j.is_null()) return p;
    if (Status s = add(j, p.steps_); !s) return s.error();
    return p;
}

void HfPreTokenizer::split(std::vector<PrePiece>& pieces) const {
    for (const Step& s : steps_) {
        switch (s.kind) {
            case Kind::ByteLevel:
                for (PrePiece& p : pieces)
                    if (s.add_prefix_space && (p.text.empty() || p.text[0] != ' '))
                        p.text = " " + p.text;  // (insert(0, ...) trips GCC 12's -Wrestrict)
                if (s.pattern) split_pieces(pieces, *s.pattern, Behavior::Isolated, false);
                for (PrePiece& p : pieces) p.text = bytes_to_unicode(p.text);
                break;
            case Kind::Metaspace:
                for (PrePiece& p : pieces) {
                    std::string t;
                    t.reserve(p.text.size() + 8);
                    for (char c : p.text) {
                        if (c == ' ')
                            t += s.replacement;
                        else
                            t += c;
                    }
                    bool starts = t.compare(0, s.replacement.size(), s.replacement) == 0;
                    if (!starts && (s.prepend == Prepend::Always ||
                                    (s.prepend == Prepend::First && p.at_origin)))
                        t.insert(0, s.replacement);
                    p.text = std::move(t);
                }
                if (s.split) split_pieces(pieces, *s.pattern, Behavior::MergedWithNext, false);
                break;
            case Kind::Split:
            case Kind::WhitespaceSplit:
                split_pieces(pieces, *s.pattern, s.behavior, s.invert);
                break;
        }
        std::erase_if(pieces, [](const PrePiece& p) { return p.text.empty(); });
    }
}

}  // namespace ferry::tokenizer
