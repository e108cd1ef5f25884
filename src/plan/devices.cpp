#include "plan/devices.h"

#include <algorithm>
#include <cctype>
#include <mutex>
#include <thread>

#include "core/strings.h"
#include "kernels/backend.h"

namespace ferry::plan {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

// Memory chips come in binary sizes: a card sold as "80 GB" holds 80 GiB (nvidia-smi shows
// 81920 MiB for an A100-80GB), so capacity is the sheet's number times 2^30 bytes. Bandwidth
// and throughput are decimal (GB/s, TFLOP/s) as the sheets give them. Throughput is the dense
// figure; sheets quoting "with sparsity" are halved.
Device sheet(const char* name, double mem_gb, double bw, double fp16, double fp8, double int8,
             const char* source) {
    return Device{name,  mem_gb, static_cast<uint64_t>(mem_gb * kGiB), bw, fp16, fp8, int8,
                  false, source};
}

}  // namespace

const std::vector<Device>& catalogue() {
    // clang-format off
    static const std::vector<Device> devices = {
        // Turing has no sparsity, so the sheet's figures are dense. No FP8.
        sheet("T4",        16,  320,  65,    0,     130,   "NVIDIA T4 datasheet"),
        // L4 sheet: FP16 242, FP8 485, INT8 485 with sparsity.
        sheet("L4",        24,  300,  121,   242.5, 242.5, "NVIDIA L4 datasheet (sparse / 2)"),
        // A10 sheet: BF16 125 (250 sparse), INT8 250 (500 sparse). No FP8.
        sheet("A10",       24,  600,  125,   0,     250,   "NVIDIA A10 datasheet"),
        sheet("A100-40GB", 40,  1555, 312,   0,     624,   "NVIDIA A100 datasheet (SXM, dense)"),
        sheet("A100-80GB", 80,  2039, 312,   0,     624,   "NVIDIA A100 datasheet (SXM, dense)"),
        // H100 sheet: FP16 1979 / FP8 3958 / INT8 3958 with sparsity (SXM).
        sheet("H100-SXM",  80,  3350, 989.4, 1979,  1979,  "NVIDIA H100 datasheet (sparse / 2)"),
        sheet("H100-PCIe", 80,  2000, 756,   1513,  1513,  "NVIDIA H100 datasheet (sparse / 2)"),
        sheet("H200",      141, 4800, 989.4, 1979,  1979,  "NVIDIA H200 datasheet (SXM, sparse / 2)"),
        // GA102 whitepaper: FP16 tensor with FP32 accumulate 71 dense (142 with FP16
        // accumulate); INT8 284 dense. No FP8.
        sheet("RTX-3090",  24,  936,  71,    0,     284,   "NVIDIA Ampere GA102 whitepaper"),
        // Ada whitepaper: FP16/FP8 tensor with FP32 accumulate 165.2 / 330.3 dense; INT8 660.6.
        sheet("RTX-4090",  24,  1008, 165.2, 330.3, 660.6, "NVIDIA Ada Lovelace whitepaper"),
        sheet("MI300X",    192, 5300, 1307.4, 2614.9, 2614.9, "AMD Instinct MI300X datasheet"),
    };
    // clang-format on
    return devices;
}

std::vector<std::string> device_names() {
    std::vector<std::string> names;
    for (const auto& d : catalogue()) names.push_back(d.name);
    names.emplace_back("cpu");
    names.emplace_back("cuda");
    return names;
}

namespace {

// A device whose figures a backend measures: its memory, read bandwidth and f32 FMA peak (one
// figure for every precision's column: ferry's CPU and CUDA kernels multiply in f32).
Device measured(const char* name, kernels::Backend& be, std::string source) {
    const uint64_t memory = be.memory_bytes();
    const double read_gbs = be.measure_read_bandwidth_gbs();
    const double tflops = be.measure_peak_gflops_f32() / 1000.0;
    return Device{name,
                  static_cast<double>(memory) / 1e9,
                  memory,
                  read_gbs,
                  tflops,
                  tflops,
                  tflops,
                  true,
                  std::move(source)};
}

}  // namespace

Device cpu_device() {
    // Measuring costs about a second; a process plans many configurations at most once.
    static std::once_flag once;
    static Device cpu;
    std::call_once(once, [] {
        // Every hardware thread, as a roofline's ceiling should be.
        const int threads = std::max(1u, std::thread::hardware_concurrency());
        auto made = kernels::make_backend({.threads = threads, .activations = {}});
        if (!made) return;
        cpu = measured("cpu", **made,
                       fmt::format("measured on this machine ({} threads): MemTotal, "
                                   "multi-threaded read bandwidth, f32 FMA peak",
                                   threads));
    });
    return cpu;
}

Expected<Device> cuda_device() {
    static std::once_flag once;
    static Expected<Device> gpu = make_error("not measured");
    std::call_once(once, [] {
        auto made =
            kernels::make_backend({.device = ferry::Device::CUDA, .threads = 1, .activations = {}});
        if (!made) {
            gpu = make_error("--device cuda: {}", made.error().message);
            return;
        }
        gpu = measured("cuda", **made,
                       fmt::format("measured on this GPU ({}): its memory, read bandwidth, f32 "
                                   "FMA peak (ferry's CUDA kernels multiply in f32 for now)",
                                   kernels::backend_property(**made, "device")));
    });
    return gpu;
}

Expected<Device> find_device(std::string_view name) {
    const std::string key = ascii_lower(name);
    if (key == "cpu") return cpu_device();
    if (key == "cuda") return cuda_device();
    for (const auto& d : catalogue())
        if (ascii_lower(d.name) == key) return d;
    std::string known;
    for (const auto& n : device_names()) known += (known.empty() ? "" : ", ") + n;
    return make_error("unknown device '{}'; known devices: {}", name, known);
}

}  // namespace ferry::plan
