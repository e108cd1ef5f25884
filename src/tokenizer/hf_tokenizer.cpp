#include "tokenizer/hf_tokenizer.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_json.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

namespace {

using json = nlohmann::json;

// Special tokens that end a generation when a file does not name its EOS otherwise.
constexpr std::string_view kEogTexts[] = {
    "</s>",
    "<|endoftext|>",
    "<eos>",
    "<|im_end|>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<end_of_turn>",
    "<|end|>",
    "<EOT>",
    "<|return|>",
    "<|call|>",
    "<end_of_utterance>",
};

// A path, or the JSON text itself when it starts with '{'.
Expected<json> read_json(std::string_view path_or_text, std::string_view what) {
    std::string text;
    size_t first = path_or_text.find_first_not_of(" \t\r\n");
    if (first != std::string_view::npos && path_or_text[first] == '{') {
        text = std::string(path_or_text);
    } else {
        std::ifstream in{std::string(path_or_text), std::ios::binary};
        if (!in) return make_error("{}: cannot open {}", what, path_or_text);
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
    }
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return make_error("{}: not valid JSON", what);
    if (!j.is_object()) return make_error("{}: not a JSON object", what);
    return j;
}

// tokenizer_config.json names a token as a string or as an AddedToken object.
std::optional<std::string> config_token(const json& config, const char* key) {
    if (!config.is_object() || !config.contains(key)) return std::nullopt;
    const json& v = config[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
        return v["content"].get<std::string>();
    return std::nullopt;
}

// tokenizers' added-token rules in its Rust regex's terms: \w is Unicode's word characters
// (alphabetics, marks, decimal digits, connector punctuation and the joiners; not PCRE2's
// \p{L}\p{N}_, which takes '²' and leaves out combining marks), and `$` is the end of the
// text only, not also before a final newline. Compiled once, on first use from any thread.
struct AddedTokenRegexes {
    std::shared_ptr<const Regex> word_before, word_after, space_before, space_after;
};
const AddedTokenRegexes& added_token_regexes() {
    static const AddedTokenRegexes r = [] {
        const std::string word = R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])";
        auto c = [](const std::string& p) { return Regex::compile(p, false).value(); };
        return AddedTokenRegexes{c(word + R"(\z)"), c("^" + word), c(R"(\s*\z)"), c(R"(^\s*)")};
    }();
    return r;
}

