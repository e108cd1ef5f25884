// The GPU's 8-bit KV codes (kernels/cuda/kv_quant.h) compiled for the host: the kernel's own row
// function, run on one lane, stores exactly the bytes and scale the CPU's quant::quantize_kv_row
// stores, and reads back exactly what dequantize_kv_row reads, for int8 values, calibrated int8
// keys and fp8, on rows of every scale, all-zero rows, NaN rows and clipping channels; and the
// E4M3 rounding agrees with the CPU's on every code's neighbourhood.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cuda/kv_quant.h"
#include "quant/kv_format.h"

namespace ferry {
namespace {

namespace kvq = kernels::cuda::kvq;
using quant::KvDType;

bool same_bits(float a, float b) {
    return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
}

TEST(CudaKvQuant, E4m3RoundsAsTheCpuDoes) {
    std::vector<float> probes = {0.0f,
                                 -0.0f,
                                 448.0f,
                                 449.0f,
                                 464.0f,
                                 1e9f,
                                 -1e9f,
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::quiet_NaN(),
                                 1e-30f,
                                 0.015625f};
    // Every code's value, the midpoints to its neighbours (ties go to even) and just either side.
    for (int c = 0; c < 256; ++c) {
        const float v = quant::e4m3_to_f32(static_cast<uint8_t>(c));
        if (std::isnan(v)) continue;
        const float up = quant::e4m3_to_f32(static_cast<uint8_t>(c + 1 < 256 ? c + 1 : c));
        const float mid = std::isnan(up) ? v : (v + up) / 2;
        for (float p : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)})
            probes.push_back(p), probes.push_back(-p);
    }
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> exp10(-12.0f, 3.0f);
    for (int i = 0; i < 20000; ++i)
        probes.push_back((i % 2 ? -1 : 1) * std::pow(10.0f, exp10(rng)));
    for (float p : probes) ASSERT_EQ(kvq::e4m3_code(p), quant::f32_to_e4m3(p)) << p;
}

// A row as the CPU stores it and as the GPU's function does; both bytes and scale compared.
void expect_row_matches(KvDType t, const std::vector<float>& x, const float* channel,
                        const char* what) {
    const int n = static_cast<int>(x.size());
    std::vector<uint8_t> cpu(n), gpu(n);
    float cpu_scale = -1, gpu_scale = -1;
    const int64_t cpu_clipped =
        quant::quantize_kv_row(t, x.data(), n, cpu.data(), &cpu_scale, channel);
    const int gpu_clipped = kvq::store_row_8bit(gpu.data(), &gpu_scale, channel, x.data(), n,
                                                t == KvDType::Int8, kvq::OneLane{});
    ASSERT_EQ(cpu, gpu) << what;
    EXPECT_EQ(cpu_clipped, gpu_clipped) << what;
    if (!channel) {
        EXPECT_TRUE(same_bits(cpu_scale, gpu_scale))
            << what << ": " << cpu_scale << " vs " << gpu_scale;
    }
    // Read back: each element as the attention kernel reads it.
    std::vector<float> want(n);
    quant::dequantize_kv_row(t, cpu.data(), n, cpu_scale, channel, want.data());
    for (int d = 0; d < n; ++d) {
        const float got = t == KvDType::Int8 ? kvq::int8_value(static_cast<int8_t>(gpu[d]),
                                                               channel ? channel[d] : gpu_scale)
                                             : kvq::fp8_value(gpu[d], gpu_scale);
        ASSERT_TRUE(same_bits(got, want[d])) << what << " element " << d;
    }
}

TEST(CudaKvQuant, RowsStoreAndReadAsTheCpuDoes) {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int hd = 128;
    std::vector<float> channel(hd);
    for (float& c : channel) c = 0.01f + std::fabs(nd(rng)) * 0.05f;
    channel[7] = 0.0f;  // a channel calibration never saw: codes 0
    for (float magnitude : {1e-6f, 0.03f, 1.0f, 40.0f, 3e4f}) {
        std::vector<float> x(hd);
        for (float& v : x) v = nd(rng) * magnitude;
        x[3] = magnitude * 25;  // an outlier
        for (KvDType t : {KvDType::Int8, KvDType::FP8})
            expect_row_matches(t, x, nullptr, quant::kv_dtype_name(t));
        // Calibrated keys: the larger magnitudes clip, and both sides count the same codes.
        expect_row_matches(KvDType::Int8, x, channel.data(), "int8 keys");
    }
    // Ties: with an absolute maximum of 127 the scale is 1, so x.5 rounds to even on both sides.
    std::vector<float> ties(hd, 0.5f);
    ties[0] = 127.0f, ties[1] = 2.5f, ties[2] = -3.5f, ties[3] = 1.5f, ties[4] = -0.5f;
    expect_row_matches(KvDType::Int8, ties, nullptr, "int8 ties");
    const std::vector<float> zeros(hd, 0.0f);
    expect_row_matches(KvDType::Int8, zeros, nullptr, "int8 zeros");
    expect_row_matches(KvDType::FP8, zeros, nullptr, "fp8 zeros");
    std::vector<float> nan_row(hd, 0.5f);
    nan_row[40] = std::numeric_limits<float>::quiet_NaN();
    expect_row_matches(KvDType::Int8, nan_row, nullptr, "int8 NaN row");  // zeros, NaN scale
    expect_row_matches(KvDType::FP8, nan_row, nullptr, "fp8 NaN row");
    expect_row_matches(KvDType::Int8, nan_row, channel.data(), "int8 NaN key");  // NaN -> 0
}

}  // namespace
}  // namespace ferry
