// CUDA errors as exceptions with the call that failed: the backend's ops return nothing, and a
// failed launch or copy must stop the step with a message rather than compute on garbage.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace ferry::kernels::cuda {

inline void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
        throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

// After a kernel launch: a bad configuration is reported here, a fault at the next sync.
inline void check_launch(const char* kernel) {
    check(cudaGetLastError(), kernel);
}

}  // namespace ferry::kernels::cuda
