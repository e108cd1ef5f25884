#include "kernels/backend.h"

#include <cstring>

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