// What a post-processor puts before and after a single sequence.
Status read_post_processor(const json& j, const std::function<Token(const std::string&)>& find,
                           std::vector<Token>& prefix, std::vector<Token>& suffix) {
    if (j.is_null()) return {};
    const std::string type = j.value("type", "");
    if (type == "ByteLevel") return {};  // offsets only
    if (type == "Sequence") {
        for (const auto& p : j.value("processors", json::array())) {
            std::vector<Token> pre, suf;
            if (Status s = read_post_processor(p, find, pre, suf); !s) return s;
            prefix.insert(prefix.begin(), pre.begin(), pre.end());
            suffix.insert(suffix.end(), suf.begin(), suf.end());
        }
        return {};
    }
    if (type == "TemplateProcessing") {
        const json& specials = j.value("special_tokens", json::object());
        bool seen_sequence = false;
        for (const auto& item : j.value("single", json::array())) {
            if (item.contains("Sequence")) {
                seen_sequence = true;
                continue;
            }
            if (!item.contains("SpecialToken"))
                return make_error("tokenizer.json: TemplateProcessing item {} is unknown",
                                  item.dump());
            const std::string name = item["SpecialToken"].value("id", "");
            if (!specials.contains(name))
                return make_error(
                    "tokenizer.json: TemplateProcessing names '{}' but does not "
                    "define it",
                    name);
            for (const auto& id : specials[name].value("ids", json::array()))
                (seen_sequence ? suffix : prefix).push_back(id.get<Token>());
        }
        return {};
    }
    if (type == "BertProcessing" || type == "RobertaProcessing") {
        auto id_of = [&](const char* key) -> Token {
            const json& v = j.value(key, json::array());
            return v.is_array() && v.size() == 2 ? v[1].get<Token>() : Token{-1};
        };
        Token cls = id_of("cls"), sep = id_of("sep");
        if (cls < 0 || sep < 0) return make_error("tokenizer.json: {} needs cls and sep", type);
        prefix.push_back(cls);
        suffix.push_back(sep);
        return {};
    }
    return unsupported("post_processor", type,
                       "TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, "
                       "Sequence");
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_tokenizer_json(
    std::string_view tokenizer_json, std::string_view tokenizer_config_json,
    std::span<const Token> also_eog) {
    auto tok = read_json(tokenizer_json, "tokenizer.json");
    if (!tok) return tok.error();
    json config;
    if (!tokenizer_config_json.empty()) {
        auto c = read_json(tokenizer_config_json, "tokenizer_config.json");
        if (!c) return c.error();
        config = std::move(c.value());
    }
    // The components read their fields with json::value(), which throws on a field of another
    // type than the format's (a fuzz finding: a pre-tokenizer's pattern as a number): one clear
    // error for the file, not an exception out of the loader.
    Expected<std::unique_ptr<HfTokenizer>> t = make_error("tokenizer.json: not read");
    try {
        t = HfTokenizer::create(*tok, config);
    } catch (const nlohmann::json::exception& e) {
        return make_error(
            "tokenizer.json or tokenizer_config.json: a field has the wrong type ({})", e.what());
    }
    if (!t) return t.error();
    for (Token id : also_eog)
        if (Status s = (*t)->end_generation_on(id); !s) return s.error();
    return std::unique_ptr<Tokenizer>(std::move(t.value()));
}

Expected<std::unique_ptr<HfTokenizer>> HfTokenizer::create(const json& j, const json& config) {
    if (!j.contains("model") || !j["model"].is_object())
        return make_error("tokenizer.json: no \"model\"");
    auto model = HfBpeModel::from_json(j["model"]);
    if (!model) return model.error();
    std::unique_ptr<HfTokenizer> t(new HfTokenizer(std::move(model.value())));

    auto normalizer = HfNormalizer::from_json(j.value("normalizer", json()));
    if (!normalizer) return normalizer.error();
    t->normalizer_ = std::move(normalizer.value());
    auto pre = HfPreTokenizer::from_json(j.value("pre_tokenizer", json()));
    if (!pre) return pre.error();
    t->pre_tokenizer_ = std::move(pre.value());
    auto decoder = HfDecoder::from_json(j.value("decoder", json()));
    if (!decoder) return decoder.error();
    t->decoder_ = std::move(decoder.value());

    t->tokens_ = t->model_.tokens();
    for (const auto& a : j.value("added_tokens", json::array())) {
        Added add{a.value("id", Token{-1}),    a.value("content", ""),
                  a.value("special", false),   a.value("lstrip", false),
                  a.value("rstrip", false),    a.value("single_word", false),
                  a.value("normalized", false)};
        if (add.id < 0 || add.content.empty())
            return make_error("tokenizer.json: added token {} has no id or content", a.dump());
        if (add.id >= static_cast<int64_t>(t->tokens_.size()) + kMaxTokenIdGap)
            return make_error(
                "tokenizer.json: added token id {} is far past the {} tokens before it", add.id,
                t->tokens_.size());
        if (static_cast<size_t>(add.id) >= t->tokens_.size()) t->tokens_.resize(add.id + 1);
        t->tokens_[add.id] = add.content;
        t->added_by_id_[add.id] = t->added_.size();
        t->added_.push_back(std::move(add));
    }
    for (size_t i = 0; i < t->added_.size(); ++i) {
        const Added& a = t->added_[i];
        // A normalized added token is looked for in normalized text, so in normalized form.
        AddedSet& set = a.normalized ? t->normalized_added_ : t->raw_added_;
        std::string key = a.normalized ? t->normalizer_.normalize(a.content) : a.content;
        if (key.empty()) continue;
        set.first[static_cast<uint8_t>(key[0])] = true;
        set.max_len = std::max(set.max_len, key.size());
        set.by_text.insert_or_assign(std::move(key), i);
    }

    const auto n = static_cast<Token>(t->tokens_.size());
    t->attrs_.assign(n, TokenAttr::Normal);
    for (Token id = 0; id < n; ++id) {
        if (t->tokens_[id].empty())
            t->attrs_[id] = TokenAttr::Unused;  // an id the file leaves out
        else if (t->model_.byte_fallback() && t->tokens_[id].size() == 6 &&
                 t->tokens_[id].starts_with("<0x") && t->tokens_[id].ends_with(">"))
            t->attrs_[id] = TokenAttr::Byte;
    }
    if (t->model_.unk() >= 0) t->attrs_[t->model_.unk()] = TokenAttr::Unknown;
    for (const Added& a : t->added_)
        t->attrs_[a.id] = a.special ? TokenAttr::Control : TokenAttr::UserDefined;

    auto find = [&](const std::string& s) { return t->find_token(s); };
    if (Status s =
            read_post_processor(j.value("post_processor", json()), find, t->prefix_, t->suffix_);
        !s)
        return s.error();
    for (Token id : t->prefix_)
        if (id < 0 || id >= n)
            return make_error("tokenizer.json: post-processor id {} is not a token", id);
    for (Token id : t->suffix_)
        if (id < 0 || id >= n)
            return make_error("tokenizer.json: post-processor id {} is not a token", id);

    auto bos_text = config_token(config, "bos_token");
    auto eos_text = config_token(config, "eos_token");
    t->bos_ = bos_text ? t->find_token(*bos_text) : (t->prefix_.empty() ? -1 : t->prefix_.front());
    t->eos_ = eos_text ? t->find_token(*eos_text) : (t->suffix_.empty() ? -1 : t->suffix_.back());
    // transformers rebuilds the template when the config says add_bos_token / add_eos_token.
    if (config.is_object() &&
        (config.contains("add_bos_token") || config.contains("add_eos_token"))) {
        t->prefix_.clear();
        t->suffix_.clear();
        if (config.value("add_bos_token", false) && t->bos_ >= 0) t->prefix_.push_back(t->bos_);
        if (config.value("add_eos_token", false) && t->eos_ >= 0) t->suffix_.push_back(t->eos_);
    }

    t->eog_.assign(n, false);
    for (const Added& a : t->added_)
        for (auto text : kEogTexts)
            if (a.special && a.content == text) t->eog_[a.id] = true;
    if (t->eos_ < 0)
        for (auto text : kEogTexts)
            if (Token id = t->find_token(text); id >= 0 && t->attrs_[id] == TokenAttr::Control) {
                t->eos_ = id;
                break;
            }
    if (t->eos_ >= 0) t->eog_[t->eos_] = true;
    return t;
}

std::vector<HfTokenizer::Piece> HfTokenizer::split_added(const std::string& text,
                                                         const AddedSet& set, bool parse_special,
                                                         bool at_origin) const {
    std::vector<Piece> out;
    size_t emitted = 0;
    auto text_until = [&](size_t end) {
        if (end > emitted)
            out.push_back({-1, text.substr(emitted, end - emitted), at_origin && emitted == 0});
    };
    if (!set.by_text.empty()) {
        for (size_t i = 0; i < text.size(); ++i) {
            if (!set.first[static_cast<uint8_t>(text[i])]) continue;
            // The longest added token starting here (the library's leftmost-longest match).
            const Added* hit = nullptr;
            size_t len = std::min(set.max_len, text.size() - i);
            for (; len > 0; --len) {
                auto it = set.by_text.find(text.substr(i, len));
                if (it != set.by_text.end()) {
                    hit = &added_[it->second];
                    break;
                }
            }
            if (!hit) continue;
            size_t start = i, stop = i + len;
            i = stop - 1;  // the search goes on after this match, whatever is decided
            if (!parse_special && hit->special) continue;
            if (hit->single_word) {
                const auto& r = added_token_regexes();
                bool word_before = start > 0 && r.word_before->search(text.substr(0, start));
                bool word_after = stop < text.size() && r.word_after->search(text.substr(stop));
                if (word_before || word_after) continue;
            }
            if (hit->lstrip) {
                auto m = added_token_regexes().space_before->find_all(text.substr(0, start));
                size_t ws = m.empty() ? start : m.front().first;
                start = std::max(ws, emitted);
            }
            if (hit->rstrip) {
                auto m = added_token_regexes().space_after->find_all(text.substr(stop));
                if (!m.empty()) stop += m.front().second;
                i = stop - 1;
            }
            text_until(start);
            out.push_back({hit->id, {}, false});
            emitted = stop;
        }
    }
    text_until(text.size());
    return out;
}

std::vector<Token> HfTokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
    // The library takes Unicode text; invalid bytes reach it as U+FFFD.
    std::string input;
    utf8_sanitize(text, /*at_end=*/true, input);

    std::vector<Token> out;
    if (add_special) out = prefix_;
    for (Piece& raw : split_added(input, raw_added_, parse_special, true)) {
        if (raw.id >= 0) {
            out.push_back(raw.id);
            continue;
        }
        std::string normalized = normalizer_.normalize(raw.text);
        for (Piece& p : split_added(normalized, normalized_added_, parse_special, raw.at_origin)) {
            if (p.id >= 0) {
                out.push_back(p.id);
                continue;
            }
            std::vector<PrePiece> pieces{{std::move(p.text), p.at_origin}};
            pre_tokenizer_.split(pieces);
            for (const PrePiece& w : pieces) model_.tokenize(w.text, out);
        }
    }
    if (add_special) out.insert(out.end(), suffix_.begin(), suffix_.end());
    return out;
}

