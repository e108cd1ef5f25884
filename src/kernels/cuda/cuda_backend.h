// The CUDA backend (issue 18), in a build configured with -DFERRY_CUDA=ON: kernels::Backend on
// one NVIDIA GPU. Weights are resident in device memory as the exact values the CPU's reference
// computes with (f16 rows as stored, every other type widened to f32), the KV cache keeps the
// CPU's paged layout in f32 or f16, and every op runs on one stream in the caller's order. This
// header is plain C++: only make_backend calls it, and nothing outside kernels/cuda/ sees a CUDA
// type.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "kernels/backend.h"

namespace ferry::kernels::cuda {

// Whether a CUDA device can be used here: the driver loads and reports at least one. When not,
// `why` (if given) says what is missing.
bool device_present(std::string* why = nullptr);

// The backend on the first device; an error when there is none or it cannot be set up.
Expected<std::shared_ptr<Backend>> make_cuda_backend(const BackendOptions& options);

}  // namespace ferry::kernels::cuda
