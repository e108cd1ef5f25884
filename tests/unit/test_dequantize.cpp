#include "quant/dequantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf_file.h"
#include "quant/block_formats.h"
#include "quant/quantize.h"
#include "test_util.h"

namespace ferry::quant {
namespace {

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

std::vector<uint8_t> read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::vector<float> read_floats(const std::filesystem::path& p) {
    std::vector<uint8_t> raw = read_file(p);
    std::vector<float> v(raw.size() / 4);
    std::memcpy(v.data(), raw.data(), v.size() * 4);
    return v;
}

// Exact equality: every format here is a product (plus a sum for Q4_1/Q4_K) of values exact
// in float, formed in the same order as gguf-py's numpy code, so no tolerance is needed.
// NaNs only need to agree on being NaN (payloads depend on the hardware that made them).
void expect_same(const std::vector<float>& want, const std::vector<float>& got,
                 const std::string& what) {
    ASSERT_EQ(want.size(), got.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < want.size() && bad < 5; ++i) {
        const bool ok = std::isnan(want[i]) ? std::isnan(got[i]) : bits(want[i]) == bits(got[i]);
        if (!ok) {
            ++bad;
            ADD_FAILURE() << what << "[" << i << "]: want " << want[i] << " (0x" << std::hex
                          << bits(want[i]) << "), got " << got[i] << " (0x" << bits(got[i]) << ")"
                          << std::dec;
        }
    }
}

nlohmann::json golden_index() {
    std::ifstream in(ferry::testing::golden_dir() + "/dequant/index.json");
    if (!in) return nullptr;
    return nlohmann::json::parse(in);
}

TEST(Dequantize, MatchesGgufPyOnGoldenBlocks) {
    const auto index = golden_index();
    ASSERT_FALSE(index.is_null()) << "missing tests/golden/dequant; run "
                                     "scripts/gen-golden-dequant.py";
    const std::filesystem::path dir = ferry::testing::golden_dir() + "/dequant";
    int checked = 0;
    for (const auto& c : index["cases"]) {
        if (!c.contains("raw")) continue;
        const std::string name = c["name"];
        const auto type = static_cast<DType>(c["type_id"].get<uint32_t>());
        const int64_t n = c["n"];
        const std::vector<uint8_t> raw = read_file(dir / c["raw"].get<std::string>());
        ASSERT_EQ(raw.size(), row_bytes(type, n)) << name;
        std::vector<float> got(n);
        Status s = dequantize_row(type, raw.data(), got.data(), n);
        ASSERT_TRUE(s.ok()) << s.error().message;
        expect_same(read_floats(dir / c["values"].get<std::string>()), got, name);
        ++checked;
    }
    EXPECT_EQ(checked, 10);  // f16 bf16 q4_0 q4_1 q8_0 q4_k q6_k q5_0 q5_1 q5_k
}

TEST(Dequantize, MatchesGgufPyOnRealModelRows) {
    const std::string path = ferry::testing::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path;
    auto file = gguf::File::open(path);
    ASSERT_TRUE(file.ok()) << file.error().message;
    const auto index = golden_index();
    ASSERT_FALSE(index.is_null());
    int checked = 0;
    for (const auto& c : index["cases"]) {
        if (!c.contains("tensor")) continue;
        const gguf::TensorInfo* t = (*file)->tensor(c["tensor"].get<std::string>());
        ASSERT_NE(t, nullptr);
        const int64_t n = t->shape[0] * c["rows"].get<int64_t>();
        std::vector<float> got(n);
        ASSERT_TRUE(dequantize_row(t->type, t->data, got.data(), n).ok());
        expect_same(read_floats(std::filesystem::path(ferry::testing::golden_dir()) / "dequant" /
                                c["values"].get<std::string>()),
                    got, t->name);
        ++checked;
    }
    EXPECT_EQ(checked, 2);  // blk.0.attn_q.weight (q4_1), token_embd.weight (q8_0)
}

// The five-bit levels the integer kernels read (q5_ints, the packed layout's source) are the
// ones gguf-py's blocks dequantize from: (q - 16) * d for Q5_0, q * d + m for Q5_1, bit for bit.
TEST(Dequantize, Q5LevelsGiveTheDequantizedValues) {
    const std::filesystem::path dir = ferry::testing::golden_dir() + "/dequant";
    for (DType type : {DType::Q5_0, DType::Q5_1}) {
        const bool q50 = type == DType::Q5_0;
        const std::vector<uint8_t> raw = read_file(dir / (q50 ? "q5_0.bin" : "q5_1.bin"));
        const size_t bb = q50 ? sizeof(BlockQ5_0) : sizeof(BlockQ5_1);
        const int64_t n = static_cast<int64_t>(raw.size() / bb * 32);
        ASSERT_GT(n, 0);
        std::vector<float> want(n), got(n);
        ASSERT_TRUE(dequantize_row(type, raw.data(), want.data(), n).ok());
        for (int64_t b = 0; b < n / 32; ++b) {
            const uint8_t* blk = raw.data() + b * bb;
            uint8_t q[32];
            q5_ints(type, blk, q);
            uint16_t d, m = 0;
            std::memcpy(&d, blk, 2);
            if (!q50) std::memcpy(&m, blk + 2, 2);
            for (int j = 0; j < 32; ++j)
                got[b * 32 + j] =
                    q50 ? static_cast<float>(q[j] - 16) * fp16_to_fp32(d)
                        : static_cast<float>(q[j]) * fp16_to_fp32(d) + fp16_to_fp32(m);
        }
        expect_same(want, got, q50 ? "q5_0 levels" : "q5_1 levels");
    }
}

TEST(Dequantize, F32IsACopy) {
    const float src[3] = {1.0f, -0.0f, INFINITY};
    float dst[3];
    ASSERT_TRUE(dequantize_row(DType::F32, src, dst, 3).ok());
    EXPECT_EQ(std::memcmp(src, dst, sizeof(src)), 0);
}

TEST(Dequantize, RejectsUnsupportedTypesAndRaggedRows) {
    uint8_t buf[128] = {};
    float out[256];
    Status s = dequantize_row(DType::Q2_K, buf, out, 256);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("q2_k"), std::string::npos) << s.error().message;
    EXPECT_NE(s.error().message.find("not supported"), std::string::npos);
    s = dequantize_row(DType::Q4_0, buf, out, 33);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("multiple"), std::string::npos) << s.error().message;
}