std::vector<std::string> HfTokenizer::token_strings(std::span<const Token> ids,
                                                    bool render_special) const {
    std::vector<std::string> strs;
    strs.reserve(ids.size());
    for (Token id : ids) {
        if (id < 0 || id >= n_vocab() || tokens_[id].empty()) continue;  // not a token: skipped
        if (!render_special && attrs_[id] == TokenAttr::Control) continue;
        strs.push_back(tokens_[id]);
    }
    return strs;
}

std::string HfTokenizer::token_to_piece(Token id, bool render_special) const {
    return decoder_.decode(token_strings({&id, 1}, render_special), /*at_start=*/false,
                           /*raw=*/true);
}

std::string HfTokenizer::decode(std::span<const Token> ids, bool render_special,
                                bool at_start) const {
    return decoder_.decode(token_strings(ids, render_special), at_start, /*raw=*/false);
}

Status HfTokenizer::end_generation_on(Token id) {
    if (id < 0 || id >= n_vocab())
        return make_error("end-of-generation id {} is not a token (vocabulary of {})", id,
                          n_vocab());
    eog_[id] = true;
    return Status::Ok();
}

bool HfTokenizer::is_eog(Token id) const {
    return id >= 0 && id < n_vocab() && eog_[id];
}

bool HfTokenizer::add_bos() const {
    return bos_ >= 0 && std::find(prefix_.begin(), prefix_.end(), bos_) != prefix_.end();
}

const std::string& HfTokenizer::token_text(Token id) const {
    static const std::string empty;
    return id >= 0 && id < n_vocab() ? tokens_[id] : empty;
}

TokenAttr HfTokenizer::token_attr(Token id) const {
    return id >= 0 && id < n_vocab() ? attrs_[id] : TokenAttr::Undefined;
}

Token HfTokenizer::find_token(std::string_view text) const {
    for (const Added& a : added_)
        if (a.content == text) return a.id;
    return model_.find(text).value_or(-1);
}

}  // namespace ferry::tokenizer
