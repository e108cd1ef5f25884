#include "kernels/backend.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dispatch.h"
#ifdef FERRY_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace ferry::kernels {

const char* activations_name(Activations a) {
    switch (a) {
        case Activations::F32:
            return "f32";
        case Activations::Int8:
            return "int8";
        default:
            return "int16";
    }
}

bool parse_activations(const char* name, Activations* out) {
    for (Activations a : {Activations::F32, Activations::Int16, Activations::Int8})
        if (!std::strcmp(name, activations_name(a))) {
            *out = a;
            return true;
        }
    return false;
}

std::string backend_property(const Backend& b, std::string_view key) {
    for (const auto& [k, v] : b.describe())
        if (k == key) return v;
    return {};
}

void check_sample_args(const Tensor& logits, std::span<const SampleRow> rows,
                       std::span<const LogitEdit> edits, std::span<const uint64_t> masks,
                       std::span<const int32_t> host_out) {
    if (logits.dtype() != DType::F32) throw std::invalid_argument("sample: the logits must be f32");
    if (static_cast<int64_t>(rows.size()) > logits.rows() || host_out.size() < rows.size())
        throw std::invalid_argument(
            fmt::format("sample: {} rows asked for, {} rows of logits and {} outputs given",
                        rows.size(), logits.rows(), host_out.size()));
    const auto words = static_cast<size_t>(mask_words(logits.cols()));
    for (const SampleRow& r : rows) {
        if (r.first_edit < 0 || r.n_edits < 0 ||
            static_cast<size_t>(r.first_edit) + static_cast<size_t>(r.n_edits) > edits.size())
            throw std::invalid_argument(
                fmt::format("sample: a row's edits [{}, +{}) lie outside the {} given",
                            r.first_edit, r.n_edits, edits.size()));
        if (r.mask_at < -1 ||
            (r.mask_at >= 0 && static_cast<size_t>(r.mask_at) + words > masks.size()))
            throw std::invalid_argument(
                fmt::format("sample: a row's mask at word {} ({} words) lies outside the {} given",
                            r.mask_at, words, masks.size()));
    }
}

Expected<std::shared_ptr<Backend>> make_backend(const BackendOptions& o) {
    switch (o.device) {
        case Device::CPU:
            return std::shared_ptr<Backend>(std::make_shared<cpu::CpuBackend>(
                o.threads, o.activations.value_or(cpu::activations())));
        case Device::CUDA:
#ifdef FERRY_CUDA
            return cuda::make_cuda_backend(o);
#else
            break;
#endif
    }
    return make_error("this ferry was built without a {} backend", device_name(o.device));
}

}  // namespace ferry::kernels
