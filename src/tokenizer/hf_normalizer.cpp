#include "tokenizer/hf_normalizer.h"

#include <nlohmann/json.hpp>

#include "tokenizer/hf_json.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

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
    return unsupported("normalizer", type, "Sequence, Prepend, Replace, Strip, ByteLevel");
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
        }
    }
    return s;
}

}  // namespace ferry::tokenizer
