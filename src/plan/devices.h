// The accelerator catalogue: memory, bandwidth and dense tensor throughput of common cards from
// their public spec sheets, plus `cpu` and `cuda`, whose figures ferry measures on this machine
// and on its GPU.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ferry::plan {

struct Device {
    std::string name;
    double memory_gb = 0;       // as the sheet states it ("80 GB"); see memory_bytes
    uint64_t memory_bytes = 0;  // usable capacity in bytes
    double bandwidth_gbs = 0;   // memory bandwidth, GB/s (1e9 bytes / s)
    // Dense (not 2:4-sparse) tensor throughput in TFLOP/s (TOP/s for int8); 0 = no such units.
    double fp16_tflops = 0;  // FP16/BF16 with FP32 accumulation
    double fp8_tflops = 0;
    double int8_tops = 0;
    bool measured = false;  // `cpu`, `cuda`: figures measured by a backend, not from a sheet
    std::string source;     // where the figures come from
};

// The spec-sheet devices (not `cpu`, which costs a measurement).
const std::vector<Device>& catalogue();
// All names find_device accepts, catalogue order, then "cpu" and "cuda".
std::vector<std::string> device_names();

// Case-insensitive lookup. "cpu" measures this machine, "cuda" this machine's GPU (about a
// second, cached after the first call; no usable GPU is an error saying why). Unknown names give
// an error listing the known ones.
Expected<Device> find_device(std::string_view name);

// The `cpu` device: MemTotal, and measured read bandwidth and f32 FMA throughput (CPUs run
// every precision through f32 FMAs in ferry, so one figure serves all three columns).
Device cpu_device();

// The `cuda` device: the GPU's memory, and its measured read bandwidth and f32 FMA peak, the
// ceilings of ferry's CUDA kernels as they are (they multiply in f32; tensor cores, through
// cuBLASLt, are issue 18's next step, and will give the sheet's columns their own figures).
Expected<Device> cuda_device();

}  // namespace ferry::plan
