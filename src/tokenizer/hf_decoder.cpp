#include "tokenizer/hf_decoder.h"

#include <nlohmann/json.hpp>

#include "tokenizer/hf_json.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

namespace {

// "<0x0A>" -> 10; -1 for anything else (tokenizers' ByteFallback test).
int byte_value(std::string_view t) {
    if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
    int v = 0;
    for (char c : t.substr(3, 2)) {
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

// The characters of valid UTF-8 text, one string each.
std::vector<std::string_view> chars_of(std::string_view s) {
    std::vector<std::string_view> out;
    for (size_t i = 0; i < s.size();) {
        size_t n = std::min<size_t>(utf8_len(static_cast<uint8_t>(s[i])), s.size() - i);
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

std::string lossy(std::string_view bytes) {
    std::string out;
    utf8_sanitize(bytes, /*at_end=*/true, out);
    return out;
}

}  // namespace

Status HfDecoder::add(const nlohmann::json& j, std::vector<Step>& steps) {
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        for (const auto& d : j.value("decoders", nlohmann::json::array()))
            if (Status s = add(d, steps); !s) return s;
        return {};
    }
    if (type == "ByteLevel") {
        steps.push_back({Kind::ByteLevel});
        return {};
    }
    if (type == "Metaspace") {
        Step s{Kind::Metaspace, j.value("replacement", "\xE2\x96\x81")};
        std::string scheme =
            j.value("prepend_scheme", j.value("add_prefix_space", true) ? "always" : "never");
        s.prepend = scheme != "never";
        steps.push_back(std::move(s));
        return {};
    }
    if (type == "ByteFallback") {
        steps.push_back({Kind::ByteFallback});
        return {};
    }
    if (type == "Fuse") {
        steps.push_back({Kind::Fuse});
        return {};
    }
    if (type == "Strip") {
        Step s{Kind::Strip, j.value("content", " ")};
        s.start = j.value("start", size_t{0});
        s.stop = j.value("stop", size_t{0});
        steps.push_back(std::move(s));
        return {};
    }
    if (type == "Replace") {
        auto re = json_pattern(j.value("pattern", nlohmann::json()));
        if (!re) return Error{"decoder Replace: " + re.error().message};
        steps.push_back({Kind::Replace, j.value("content", ""), std::move(re.value())});
        return {};
    }
    return unsupported("decoder", type,
                       "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence");
}

Expected<HfDecoder> HfDecoder::from_json(const nlohmann::json& j) {
    HfDecoder d;
    if (j.is_null()) return d;
    d.none_ = false;
    if (Status s = add(j, d.steps_); !s) return s.error();
    return d;
}

std::string HfDecoder::decode(std::vector<std::string> toks, bool at_start, bool raw) const {
    if (none_) {  // tokenizers joins the tokens with spaces when there is no decoder
        std::string out;
        for (size_t i = 0; i < toks.size(); ++i) {
            if (i > 0 || !at_start) out += ' ';
            out += toks[i];
        }
        return out;
    }
    bool fused = false;  // the list is one string: the whole text
    for (const Step& s : steps_) {
        switch (s.kind) {
            case Kind::ByteLevel: {
                std::string bytes;
                for (const std::string& t : toks) {
                    std::string b = unicode_to_bytes(t);
                    // A token with a character outside the byte alphabet keeps its own bytes.
                    if (bytes_to_unicode(b) != t) b = t;
                    bytes += b;
                }
                toks.assign(1, raw ? bytes : lossy(bytes));
                fused = true;
                break;
            }
            case Kind::Metaspace:
                for (size_t i = 0; i < toks.size(); ++i) {
                    std::string out;
                    for (auto c : chars_of(toks[i])) {
                        if (c != s.text)
                            out += c;
                        else if (!(i == 0 && at_start && s.prepend))
                            out += ' ';
                    }
                    toks[i] = std::move(out);
                }
                break;
            case Kind::ByteFallback: {
                std::vector<std::string> out;
                std::string run;
                size_t run_tokens = 0;
                auto end_run = [&] {
                    if (run_tokens == 0) return;
                    if (raw || utf8_valid_prefix(run) == run.size())
                        out.push_back(run);
                    else
                        for (size_t k = 0; k < run_tokens; ++k) out.push_back("\xEF\xBF\xBD");
                    run.clear();
                    run_tokens = 0;
                };
                for (std::string& t : toks) {
                    if (int b = byte_value(t); b >= 0) {
                        run += static_cast<char>(b);
                        ++run_tokens;
                    } else {
                        end_run();
                        out.push_back(std::move(t));
                    }
                }
                end_run();
                toks.swap(out);
                break;
            }
            case Kind::Fuse: {
                std::string all;
                for (const std::string& t : toks) all += t;
                toks.assign(1, std::move(all));
                fused = true;
                break;
            }
            case Kind::Strip:
                for (size_t i = 0; i < toks.size(); ++i) {
                    auto cs = chars_of(toks[i]);
                    size_t b = 0, e = cs.size();
                    // After Fuse the first string is the text's start only at the start.
                    if (!(i == 0 && fused && !at_start))
                        while (b < s.start && b < e && cs[b] == s.text) ++b;
                    for (size_t k = 0; k < s.stop && e > b && cs[e - 1] == s.text; ++k) --e;
                    std::string out;
                    for (size_t k = b; k < e; ++k) out += cs[k];
                    toks[i] = std::move(out);
                }
                break;
            case Kind::Replace:
                for (std::string& t : toks) t = replace_all(*s.pattern, t, s.text);
                break;
        }
    }
    std::string out;
    for (const std::string& t : toks) out += t;
    return out;
}

}  // namespace ferry::tokenizer
