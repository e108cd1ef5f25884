#include "tokenizer/hf_normalizer.h"

#include <cstdlib>

#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include "tokenizer/hf_json.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

namespace {

// utf8proc's options for each Unicode normal form (STABLE applies the composition exclusions,
// as utf8proc_NFC itself does).
int unicode_form(const std::string& type) {
    constexpr int kStable = UTF8PROC_STABLE;
    if (type == "NFC") return kStable | UTF8PROC_COMPOSE;
    if (type == "NFD") return kStable | UTF8PROC_DECOMPOSE;
    if (type == "NFKC") return kStable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    if (type == "NFKD") return kStable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    return 0;
}

std::string normalize_valid(std::string_view run, int options) {
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                                            static_cast<utf8proc_ssize_t>(run.size()), &out,
                                            static_cast<utf8proc_option_t>(options));
    if (n < 0) return std::string(run);  // only for input the caller found valid: unreachable
    std::string s(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
    return s;
}

// The text in a Unicode normal form. Bytes that are not UTF-8 (a prompt file may hold any)
// stay as they are between the normalized runs around them.
std::string unicode_normalize(const std::string& text, int options) {
    std::string out;
    size_t run = 0, i = 0;
    while (i < text.size()) {
        utf8proc_int32_t cp;
        const utf8proc_ssize_t n =
            utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                             static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
        if (n > 0) {
            i += static_cast<size_t>(n);
            continue;
        }
        out += normalize_valid(std::string_view(text).substr(run, i - run), options);
        out += text[i++];
        run = i;
    }
    if (run == 0) return normalize_valid(text, options);
    out += normalize_valid(std::string_view(text).substr(run), options);
    return out;
}

}  // namespace

Status HfNormalizer::add(const nlohmann::json& j, std::vector<Step>& steps) {
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        for (const auto& n : j.value("normalizers", nlohmann::json::array()))
            if (Status s = add(n, steps); !s) return s;
        return {};
    }
    if (type == "Prepend") {
        steps.push_back({Kind::Prepend, j.value("prepend", ""), nullptr});
        return {};
    }
    if (type == "Replace") {
        auto re = json_pattern(j.value("pattern", nlohmann::json()));
        if (!re) return Error{"normalizer Replace: " + re.error().message};
        steps.push_back({Kind::Replace, j.value("content", ""), std::move(re.value())});
        return {};
    }
    if (type == "Strip") {
        Step s{Kind::Strip, {}, nullptr};
        s.left = j.value("strip_left", true);
        s.right = j.value("strip_right", true);
        steps.push_back(std::move(s));
        return {};
    }
    if (type == "ByteLevel") {
        steps.push_back({Kind::ByteLevel, {}, nullptr});
        return {};
    }
    if (const int form = unicode_form(type)) {
        Step s{Kind::Unicode, {}, nullptr};
        s.form = form;
        steps.push_back(std::move(s));
        return {};
    }
    return unsupported("normalizer", type,
                       "Sequence, Prepend, Replace, Strip, ByteLevel, NFC, NFD, NFKC, NFKD");
}

Expected<HfNormalizer> HfNormalizer::from_json(const nlohmann::json& j) {
    HfNormalizer n;
    if (j.is_null()) return n;
    if (Status s = add(j, n.steps_); !s) return s.error();
    return n;
}

std::string HfNormalizer::normalize(std::string_view text) const {
    std::string s(text);
    for (const Step& step : steps_) {
        switch (step.kind) {
            case Kind::Prepend:
                if (!s.empty()) s.insert(0, step.text);
                break;
            case Kind::Replace:
                s = replace_all(*step.pattern, s, step.text);
                break;
            case Kind::Strip:
                s = strip_whitespace(s, step.left, step.right);
                break;
            case Kind::ByteLevel:
                s = bytes_to_unicode(s);
                break;
            case Kind::Unicode:
                s = unicode_normalize(s, step.form);
                break;
        }
    }
    return s;
}

}  // namespace ferry::tokenizer
