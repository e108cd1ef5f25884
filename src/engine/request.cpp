// The names the API and the CLI use for a request's enums, apart from the code that acts on
// them, so request parsing (and the fuzz build) needs none of the engine behind it.
#include "engine/request.h"

namespace ferry::engine {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::Stop:
            return "stop";
        case FinishReason::Length:
            return "length";
        case FinishReason::Abort:
            return "abort";
        case FinishReason::Error:
            return "error";
        default:
            return "";
    }
}

const char* spec_method_name(SpecMethod m) {
    switch (m) {
        case SpecMethod::Ngram:
            return "ngram";
        case SpecMethod::Draft:
            return "draft";
        case SpecMethod::Lookahead:
            return "lookahead";
        case SpecMethod::Medusa:
            return "medusa";
        default:
            return "off";
    }
}

Expected<SpecMethod> parse_spec_method(const std::string& s) {
    if (s == "off" || s == "none") return SpecMethod::Off;
    if (s == "ngram") return SpecMethod::Ngram;
    if (s == "draft") return SpecMethod::Draft;
    if (s == "lookahead") return SpecMethod::Lookahead;
    if (s == "medusa") return SpecMethod::Medusa;
    return make_error(
        "unknown speculation method '{}' (expected off, ngram, draft, lookahead or medusa)", s);
}

}  // namespace ferry::engine
