#include "tokenizer/hf_bpe_model.h"

#include <nlohmann/json.hpp>

#include "tokenizer/hf_json.h"
#include "tokenizer/merge_loop.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

namespace {

uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

Expected<HfBpeModel> HfBpeModel::from_json(const nlohmann::json& j) {
    const std::string type = j.value("type", "BPE");  // old files leave the type out
    if (type != "BPE") return unsupported("model", type, "BPE");
    if (j.contains("dropout") && !j["dropout"].is_null() && j["dropout"].get<double>() > 0)
        return make_error(
            "tokenizer.json: BPE dropout {} samples merges at random; ferry "
            "tokenizes deterministically only",
            j["dropout"].get<double>());
    HfBpeModel m;
    const auto& vocab = j.value("vocab", nlohmann::json::object());
    if (!vocab.is_object() || vocab.empty())
        return make_error("tokenizer.json: the BPE model has no vocab");
    int64_t max_id = -1;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
            return make_error("tokenizer.json: vocab entry '{}' has no id", it.key());
        max_id = std::max(max_id, it.value().get<int64_t>());
    }
    if (max_id >= static_cast<int64_t>(vocab.size()) + kMaxTokenIdGap)
        return make_error("tokenizer.json: vocab id {} is far past its {} entries", max_id,
                          vocab.size());
    m.tokens_.resize(static_cast<size_t>(max_id) + 1);
    m.vocab_.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        auto id = static_cast<int32_t>(it.value().get<int64_t>());
        m.tokens_[id] = it.key();
        m.vocab_[it.key()] = id;
    }
    auto str_or = [&](const char* key) {
        return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
    };
    m.prefix_ = str_or("continuing_subword_prefix");
    m.suffix_ = str_or("end_of_word_suffix");
    m.byte_fallback_ = j.value("byte_fallback", false);
    m.fuse_unk_ = j.value("fuse_unk", false);
    m.ignore_merges_ = j.value("ignore_merges", false);
    if (std::string unk = str_or("unk_token"); !unk.empty()) {
        auto id = m.find(unk);
        if (!id) return make_error("tokenizer.json: unk_token '{}' is not in the vocab", unk);
        m.unk_ = *id;
    }
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
        m.byte_tokens_[b] = m.find(std::string_view(name, sizeof name)).value_or(-1);
    }

    const auto& merges = j.value("merges", nlohmann::json::array());
    m.merges_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& e = merges[rank];
        std::string a, b;
        if (e.is_string()) {  // "a b": exactly one space
            const std::string s = e.get<std::string>();
            size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                return make_error("tokenizer.json: merge {} ('{}') is not two tokens", rank, s);
            a = s.substr(0, sp);
            b = s.substr(sp + 1);
        } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
            a = e[0].get<std::string>();
            b = e[1].get<std::string>();
        } else {
            return make_error("tokenizer.json: merge {} is {}", rank, e.dump());
        }
        auto l = m.find(a), r = m.find(b);
        if (b.size() < m.prefix_.size())
            return make_error("tokenizer.json: merge {} ('{} {}') is shorter than the prefix", rank,
                              a, b);
        auto res = m.find(a + b.substr(m.prefix_.size()));
        // The library refuses such a file too.
        if (!l || !r || !res)
            return make_error("tokenizer.json: merge {} ('{} {}') names a token not in the vocab",
                              rank, a, b);
        // A repeated pair keeps its last rank, as the library's map does.
        m.merges_.insert_or_assign(pair_key(*l, *r), Merge{static_cast<uint32_t>(rank), *res});
    }
    return m;
}

std::optional<int32_t> HfBpeModel::find(std::string_view text) const {
    auto it = vocab_.find(std::string(text));
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

void HfBpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges_)
        if (auto id = find(word)) {
            out.push_back(*id);
            return;
        }
    std::vector<MergeSymbol> syms;
    syms.reserve(word.size());
    std::optional<MergeSymbol> unk;  // an unknown run waiting to be added
    std::string key;
    for (size_t i = 0; i < word.size();) {
        const auto n = std::min<size_t>(
            static_cast<size_t>(utf8_len(static_cast<uint8_t>(word[i]))), word.size() - i);
        std::string_view ch = word.substr(i, n);
        key.clear();
        if (i > 0) key += prefix_;
        key += ch;
        if (i + n == word.size()) key += suffix_;
        const auto start = static_cast<uint32_t>(i);
        i += n;
        if (auto id = find(key)) {
            if (unk) syms.push_back(*unk), unk.reset();
            syms.push_back({*id, start, static_cast<uint32_t>(n), 0, 0});
            continue;
        }
        if (byte_fallback_) {
            bool all = true;
            for (char c : key) all = all && byte_tokens_[static_cast<uint8_t>(c)] >= 0;
            if (all) {
                // One symbol per byte (a prefix's or suffix's bytes too, as the library
                // does); lengths only tell the merge loop which symbols grew.
                for (char c : key)
                    syms.push_back({byte_tokens_[static_cast<uint8_t>(c)], start, 1, 0, 0});
                continue;
            }
        }
        if (unk_ < 0) continue;  // no unknown token: the character is dropped
        if (unk && fuse_unk_) {
            unk->len += static_cast<uint32_t>(n);
        } else {
            if (unk) syms.push_back(*unk);
            unk = MergeSymbol{unk_, start, static_cast<uint32_t>(n), 0, 0};
        }
    }
    if (unk) syms.push_back(*unk);
    if (syms.empty()) return;
    link_symbols(syms);
    merge_symbols(syms, [this](const MergeSymbol& l, const MergeSymbol& r) {
        std::optional<MergeCandidate> c;
        auto it = merges_.find(pair_key(l.id, r.id));
        if (it != merges_.end()) c = MergeCandidate{double(it->second.rank), it->second.result};
        return c;
    });
    for (int i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace ferry::tokenizer