// Hand-checked blocks, so a failure points at the layout rather than at the golden data.
TEST(Dequantize, Q4_0AndQ4_1NibbleOrder) {
    BlockQ4_1 b{};
    b.d = fp32_to_fp16(0.5f);
    b.m = fp32_to_fp16(-1.0f);
    b.qs[0] = 0x3A;  // element 0 = 0xA, element 16 = 0x3
    float y[32];
    ASSERT_TRUE(dequantize_row(DType::Q4_1, &b, y, 32).ok());
    EXPECT_EQ(y[0], 10 * 0.5f - 1.0f);
    EXPECT_EQ(y[16], 3 * 0.5f - 1.0f);
    EXPECT_EQ(y[1], -1.0f);

    BlockQ4_0 a{};
    a.d = fp32_to_fp16(2.0f);
    a.qs[15] = 0xF0;  // element 15 = 0 -> -8, element 31 = 15 -> 7
    ASSERT_TRUE(dequantize_row(DType::Q4_0, &a, y, 32).ok());
    EXPECT_EQ(y[15], -16.0f);
    EXPECT_EQ(y[31], 14.0f);
}

TEST(Dequantize, Q4_KScaleMinPacking) {
    BlockQ4_K b{};
    b.d = fp32_to_fp16(1.0f);
    b.dmin = fp32_to_fp16(1.0f);
    // Sub-block 5: scale = low nibble of scales[9] | top bits of scales[1] << 4,
    //              min   = high nibble of scales[9] | top bits of scales[5] << 4.
    b.scales[9] = 0x21;   // scale low 1, min low 2
    b.scales[1] = 0x40;   // scale high bits 01 -> +16
    b.scales[5] = 0x80;   // min high bits 10 -> +32
    b.qs[64 + 0] = 0x70;  // sub-block 5 = high nibbles of qs[64..95]
    float y[256];
    ASSERT_TRUE(dequantize_row(DType::Q4_K, &b, y, 256).ok());
    EXPECT_EQ(y[5 * 32], 17.0f * 7 - 34.0f);
    EXPECT_EQ(y[5 * 32 + 1], -34.0f);
}

