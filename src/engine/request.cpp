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
        default:
            return "";
    }
}

}  // namespace ferry::engine