TEST(Dequantize, Q6_KLayout) {
    BlockQ6_K b{};
    b.d = fp32_to_fp16(0.25f);
    for (auto& s : b.scales) s = 1;
    b.scales[15] = -2;          // element 128 + 96 + 16 = 240 uses scales[8 + 16 / 16 + 6]
    b.ql[64 + 32 + 16] = 0xB0;  // high nibble -> element 240 low bits = 0xB
    b.qh[32 + 16] = 0xC0;       // bits 6..7 -> element 240 high bits = 3
    float y[256];
    ASSERT_TRUE(dequantize_row(DType::Q6_K, &b, y, 256).ok());
    EXPECT_EQ(y[240], 0.25f * -2 * static_cast<float>((0xB | (3 << 4)) - 32));
    EXPECT_EQ(y[0], 0.25f * -32);
}

TEST(Fp16, SpecialValues) {
    EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);
    EXPECT_EQ(bits(fp16_to_fp32(0x8000)), 0x80000000u);
    EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
    EXPECT_EQ(fp16_to_fp32(0x03FF), std::ldexp(1023.0f, -24));
    EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
    EXPECT_EQ(fp16_to_fp32(0x7C00), INFINITY);
    EXPECT_EQ(fp16_to_fp32(0xFC00), -INFINITY);
    EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7C01)));
    EXPECT_TRUE(std::isnan(fp16_to_fp32(0xFE00)));

    EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7BFF);
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);  // the halfway point rounds to inf
    EXPECT_EQ(fp32_to_fp16(1e10f), 0x7C00);
    EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xFC00);
    EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie to even
    EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie to even
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);             // tie to even (0)
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
    EXPECT_EQ(fp32_to_fp16(-std::ldexp(1.0f, -30)), 0x8000);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1023.5f, -24)), 0x0400);  // rounds up into the normals
    EXPECT_EQ(fp32_to_fp16(NAN) & 0x7E00, 0x7E00);
}

TEST(Fp16, RoundTripsEveryHalf) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = fp16_to_fp32(static_cast<uint16_t>(h));
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f)))) << h;
            continue;
        }
        ASSERT_EQ(fp32_to_fp16(f), h) << std::hex << h;
    }
}

#ifdef __FLT16_MAX__
// The compiler's _Float16 conversions are IEEE-correct; compare over many random floats.
TEST(Fp16, MatchesCompilerConversion) {
    std::mt19937 rng(7);
    for (int i = 0; i < 200000; ++i) {
        // Bias exponents towards fp16's range so rounding paths are exercised, not just inf/0.
        uint32_t u = rng();
        if (i % 2) u = (u & 0x807FFFFF) | ((100 + rng() % 50) << 23);
        const float f = from_bits(u);
        if (std::isnan(f)) continue;
        const _Float16 h = static_cast<_Float16>(f);
        uint16_t want;
        std::memcpy(&want, &h, 2);
        ASSERT_EQ(fp32_to_fp16(f), want) << std::hex << u;
        ASSERT_EQ(bits(fp16_to_fp32(want)), bits(static_cast<float>(h))) << std::hex << want;
    }
}
#endif

TEST(Bf16, ConversionsAndRounding) {
    EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
    EXPECT_EQ(bf16_to_fp32(0x7F80), INFINITY);
    EXPECT_TRUE(std::isnan(bf16_to_fp32(0x7F81)));
    EXPECT_EQ(bf16_to_fp32(0x0001), from_bits(0x00010000));  // subnormals are kept
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808000)), 0x3F80);  // tie to even
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3F818000)), 0x3F82);
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808001)), 0x3F81);
    EXPECT_EQ(fp32_to_bf16(from_bits(0x7F7FFFFF)), 0x7F80);  // max float rounds to inf
    EXPECT_EQ(fp32_to_bf16(-INFINITY), 0xFF80);
    EXPECT_EQ(fp32_to_bf16(from_bits(0x7F800001)), 0x7FC0);  // signalling NaN made quiet
    EXPECT_EQ(fp32_to_bf16(from_bits(0xFFC12345)), 0xFFC1);  // payload and sign preserved
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_fp32(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        ASSERT_EQ(fp32_to_bf16(f), h) << std::hex << h;
    }
}

}  // namespace
}  // namespace ferry::quant
