// The planner against the seeds' worked numbers, the public parameter counts of the presets,
// and the advice / TP / max-sequences arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "gguf/gguf_writer.h"
#include "kernels/cpu/machine_probe.h"
#include "plan/advice.h"
#include "plan/bottleneck.h"
#include "plan/devices.h"
#include "plan/memory_plan.h"
#include "plan/model_spec.h"
#include "plan/report.h"
#include "plan/roofline.h"
#include "test_util.h"

namespace ferry::plan {
namespace {

ModelSpec preset(const char* name) {
    auto m = spec_from_preset(name);
    EXPECT_TRUE(m.ok()) << name;
    return *m;
}

Device device(const char* name) {
    auto d = find_device(name);
    EXPECT_TRUE(d.ok()) << name;
    return *d;
}

MemoryPlan plan(const ModelSpec& m, const Device& d, PlanOptions o) {
    auto p = plan_memory(m, d, o);
    EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
    return *p;
}

// A device with round numbers, so expectations can be worked out by hand.
Device toy_device(double mem_gb, double bw_gbs = 2000, double tflops = 100) {
    Device d;
    d.name = "toy";
    d.memory_gb = mem_gb;
    d.memory_bytes = static_cast<uint64_t>(mem_gb * 1e9);
    d.bandwidth_gbs = bw_gbs;
    d.fp16_tflops = tflops;
    return d;
}

// --- parameter counts -------------------------------------------------------------------------

TEST(PlanPresets, ParameterCountsMatchOfficialFigures) {
    // Official counts from the model cards / papers.
    const std::pair<const char*, double> official[] = {
        {"llama-2-7b", 6.74e9},
        {"llama-2-13b", 13.02e9},
        {"llama-2-70b", 68.98e9},
        {"llama-3-8b", 8.03e9},
        {"llama-3-70b", 70.55e9},
        {"mistral-7b", 7.24e9},
        {"qwen2.5-7b", 7.62e9},
        {"qwen2.5-72b", 72.7e9},
        {"smollm2-135m", 134.5e6},
        // The safetensors parameter counts of their Hugging Face checkpoints.
        {"llama-3.1-8b", 8030261248.0},
        {"llama-3.2-1b", 1235814400.0},
        {"llama-3.2-3b", 3212749824.0},
        {"qwen2.5-0.5b", 494032768.0},
        {"qwen2.5-1.5b", 1543714304.0},
        {"qwen2.5-3b", 3085938688.0},
        {"tinyllama-1.1b", 1100048384.0},
        // Model cards: Llama 3.1 70B, Qwen3-8B (8.2 B), Phi-3-mini (3.8 B), Gemma 3's text
        // model (the 27B card's 27.4 B includes the ~0.4 B SigLIP vision tower), Gemma 3 270M
        // (170 M embedding + 100 M transformer). The MoE presets are checked in PlanMoe.
        {"llama-3.1-70b", 70.55e9},
        {"qwen3-8b", 8.19e9},
        {"phi-3-mini", 3.82e9},
        {"gemma-3-27b", 27.0e9},
        {"gemma-3-270m", 268e6},
    };
    for (const auto& [name, count] : official) {
        const double got = static_cast<double>(preset(name).params());
        EXPECT_NEAR(got / count, 1.0, 0.01) << name << " formula gives " << got;
    }
    // + mixtral, qwen3-30b-a3b, qwen1.5-moe-a2.7b (their own tests)
    EXPECT_EQ(preset_names().size(), std::size(official) + 3);
}

TEST(PlanPresets, NamesAreCaseInsensitiveAndUnknownListsKnown) {
    EXPECT_TRUE(spec_from_preset("Llama-3-70B").ok());
    auto bad = spec_from_preset("llama-9-1t");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("llama-9-1t"), std::string::npos);
    EXPECT_NE(bad.error().message.find("qwen2.5-72b"), std::string::npos);
    EXPECT_FALSE(load_model_spec("no-such-model").ok());
}

// --- seeds' worked numbers --------------------------------------------------------------------

TEST(PlanSeeds, WeightsOf7BAnd70B) {
    const Device h100 = device("H100-SXM");
    PlanOptions o;
    o.ctx = 4096;
    o.weights = "f16";
    EXPECT_NEAR(plan(preset("llama-2-7b"), h100, o).weights_bytes_total / 1e9, 14.0, 0.6);
    EXPECT_NEAR(plan(preset("llama-2-70b"), h100, o).weights_bytes_total / 1e9, 140.0, 3.0);
    o.weights = "int4";
    EXPECT_NEAR(plan(preset("llama-2-7b"), h100, o).weights_bytes_total / 1e9, 3.5, 0.15);
    EXPECT_NEAR(plan(preset("llama-2-70b"), h100, o).weights_bytes_total / 1e9, 35.0, 0.75);
    o.weights = "int8";
    EXPECT_NEAR(plan(preset("llama-2-7b"), h100, o).weights_bytes_total / 1e9, 7.0, 0.3);
}

TEST(PlanSeeds, KvPerTokenOf70BWithAndWithoutGqa) {
    PlanOptions o;
    o.ctx = 4096;
    const MemoryPlan p = plan(preset("llama-2-70b"), device("H100-SXM"), o);
    // Full MHA: 2 x 80 layers x 8192 x 2 B = 2.62 MB; with 8 KV heads of 128: 0.33 MB.
    EXPECT_EQ(p.kv_bytes_per_token_mha, 2u * 80 * 8192 * 2);
    EXPECT_NEAR(p.kv_bytes_per_token_mha / 1e6, 2.62, 0.01);
    EXPECT_EQ(p.kv_bytes_per_token, 2u * 80 * 8 * 128 * 2);
    EXPECT_NEAR(p.kv_bytes_per_token / 1e6, 0.33, 0.01);
    EXPECT_EQ(p.kv_bytes_per_sequence, p.kv_bytes_per_token * 4096);
    // fp8 / int8 KV halves it, plus ferry's f32 scale per (token, KV head): of keys and
    // values for fp8, of values only for int8.
    o.kv_dtype = "fp8";
    EXPECT_EQ(plan(preset("llama-2-70b"), device("H100-SXM"), o).kv_bytes_per_token,
              p.kv_bytes_per_token / 2 + 80u * 8 * 8);
    o.kv_dtype = "int8";
    EXPECT_EQ(plan(preset("llama-2-70b"), device("H100-SXM"), o).kv_bytes_per_token,
              p.kv_bytes_per_token / 2 + 80u * 8 * 4);
}

TEST(PlanSeeds, FourteenGigabytesAtTwoTerabytesPerSecondIsSevenMs) {
    EXPECT_NEAR(seconds_to_read(14e9, 2000) * 1e3, 7.0, 1e-9);
    // Through the whole roofline: a 7B fp16 model, batch 1, tiny ctx, on a 2 TB/s card.
    PlanOptions o;
    o.ctx = 1;
    o.weights = "f16";
    const MemoryPlan p = plan(preset("llama-2-7b"), toy_device(80, 2000), o);
    const Roofline r = roofline(p, toy_device(80, 2000));
    // Every weight once, but the untied embedding (32000 x 4096 at f16), of which the step
    // looks up one row.
    const double embed = 32000.0 * 4096 * 2;
    EXPECT_EQ(p.embed_bytes_total, static_cast<uint64_t>(embed));
    EXPECT_NEAR(r.decode_step_ms, (p.weights_bytes_total - embed + embed / 32000) / 2e12 * 1e3,
                0.01);
    EXPECT_NEAR(r.decode_step_ms, 6.61, 0.1);
    EXPECT_EQ(r.decode_bound, "bandwidth");
}

// --- memory plan ------------------------------------------------------------------------------

TEST(PlanMemory, TotalIsSumOfPartsAndOverheadWithinTenToTwentyPercent) {
    PlanOptions o;
    o.ctx = 8192;
    o.batch = 16;
    for (const char* dev : {"H100-SXM", "T4", "cpu"}) {
        const MemoryPlan p = plan(preset("llama-3-8b"), device(dev), o);
        const uint64_t sub = p.weights_bytes + p.kv_bytes + p.activation_bytes;
        EXPECT_EQ(p.total_bytes, sub + p.overhead_bytes) << dev;
        EXPECT_GE(p.overhead_fraction, 0.099) << dev;
        EXPECT_LE(p.overhead_fraction, 0.201) << dev;
        EXPECT_EQ(p.kv_bytes_total, p.kv_bytes_per_sequence * 16) << dev;
        EXPECT_EQ(p.fits, p.total_bytes <= p.capacity_bytes) << dev;
    }
}

TEST(PlanMemory, CapacityUsesUtilizationAndTp) {
    const Device a100 = device("A100-80GB");
    EXPECT_EQ(a100.memory_bytes, 80ull << 30);
    PlanOptions o;
    o.ctx = 4096;
    o.gpu_memory_utilization = 0.5;
    o.tp = 2;
    const MemoryPlan p = plan(preset("llama-2-70b"), a100, o);
    EXPECT_EQ(p.capacity_bytes, static_cast<uint64_t>((80ull << 30) * 0.5));
    EXPECT_EQ(p.weights_bytes, (p.weights_bytes_total + 1) / 2);
    EXPECT_DOUBLE_EQ(p.kv_share, 0.5);
}

TEST(PlanMemory, TensorParallelVolumesAndTheBusiestRanksShare) {
    // Llama-3.1-8B on H100s: 2 sums a layer of 4096 bf16 values, the logits' other half.
    PlanOptions o;
    o.ctx = 4096;
    o.tp = 2;
    const ModelSpec m = preset("llama-3.1-8b");
    const MemoryPlan two = plan(m, device("H100-SXM"), o);
    EXPECT_EQ(two.tp_sums_per_token, 64);
    EXPECT_EQ(two.tp_sum_bytes_per_token, 64u * 4096 * 2);
    EXPECT_EQ(two.tp_ring_bytes_per_token, 64u * 4096 * 2);  // 2 (tp-1)/tp = 1 at tp 2
    EXPECT_EQ(two.tp_logits_bytes_per_token, 128256u * 4 / 2);
    EXPECT_EQ(two.tp_uneven_bytes, 0u);  // 8 KV heads split evenly
    // 3 ranks: 3 of the 8 KV heads on the busiest, so 3/8 of attention rather than 1/3.
    o.tp = 3;
    const MemoryPlan three = plan(m, device("H100-SXM"), o);
    const double attn = 32.0 * 4096 * 2 * (32 + 8) * 128 / static_cast<double>(three.params) *
                        static_cast<double>(three.weights_bytes_total);
    EXPECT_NEAR(static_cast<double>(three.tp_uneven_bytes), attn * (3.0 / 8 - 1.0 / 3), 1.0);
    EXPECT_EQ(three.weights_bytes, (three.weights_bytes_total + 2) / 3 + three.tp_uneven_bytes);
    EXPECT_EQ(three.tp_ring_bytes_per_token, 2u * 64 * 4096 * 2 * 2 / 3);
    EXPECT_EQ(plan(m, device("H100-SXM"), PlanOptions{}).tp_sums_per_token, 0);
}

TEST(PlanMemory, MaxSequencesIsTheLargestBatchThatFits) {
    PlanOptions o;
    o.ctx = 8192;
    const ModelSpec m = preset("llama-3-8b");
    const Device d = device("A100-80GB");
    const MemoryPlan p = plan(m, d, o);
    ASSERT_GT(p.max_sequences, 1);
    PlanOptions at = o;
    at.batch = p.max_sequences;
    EXPECT_TRUE(plan(m, d, at).fits);
    at.batch = p.max_sequences + 1;
    EXPECT_FALSE(plan(m, d, at).fits);
    // Rough hand check: (72 GiB x 0.9... minus 16 GB weights) / 1.07 GB per sequence ~ 50.
    const double free_for_kv = p.capacity_bytes / 1.1 - p.weights_bytes;
    EXPECT_NEAR(p.max_sequences, free_for_kv / p.kv_bytes_per_sequence, 5);
}

TEST(PlanMemory, FixedKvPoolDividesIntoSequences) {
    PlanOptions o;
    o.ctx = 1024;
    o.kv_cache_memory = 1'000'000'000;
    const MemoryPlan p = plan(preset("smollm2-135m"), device("A10"), o);
    EXPECT_TRUE(p.kv_pool_fixed);
    EXPECT_EQ(p.kv_bytes_total, 1'000'000'000u);
    // smollm2: 2 x 30 x 3 x 64 x 2 B = 23040 B per token.
    EXPECT_EQ(p.kv_bytes_per_token, 23040u);
    EXPECT_EQ(p.max_sequences, 1'000'000'000 / (23040 * 1024));
}

TEST(PlanMemory, WeightFormatsAndErrors) {
    auto q4k = parse_weight_precision("Q4_K");
    ASSERT_TRUE(q4k.ok());
    EXPECT_DOUBLE_EQ(q4k->bits, 4.5);
    EXPECT_DOUBLE_EQ(parse_weight_precision("q4_1")->bits, 5.0);
    EXPECT_DOUBLE_EQ(parse_weight_precision("q8_0")->bits, 8.5);
    // w8a8: 8 bits (the per-row header is below the planner's resolution), INT8 compute.
    EXPECT_DOUBLE_EQ(parse_weight_precision("w8a8")->bits, 8.0);
    EXPECT_EQ(parse_weight_precision("w8a8")->compute, ComputeClass::INT8);
    EXPECT_EQ(parse_weight_precision("int4")->compute, ComputeClass::FP16);
    EXPECT_FALSE(parse_weight_precision("int3").ok());
    EXPECT_FALSE(parse_kv_precision("q4_0").ok());
    PlanOptions o;
    o.batch = 0;
    EXPECT_FALSE(plan_memory(preset("llama-2-7b"), device("T4"), o).ok());
    o.batch = 1;
    o.gpu_memory_utilization = 1.5;
    EXPECT_FALSE(plan_memory(preset("llama-2-7b"), device("T4"), o).ok());
}

TEST(PlanMemory, ByteCountsTooLargeToCountAreRefusedNotWrapped) {
    // Each of these once wrapped around 2^64 into a small KV cache (or a total that fit), or
    // took -1 as 2^64 - 1 bytes.
    const auto refused = [](PlanOptions o, const std::string& says, ModelSpec m = {}) {
        if (m.n_layers == 0) m = preset("smollm2-135m");
        auto p = plan_memory(m, device("H100-SXM"), o);
        ASSERT_FALSE(p.ok()) << "planned: KV " << p->kv_bytes_total << ", total " << p->total_bytes
                             << (p->fits ? ", fits" : "");
        EXPECT_NE(p.error().message.find(says), std::string::npos) << p.error().message;
    };
    PlanOptions o;
    o.ctx = 100000000000000000;
    refused(o, "1 sequence of 100000000000000000 tokens: more than the 1 EiB");
    o.ctx = std::numeric_limits<int64_t>::max();
    refused(o, "lower --ctx or --batch");
    o.ctx = 4096;
    o.batch = std::numeric_limits<int64_t>::max();
    refused(o, "9223372036854775807 sequences of 4096 tokens");
    o.batch = 1;
    o.kv_cache_memory = -1;
    refused(o, "--kv-cache-memory must be a byte count of 0 or more (got -1)");
    o.kv_cache_memory = int64_t{1} << 62;
    refused(o, "--kv-cache-memory 4611686018427387904 is more than");
    o = {};
    ModelSpec m = preset("smollm2-135m");
    m.max_ctx = int64_t{1} << 62;
    refused(o, "(the model's context)", m);
    // The largest that can be counted is planned as not fitting, and the advice agrees.
    o.batch = int64_t{1} << 30;
    o.ctx = 4096;
    const MemoryPlan big = plan(preset("smollm2-135m"), device("H100-SXM"), o);
    EXPECT_FALSE(big.fits);
    EXPECT_GT(big.kv_bytes_total, big.capacity_bytes);
    auto a = advise(preset("smollm2-135m"), device("H100-SXM"), o);
    ASSERT_TRUE(a.ok());
    EXPECT_FALSE(a->fits_16bit);
}

// --- devices ----------------------------------------------------------------------------------

TEST(PlanDevices, CatalogueHasTheSheetsAndLookupIsCaseInsensitive) {
    for (const char* n : {"T4", "L4", "A10", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe",
                          "H200", "RTX-3090", "RTX-4090", "MI300X"}) {
        const Device d = device(n);
        EXPECT_GT(d.memory_bytes, 0u) << n;
        EXPECT_GT(d.bandwidth_gbs, 0) << n;
        EXPECT_GT(d.fp16_tflops, 0) << n;
        EXPECT_GT(d.int8_tops, 0) << n;
        EXPECT_FALSE(d.source.empty()) << n;
    }
    EXPECT_EQ(device("h100-sxm").name, "H100-SXM");
    EXPECT_DOUBLE_EQ(device("H100-SXM").bandwidth_gbs, 3350);
    EXPECT_DOUBLE_EQ(device("H100-SXM").fp16_tflops, 989.4);  // dense, not 1979 sparse
    EXPECT_DOUBLE_EQ(device("A100-80GB").fp8_tflops, 0);      // Ampere has no FP8
    auto bad = find_device("TPU-v9");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("H200"), std::string::npos);
    EXPECT_NE(bad.error().message.find("cpu"), std::string::npos);
}

TEST(PlanDevices, CpuIsMeasured) {
    const Device cpu = device("CPU");
    EXPECT_TRUE(cpu.measured);
    EXPECT_EQ(cpu.memory_bytes, kernels::cpu::total_memory_bytes());
    EXPECT_GT(cpu.bandwidth_gbs, 0.1);
    EXPECT_GT(cpu.fp16_tflops, 0.001);
}

// `cuda` measures the GPU where there is one; where there is none (CI) the plan stops with the
// reason instead of planning for a device that is not there.
TEST(PlanDevices, CudaIsMeasuredOrRefusedWithTheReason) {
    auto gpu = find_device("cuda");
    if (!gpu) {
        EXPECT_NE(gpu.error().message.find("--device cuda"), std::string::npos)
            << gpu.error().message;
        return;
    }
    EXPECT_TRUE(gpu->measured);
    EXPECT_GT(gpu->memory_bytes, 1ull << 30);
    EXPECT_GT(gpu->bandwidth_gbs, 10.0);
    EXPECT_NE(gpu->source.find("measured on this GPU"), std::string::npos);
}

// --- advice -----------------------------------------------------------------------------------

// llama-2-7b at ctx 1, batch 1: need is about weights x 1.1, so the card size picks the advice.
Advice advice_on(double mem_gb) {
    PlanOptions o;
    o.ctx = 1;
    o.max_batched_tokens = 1;
    auto a = advise(preset("llama-2-7b"), toy_device(mem_gb), o);
    EXPECT_TRUE(a.ok());
    return *a;
}

TEST(PlanAdvice, SixteenBitInt8Int4ThenTensorParallel) {
    // 13.5 GB fp16, 6.7 GB int8, 3.4 GB int4; need ~ x1.1-1.2; capacity = mem x 0.9.
    EXPECT_EQ(advice_on(24).recommendation, "keep_16bit");
    EXPECT_EQ(advice_on(12).recommendation, "int8");
    EXPECT_EQ(advice_on(6).recommendation, "int4");
    const Advice tp = advice_on(3);
    EXPECT_EQ(tp.recommendation, "tensor_parallel");
    EXPECT_FALSE(tp.fits_int4);
    // Smallest N at 16-bit dividing 32 heads: 16.2 GB needs more than 2 x 2.7 GB... 8 x 2.7 fits.
    EXPECT_GT(tp.min_devices_16bit, 1);
    EXPECT_EQ(32 % tp.min_devices_16bit, 0);
    EXPECT_NE(tp.text.find(std::to_string(tp.min_devices_16bit) + " x toy"), std::string::npos);
}

TEST(PlanAdvice, MinDevicesIsTheSmallestThatFits) {
    const ModelSpec m = preset("llama-3-70b");
    const Device h100 = device("H100-SXM");
    PlanOptions o;
    o.ctx = 8192;
    o.batch = 16;
    const int n = min_devices(m, h100, o, "f16", false);
    ASSERT_GT(n, 1);
    o.weights = "f16";
    o.tp = n;
    EXPECT_TRUE(plan(m, h100, o).fits);
    o.tp = n - 1;
    EXPECT_FALSE(plan(m, h100, o).fits);
    // 70B at fp16 (141 GB) plus 43 GB of KV on 77 GB usable cards: 3 by capacity, 4 to split
    // 64 heads evenly.
    EXPECT_EQ(n, 3);
    o.tp = 1;
    EXPECT_EQ(min_devices(m, h100, o, "f16", true), 4);
}

// --- roofline ---------------------------------------------------------------------------------

TEST(PlanRoofline, BatchRaisesIntensityUntilComputeBound) {
    PlanOptions o;
    o.ctx = 128;
    o.weights = "f16";
    const ModelSpec m = preset("llama-2-7b");
    const Device d = toy_device(1000, 2000, 100);  // balance 50 FLOP/B
    o.batch = 1;
    Roofline r1 = roofline(plan(m, d, o), d);
    EXPECT_EQ(r1.decode_bound, "bandwidth");
    EXPECT_NEAR(r1.machine_balance, 50, 1e-9);
    EXPECT_NEAR(r1.arithmetic_intensity, 1.0, 0.1);  // 2 FLOPs per 2-byte weight
    ASSERT_GT(r1.crossover_batch, 1);
    o.batch = static_cast<int64_t>(std::ceil(r1.crossover_batch)) + 1;
    Roofline r2 = roofline(plan(m, d, o), d);
    EXPECT_EQ(r2.decode_bound, "compute");
    EXPECT_NEAR(r2.decode_tokens_per_s, o.batch * r2.decode_tokens_per_s_per_sequence, 1e-6);
    // Prefill: 100 TFLOP/s / (2 x 6.74 B) ~ 7400 tok/s.
    EXPECT_NEAR(r1.prefill_tokens_per_s, 100e12 / (2.0 * m.params()), 1e-6);
}

TEST(PlanRoofline, Fp8WeightsUseFp8UnitsWhereTheyExist) {
    PlanOptions o;
    o.ctx = 128;
    o.weights = "fp8";
    const ModelSpec m = preset("llama-3-8b");
    EXPECT_EQ(roofline(plan(m, device("H100-SXM"), o), device("H100-SXM")).compute_precision,
              "fp8");
    EXPECT_EQ(roofline(plan(m, device("A100-80GB"), o), device("A100-80GB")).compute_precision,
              "fp16");
}

// --- bottleneck report ------------------------------------------------------------------------

TEST(PlanBottleneck, FractionsBoundAndSentence) {
    // 82 GB read and 9 GFLOP in one second against 100 GB/s and 100 GFLOP/s peaks.
    const BottleneckReport r = analyze_bottleneck({"decode", 82e9, 9e9, 1.0, 100, 100});
    EXPECT_NEAR(r.achieved_gbs, 82, 1e-9);
    EXPECT_NEAR(r.achieved_gflops, 9, 1e-9);
    EXPECT_NEAR(r.bandwidth_fraction, 0.82, 1e-9);
    EXPECT_NEAR(r.compute_fraction, 0.09, 1e-9);
    EXPECT_EQ(r.bound, "bandwidth");
    EXPECT_EQ(r.sentence, "decode: 82 % of read bandwidth, 9 % of compute → bandwidth-bound");
    const auto j = r.to_json();
    for (const char* k :
         {"achieved_gbs", "achieved_gflops", "bandwidth_fraction", "compute_fraction", "bound"})
        EXPECT_TRUE(j.contains(k)) << k;
    const BottleneckReport c = analyze_bottleneck({"prefill", 1e9, 70e9, 1.0, 100, 100});
    EXPECT_EQ(c.bound, "compute");
}

// --- model inputs -----------------------------------------------------------------------------

TEST(PlanModelSpec, HfConfigJson) {
    const auto path = std::filesystem::temp_directory_path() / "ferry_test_plan_config.json";
    {
        std::ofstream out(path);
        out << R"({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 8,
                   "intermediate_size": 14336, "vocab_size": 128256,
                   "max_position_embeddings": 8192, "tie_word_embeddings": false,
                   "torch_dtype": "bfloat16"})";
    }
    auto m = load_model_spec(path.string());
    std::filesystem::remove(path);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->source, "config.json");
    EXPECT_EQ(m->head_dim, 128);
    EXPECT_EQ(m->n_kv_heads, 8);
    EXPECT_EQ(m->params(), preset("llama-3-8b").params());

    // head_dim given explicitly wins over hidden / heads; missing fields are errors.
    auto explicit_hd = spec_from_hf_config({{"hidden_size", 2048},
                                            {"num_hidden_layers", 2},
                                            {"num_attention_heads", 8},
                                            {"head_dim", 128},
                                            {"intermediate_size", 4096},
                                            {"vocab_size", 1000}},
                                           "x");
    ASSERT_TRUE(explicit_hd.ok());
    EXPECT_EQ(explicit_hd->head_dim, 128);
    EXPECT_EQ(explicit_hd->n_kv_heads, 8);  // no key: plain MHA
    EXPECT_FALSE(spec_from_hf_config({{"hidden_size", 2048}}, "x").ok());
    EXPECT_FALSE(load_model_spec("/nonexistent/config.json").ok());
}

TEST(PlanModelSpec, DefaultGgufModel) {
    const std::string path = ferry::testing::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "default model not downloaded: " << path;
    auto m = spec_from_gguf(path);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->source, "gguf");
    EXPECT_EQ(m->n_layers, 30);
    EXPECT_EQ(m->hidden, 576);
    EXPECT_EQ(m->n_heads, 9);
    EXPECT_EQ(m->n_kv_heads, 3);
    EXPECT_EQ(m->head_dim, 64);
    EXPECT_TRUE(m->tied_embeddings);
    EXPECT_NEAR(m->params() / 1e6, 134.5, 0.5);
    // The tensors agree with the formula, so GGUF and preset plans line up.
    EXPECT_EQ(m->params(), preset("smollm2-135m").params());
    EXPECT_EQ(m->gguf_weight_type, "q4_1");
    // Native weights are the file's real tensor bytes (about 97 MB for Q4_1).
    const MemoryPlan p = plan(*m, toy_device(8), PlanOptions{});
    EXPECT_EQ(p.weights_bytes_total, m->gguf_weight_bytes);
    EXPECT_NEAR(p.weights_bytes_total / 1e6, 96.6, 3);
    EXPECT_EQ(p.ctx, 8192);
}

TEST(PlanSliding, GemmaGgufMatchesThePreset) {
    const auto path = std::filesystem::path(ferry::testing::default_model_path()).parent_path() /
                      "gemma-3-270m-q4_k_m.gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "not downloaded: " << path;
    auto m = spec_from_gguf(path.string());
    ASSERT_TRUE(m.ok()) << m.error().message;
    const ModelSpec want = preset("gemma-3-270m");
    EXPECT_EQ(m->arch, "gemma3");
    EXPECT_EQ(m->head_dim, 256);
    EXPECT_TRUE(m->tied_embeddings);
    EXPECT_EQ(m->sliding_window, want.sliding_window);
    EXPECT_EQ(m->n_sliding_layers, want.n_sliding_layers);
    // The file's tensors against the formula: q/k norms and four norms per layer included.
    EXPECT_EQ(m->params(), want.params());
    PlanOptions o;
    o.ctx = 32768;
    EXPECT_EQ(plan(*m, toy_device(8), o).kv_bytes_per_sequence,
              plan(want, toy_device(8), o).kv_bytes_per_sequence);
}

TEST(PlanReport, JsonHasStableKeys) {
    PlanOptions o;
    o.ctx = 8192;
    o.batch = 16;
    auto r = make_plan(preset("llama-3-70b"), device("H100-SXM"), o);
    ASSERT_TRUE(r.ok());
    const auto j = plan_to_json(*r);
    for (const char* k : {"weights_bytes", "kv_bytes_per_token", "kv_bytes_per_token_mha",
                          "kv_bytes_per_sequence", "kv_bytes_total", "activation_bytes",
                          "overhead_bytes", "total_bytes", "capacity_bytes", "fits", "margin_bytes",
                          "max_sequences", "expert_bytes", "kv_bytes_per_sequence_no_window"})
        EXPECT_TRUE(j["memory"].contains(k)) << k;
    for (const char* k : {"params", "params_total", "params_active", "n_experts", "n_experts_used",
                          "expert_intermediate_size", "sliding_window"})
        EXPECT_TRUE(j["model"].contains(k)) << k;
    EXPECT_EQ(j["model"]["params_active"], j["model"]["params_total"]);  // dense
    for (const char* k :
         {"decode_tokens_per_s_per_sequence", "decode_tokens_per_s", "prefill_tokens_per_s",
          "bound", "machine_balance", "arithmetic_intensity"})
        EXPECT_TRUE(j["performance"].contains(k)) << k;
    EXPECT_EQ(j["advice"]["recommendation"], "tensor_parallel");
    EXPECT_FALSE(j["memory"]["fits"].get<bool>());
    const std::string text = plan_to_text(*r);
    EXPECT_NE(text.find("without GQA"), std::string::npos);
    EXPECT_NE(text.find("DOES NOT FIT"), std::string::npos);
}

// --- mixture of experts -----------------------------------------------------------------------

TEST(PlanMoe, MixtralTotalAndActiveParams) {
    const ModelSpec m = preset("mixtral-8x7b");
    EXPECT_TRUE(m.is_moe());
    // Mistral's announcement: 46.7 B total, 12.9 B used per token.
    EXPECT_NEAR(m.params() / 46.7e9, 1.0, 0.005) << m.params();
    EXPECT_NEAR(m.active_params() / 12.9e9, 1.0, 0.005) << m.active_params();
    // By hand: 32 layers x 8 experts x 3 x 4096 x 14336 routed; 2 of the 8 per token.
    const int64_t routed = int64_t{32} * 8 * 3 * 4096 * 14336;
    EXPECT_EQ(m.routed_expert_params(), routed);
    EXPECT_EQ(m.params() - m.active_params(), routed / 8 * 6);
    // Every expert used: active == total (router and all).
    ModelSpec all_active = m;
    all_active.n_experts_used = all_active.n_experts;
    EXPECT_EQ(all_active.active_params(), m.params());
    // The router is counted: hidden x experts per layer.
    ModelSpec no_experts = m;
    no_experts.n_experts = 0;  // the same shapes as a dense model of one expert's MLP
    EXPECT_EQ(m.params() - routed - no_experts.params(),
              int64_t{32} * 4096 * 8 - int64_t{32} * 3 * 4096 * 14336);
}

TEST(PlanMoe, Qwen2MoeSharedExpertTotalAndActiveParams) {
    const ModelSpec m = preset("qwen1.5-moe-a2.7b");
    // Model card: 14.3 B total, 2.7 B activated (4 of 60 routed experts of 1408, and the shared
    // expert of 5632 with its one-row gate, every token).
    EXPECT_TRUE(m.shared_expert_gate);
    EXPECT_NEAR(m.params() / 14.3e9, 1.0, 0.01) << m.params();
    EXPECT_NEAR(m.active_params() / 2.7e9, 1.0, 0.01) << m.active_params();
    EXPECT_EQ(m.params() - m.active_params(), int64_t{24} * (60 - 4) * 3 * 2048 * 1408);
}

TEST(PlanMoe, Qwen3MoeTotalAndActiveParams) {
    const ModelSpec m = preset("qwen3-30b-a3b");
    // Model card: 30.5 B total, 29.9 B non-embedding, 3.3 B activated.
    EXPECT_NEAR(m.params() / 30.5e9, 1.0, 0.01) << m.params();
    const int64_t embeddings = 2 * int64_t{151936} * 2048;  // untied: table + head
    EXPECT_NEAR((m.params() - embeddings) / 29.9e9, 1.0, 0.01);
    // Per layer: attention 18,874,368 + q/k norms 256 + norms 4,096 + router 262,144 + 8 of 128
    // experts of 3 x 2048 x 768; x 48 layers, plus the embeddings and final norm. 3.353 B, which
    // the card rounds to 3.3 B (1.6 % below): asserted exactly, and within 2 % of the card.
    const int64_t per_layer = 18874368 + 256 + 4096 + 262144 + 8 * 3 * 2048 * 768;
    EXPECT_EQ(m.active_params(), 48 * per_layer + embeddings + 2048);  // + the final norm
    EXPECT_NEAR(m.active_params() / 3.3e9, 1.0, 0.02) << m.active_params();
}

TEST(PlanMoe, ExpectedExpertsTouched) {
    EXPECT_DOUBLE_EQ(expected_experts_touched(8, 2, 1), 2);
    EXPECT_DOUBLE_EQ(expected_experts_touched(8, 2, 0), 0);
    EXPECT_DOUBLE_EQ(expected_experts_touched(8, 2, 2), 8 * (1 - 0.75 * 0.75));
    EXPECT_NEAR(expected_experts_touched(128, 8, 64), 128 * (1 - std::pow(120.0 / 128, 64)), 1e-9);
    EXPECT_NEAR(expected_experts_touched(8, 2, 1000), 8, 1e-9);
    EXPECT_EQ(expected_experts_touched(0, 0, 16), 0);  // dense
}

TEST(PlanMoe, MemoryHoldsEveryExpertButDecodeReadsTheTouchedOnes) {
    const Device d = toy_device(1000, 2000, 100);
    for (const char* name : {"mixtral-8x7b", "qwen3-30b-a3b"}) {
        const ModelSpec m = preset(name);
        PlanOptions o;
        o.ctx = 1;  // KV reads out of the way
        o.weights = "f16";
        o.batch = 1;
        const MemoryPlan p1 = plan(m, d, o);
        EXPECT_EQ(p1.weights_bytes_total, static_cast<uint64_t>(m.params()) * 2) << name;
        EXPECT_EQ(p1.expert_bytes_total, static_cast<uint64_t>(m.routed_expert_params()) * 2);
        EXPECT_EQ(p1.params_active, m.active_params());
        // Batch 1 reads exactly the active weights: dense part + k experts per layer, of the
        // (untied) embedding one row.
        const Roofline r1 = roofline(p1, d);
        const double embed = 2.0 * m.vocab * m.hidden;
        EXPECT_EQ(p1.embed_bytes_total, static_cast<uint64_t>(embed)) << name;
        EXPECT_NEAR(r1.decode_weight_bytes_per_step,
                    2.0 * m.active_params() - embed + embed / m.vocab, 2.0)
            << name;
        EXPECT_DOUBLE_EQ(r1.experts_touched_per_layer, m.n_experts_used);
        EXPECT_DOUBLE_EQ(r1.decode_flops_per_step, 2.0 * m.active_params());
        // More tokens touch more experts: monotone in the batch, towards every expert.
        double last = 0;
        for (int64_t b : {1, 2, 4, 8, 16, 32, 64}) {
            o.batch = b;
            const Roofline r = roofline(plan(m, d, o), d);
            EXPECT_GT(r.decode_weight_bytes_per_step, last) << name << " batch " << b;
            EXPECT_LE(r.decode_weight_bytes_per_step, p1.weights_bytes_total) << name;
            EXPECT_DOUBLE_EQ(r.decode_flops_per_step, 2.0 * m.active_params() * b);
            last = r.decode_weight_bytes_per_step;
        }
        const double touched64 = expected_experts_touched(m.n_experts, m.n_experts_used, 64);
        const double dense =
            p1.weights_bytes_total - p1.expert_bytes_total - embed + embed * 64 / m.vocab;
        EXPECT_NEAR(last, dense + p1.expert_bytes_total * touched64 / m.n_experts, 1.0) << name;
        EXPECT_GT(last, 0.98 * (p1.weights_bytes_total - embed)) << name;  // ~all experts by 64
        // Prefill computes with the active parameters only.
        EXPECT_NEAR(r1.prefill_tokens_per_s, 100e12 / (2.0 * m.active_params()), 1e-6);
        // Decode turns compute-bound later than a dense model of the active size would: at the
        // crossover the intensity reaches the balance, just below it does not.
        ASSERT_GT(r1.crossover_batch, 1) << name;
        o.batch = static_cast<int64_t>(std::ceil(r1.crossover_batch)) + 1;
        EXPECT_EQ(roofline(plan(m, d, o), d).decode_bound, "compute") << name;
        o.batch = static_cast<int64_t>(std::floor(r1.crossover_batch)) - 1;
        if (o.batch >= 1) {
            EXPECT_EQ(roofline(plan(m, d, o), d).decode_bound, "bandwidth");
        }
    }
}

TEST(PlanMoe, TensorParallelSplitsTheExpertReads) {
    const Device d = toy_device(1000);
    PlanOptions o;
    o.ctx = 1;
    o.weights = "f16";
    o.batch = 4;
    const ModelSpec m = preset("mixtral-8x7b");
    const Roofline one = roofline(plan(m, d, o), d);
    o.tp = 2;
    const Roofline two = roofline(plan(m, d, o), d);
    EXPECT_NEAR(two.decode_weight_bytes_per_step, one.decode_weight_bytes_per_step / 2, 1.0);
}

nlohmann::json moe_config(const char* type) {
    if (std::string(type) == "mixtral")
        return {{"model_type", "mixtral"},
                {"hidden_size", 4096},
                {"num_hidden_layers", 32},
                {"num_attention_heads", 32},
                {"num_key_value_heads", 8},
                {"intermediate_size", 14336},
                {"vocab_size", 32000},
                {"max_position_embeddings", 32768},
                {"num_local_experts", 8},
                {"num_experts_per_tok", 2},
                {"rope_theta", 1e6},
                {"sliding_window", nullptr},
                {"tie_word_embeddings", false},
                {"router_aux_loss_coef", 0.02}};
    return {{"model_type", "qwen3_moe"},
            {"hidden_size", 2048},
            {"num_hidden_layers", 48},
            {"num_attention_heads", 32},
            {"num_key_value_heads", 4},
            {"head_dim", 128},
            {"intermediate_size", 6144},
            {"moe_intermediate_size", 768},
            {"num_experts", 128},
            {"num_experts_per_tok", 8},
            {"decoder_sparse_step", 1},
            {"mlp_only_layers", nlohmann::json::array()},
            {"norm_topk_prob", true},
            {"vocab_size", 151936},
            {"max_position_embeddings", 40960},
            {"tie_word_embeddings", false},
            {"rope_theta", 1e6},
            {"rms_norm_eps", 1e-6}};
}

TEST(PlanMoe, ConfigJsonOfMixtralAndQwen3Moe) {
    for (const auto& [type, name] :
         {std::pair{"mixtral", "mixtral-8x7b"}, std::pair{"qwen3_moe", "qwen3-30b-a3b"}}) {
        auto m = spec_from_hf_config(moe_config(type), type);
        ASSERT_TRUE(m.ok()) << m.error().message;
        const ModelSpec want = preset(name);
        EXPECT_EQ(m->arch, type);
        EXPECT_EQ(m->n_experts, want.n_experts) << type;
        EXPECT_EQ(m->n_experts_used, want.n_experts_used) << type;
        EXPECT_EQ(m->expert_ffn, want.expert_ffn) << type;
        EXPECT_EQ(m->n_dense_layers, 0) << type;
        EXPECT_EQ(m->params(), want.params()) << type;
        EXPECT_EQ(m->active_params(), want.active_params()) << type;
    }
    // Qwen's dense layers: mlp_only_layers and decoder_sparse_step keep intermediate_size MLPs.
    nlohmann::json c = moe_config("qwen3_moe");
    c["mlp_only_layers"] = {0, 47};
    auto two_dense = spec_from_hf_config(c, "x");
    ASSERT_TRUE(two_dense.ok()) << two_dense.error().message;
    EXPECT_EQ(two_dense->n_dense_layers, 2);
    const ModelSpec q = preset("qwen3-30b-a3b");
    const int64_t moe_layer = 2048 * 128 + 128 * 3 * 2048 * 768, dense_layer = 3 * 2048 * 6144;
    EXPECT_EQ(two_dense->params(), q.params() + 2 * (dense_layer - moe_layer));
    EXPECT_EQ(two_dense->active_params(),
              q.active_params() + 2 * (dense_layer - 2048 * 128 - 8 * 3 * 2048 * 768));
    c["mlp_only_layers"] = nlohmann::json::array();
    c["decoder_sparse_step"] = 2;  // experts on layers 1, 3, 5, ...
    EXPECT_EQ(spec_from_hf_config(c, "x")->n_dense_layers, 24);
}

TEST(PlanMoe, Qwen2MoeSharedExpert) {
    // Qwen2-57B-A14B: 64 experts of 2560, top 8, one shared expert of 20480 with its gate.
    const nlohmann::json c = {{"model_type", "qwen2_moe"},
                              {"hidden_size", 3584},
                              {"num_hidden_layers", 28},
                              {"num_attention_heads", 28},
                              {"num_key_value_heads", 4},
                              {"intermediate_size", 18944},
                              {"moe_intermediate_size", 2560},
                              {"shared_expert_intermediate_size", 20480},
                              {"num_experts", 64},
                              {"num_experts_per_tok", 8},
                              {"vocab_size", 151936},
                              {"max_position_embeddings", 32768},
                              {"tie_word_embeddings", false}};
    auto m = spec_from_hf_config(c, "qwen2-57b-a14b");
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->n_shared_experts, 1);
    EXPECT_EQ(m->shared_expert_ffn, 20480);
    EXPECT_TRUE(m->shared_expert_gate);
    EXPECT_TRUE(m->qkv_bias);
    // Model card: 57 B total, 14 B activated (safetensors: 57.41 B).
    EXPECT_NEAR(m->params() / 57.41e9, 1.0, 0.005) << m->params();
    EXPECT_NEAR(m->active_params() / 14.2e9, 1.0, 0.01) << m->active_params();
    // The shared expert runs for every token: it is in the active count.
    const int64_t shared = 28 * (int64_t{3} * 3584 * 20480 + 3584);
    ModelSpec no_shared = *m;
    no_shared.n_shared_experts = 0;
    no_shared.shared_expert_gate = false;
    EXPECT_EQ(m->active_params() - no_shared.active_params(), shared);
}

TEST(PlanMoe, RefusesWhatItDoesNotModel) {
    auto refused = [](nlohmann::json c, const std::string& words) {
        auto m = spec_from_hf_config(c, "cfg");
        ASSERT_FALSE(m.ok()) << words;
        EXPECT_NE(m.error().message.find(words), std::string::npos) << m.error().message;
    };
    nlohmann::json c = moe_config("qwen3_moe");
    c["first_k_dense_replace"] = 1;
    refused(c, "'first_k_dense_replace' is set; ferry plan does not model that MoE layout");
    c = moe_config("qwen3_moe");
    c["moe_layer_freq"] = 2;
    refused(c, "'moe_layer_freq'");
    c = moe_config("qwen3_moe");
    c["model_type"] = "deepseek_v3";
    refused(c, "model_type 'deepseek_v3' is not one ferry plan models");
    c = moe_config("mixtral");
    c["model_type"] = "llama";
    refused(c, "'num_local_experts' on model_type 'llama'; ferry plan models experts for mixtral");
    c = moe_config("mixtral");
    c.erase("num_experts_per_tok");
    refused(c, "a mixtral config without num_experts_per_tok");
    c = moe_config("qwen3_moe");
    c.erase("moe_intermediate_size");
    refused(c, "a qwen3_moe config without moe_intermediate_size");
    c = moe_config("qwen3_moe");
    c["num_experts_per_tok"] = 200;
    refused(c, "200 experts used per token of 128");
    c = moe_config("qwen3_moe");
    c["mlp_only_layers"] = {48};
    refused(c, "mlp_only_layers entry 48 is not a layer index");
    // A null or zero key is the config saying "none", not a layout.
    c = moe_config("qwen3_moe");
    c["first_k_dense_replace"] = 0;
    c["n_group"] = nullptr;
    EXPECT_TRUE(spec_from_hf_config(c, "cfg").ok());
}

TEST(PlanMoe, GgufExpertTensorsAreCountedExactly) {
    // A tiny qwen3moe file: 2 layers, hidden 64, 4 experts of 32 (q8_0), top 2; f16 elsewhere.
    const int64_t h = 64, hd = 16, heads = 4, kv = 2, e = 4, eff = 32, vocab = 96, layers = 2;
    gguf::Writer w;
    auto u32 = [&](const char* k, int64_t v) {
        w.set(std::string("qwen3moe.") + k, gguf::make_u32(static_cast<uint32_t>(v)));
    };
    w.set("general.architecture", gguf::make_string("qwen3moe"));
    u32("block_count", layers);
    u32("embedding_length", h);
    u32("attention.head_count", heads);
    u32("attention.head_count_kv", kv);
    u32("attention.key_length", hd);
    u32("feed_forward_length", 128);
    u32("context_length", 1024);
    u32("vocab_size", vocab);
    u32("expert_count", e);
    u32("expert_used_count", 2);
    u32("expert_feed_forward_length", eff);
    auto add = [&](const std::string& name, std::vector<int64_t> shape, DType type) {
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        const DTypeInfo& info = dtype_info(type);
        const size_t bytes = static_cast<size_t>(n / info.block_size * info.block_bytes);
        ASSERT_TRUE(w.add_tensor(name, shape, type, std::vector<uint8_t>(bytes)).ok()) << name;
    };
    add("token_embd.weight", {h, vocab}, DType::F16);
    add("output.weight", {h, vocab}, DType::F16);
    add("output_norm.weight", {h}, DType::F32);
    for (int64_t l = 0; l < layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        add(p + "attn_norm.weight", {h}, DType::F32);
        add(p + "attn_q.weight", {h, heads * hd}, DType::F16);
        add(p + "attn_k.weight", {h, kv * hd}, DType::F16);
        add(p + "attn_v.weight", {h, kv * hd}, DType::F16);
        add(p + "attn_output.weight", {heads * hd, h}, DType::F16);
        add(p + "attn_q_norm.weight", {hd}, DType::F32);
        add(p + "attn_k_norm.weight", {hd}, DType::F32);
        add(p + "ffn_norm.weight", {h}, DType::F32);
        add(p + "ffn_gate_inp.weight", {h, e}, DType::F32);
        add(p + "ffn_gate_exps.weight", {h, eff, e}, DType::Q8_0);
        add(p + "ffn_up_exps.weight", {h, eff, e}, DType::Q8_0);
        add(p + "ffn_down_exps.weight", {eff, h, e}, DType::Q8_0);
    }
    const auto path = std::filesystem::temp_directory_path() / "ferry_test_plan_moe.gguf";
    ASSERT_TRUE(w.write(path.string()).ok());
    auto m = spec_from_gguf(path.string());
    std::filesystem::remove(path);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->n_experts, e);
    EXPECT_EQ(m->n_experts_used, 2);
    EXPECT_EQ(m->expert_ffn, eff);
    EXPECT_EQ(m->n_dense_layers, 0);
    const int64_t routed = layers * e * 3 * h * eff;
    EXPECT_EQ(m->gguf_expert_params, routed);
    EXPECT_EQ(m->gguf_expert_bytes, static_cast<uint64_t>(routed / 32 * 34));  // q8_0
    // The tensors agree with the formula (q/k norms and router included).
    ModelSpec formula = *m;
    formula.gguf_params = 0;
    formula.gguf_expert_params = 0;
    formula.qk_norm = true;
    EXPECT_EQ(m->params(), param_count_formula(formula));
    EXPECT_EQ(m->active_params(), formula.active_params());
    EXPECT_EQ(m->active_params(), m->params() - routed / 2);
    // The plan reads the file's own expert bytes, not an average over the file.
    const MemoryPlan p = plan(*m, toy_device(8), PlanOptions{});
    EXPECT_EQ(p.expert_bytes_total, m->gguf_expert_bytes);
    const double embed = static_cast<double>(m->tied_embeddings ? 0 : m->gguf_embed_bytes);
    EXPECT_EQ(p.embed_bytes_total, static_cast<uint64_t>(embed));
    EXPECT_NEAR(decode_weight_bytes(p, 1),
                m->gguf_weight_bytes - m->gguf_expert_bytes / 2.0 - embed + embed / m->vocab, 1e-6);
}

TEST(PlanMoe, GgufPerExpertTensorNamesAndUnknownMoeArchs) {
    gguf::Writer w;
    w.set("general.architecture", gguf::make_string("deepseek2"));
    const std::initializer_list<std::pair<const char*, uint32_t>> keys = {
        {"block_count", 1},          {"embedding_length", 64}, {"attention.head_count", 4},
        {"feed_forward_length", 64}, {"vocab_size", 32},       {"expert_count", 4}};
    for (const auto& [k, v] : keys) w.set(std::string("deepseek2.") + k, gguf::make_u32(v));
    ASSERT_TRUE(
        w.add_tensor("token_embd.weight", {64, 32}, DType::F32, std::vector<uint8_t>(64 * 32 * 4))
            .ok());
    const auto path = std::filesystem::temp_directory_path() / "ferry_test_plan_ds.gguf";
    ASSERT_TRUE(w.write(path.string()).ok());
    auto m = spec_from_gguf(path.string());
    std::filesystem::remove(path);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().message.find("GGUF architecture 'deepseek2' with 4 experts"),
              std::string::npos)
        << m.error().message;
}

// --- sliding-window KV (Gemma 3) ----------------------------------------------------------------

TEST(PlanSliding, GemmaSlidingLayersHoldOnlyTheirWindow) {
    const ModelSpec g = preset("gemma-3-27b");
    EXPECT_EQ(g.n_sliding_layers, 52);  // 62 layers, every 6th global: 10 global
    EXPECT_EQ(g.sliding_window, 1024);
    const Device d = device("H100-SXM");
    PlanOptions o;
    o.ctx = 131072;
    const MemoryPlan p = plan(g, d, o);
    // 16 KV heads x 128 dims x 2 (K, V) x 2 B = 8 KiB per layer and token.
    const uint64_t layer_token = 2 * 16 * 128 * 2;
    EXPECT_EQ(p.kv_bytes_per_token, 62 * layer_token);
    EXPECT_EQ(p.kv_bytes_per_sequence, layer_token * (10 * 131072 + 52 * 1024));
    EXPECT_EQ(p.kv_bytes_per_sequence_no_window, 62 * layer_token * 131072);
    EXPECT_LT(p.kv_bytes_per_sequence * 5, p.kv_bytes_per_sequence_no_window);  // ~5.8x less
    // Within the window every layer holds every token.
    o.ctx = 1000;
    const MemoryPlan s = plan(g, d, o);
    EXPECT_EQ(s.kv_bytes_per_sequence, s.kv_bytes_per_token * 1000);
    // Decode reads a sequence's KV as held, window included.
    o.ctx = 131072;
    const Roofline r = roofline(p, d);
    EXPECT_NEAR(r.decode_kv_bytes_per_step, static_cast<double>(p.kv_bytes_per_sequence), 1.0);
    // Dense models are unchanged.
    const MemoryPlan l = plan(preset("llama-3-8b"), d, o);
    EXPECT_EQ(l.kv_bytes_per_sequence, l.kv_bytes_per_sequence_no_window);
}

TEST(PlanSliding, WindowsOnEveryLayerHoldOnlyTheWindow) {
    // Mistral v0.1's 4096 on all 32 layers: a 32k sequence holds 4096 tokens a layer (ferry's
    // engine gives the rest back).
    PlanOptions o;
    o.ctx = 32768;
    o.kv_dtype = "f16";
    const ModelSpec mistral = preset("mistral-7b");
    EXPECT_EQ(mistral.n_sliding_layers, 32);
    const MemoryPlan p = plan(mistral, toy_device(80), o);
    EXPECT_EQ(p.kv_bytes_per_sequence, uint64_t{2} * 32 * 8 * 128 * 2 * 4096);
    EXPECT_EQ(p.kv_bytes_per_sequence_no_window, p.kv_bytes_per_token * 32768);
    // config.json: Mistral's window; Qwen2's only with use_sliding_window, from
    // max_window_layers on; a null window or one past the context is none.
    nlohmann::json j = {{"model_type", "mistral"},  {"hidden_size", 4096},
                        {"num_hidden_layers", 32},  {"num_attention_heads", 32},
                        {"num_key_value_heads", 8}, {"intermediate_size", 14336},
                        {"vocab_size", 32000},      {"max_position_embeddings", 32768},
                        {"sliding_window", 4096}};
    EXPECT_EQ(spec_from_hf_config(j, "m")->n_sliding_layers, 32);
    j["sliding_window"] = nullptr;
    EXPECT_EQ(spec_from_hf_config(j, "m")->n_sliding_layers, 0);
    j["model_type"] = "qwen2";
    j["sliding_window"] = 4096;
    j["use_sliding_window"] = false;
    EXPECT_EQ(spec_from_hf_config(j, "q")->n_sliding_layers, 0);
    j["use_sliding_window"] = true;
    j["max_window_layers"] = 28;
    EXPECT_EQ(spec_from_hf_config(j, "q")->n_sliding_layers, 4);
    j["sliding_window"] = 32768;
    EXPECT_EQ(spec_from_hf_config(j, "q")->n_sliding_layers, 0);
}

TEST(PlanSliding, GemmaConfigJson) {
    // google/gemma-3-27b-it: the text model under text_config, most fields left to defaults.
    const nlohmann::json multimodal = {
        {"model_type", "gemma3"},
        {"torch_dtype", "bfloat16"},
        {"text_config",
         {{"model_type", "gemma3_text"},
          {"head_dim", 128},
          {"hidden_size", 5376},
          {"intermediate_size", 21504},
          {"num_attention_heads", 32},
          {"num_hidden_layers", 62},
          {"num_key_value_heads", 16},
          {"query_pre_attn_scalar", 168},
          {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
          {"sliding_window", 1024}}},
        {"vision_config", {{"hidden_size", 1152}, {"num_hidden_layers", 27}}}};
    auto m = spec_from_hf_config(multimodal, "gemma-3-27b-it");
    ASSERT_TRUE(m.ok()) << m.error().message;
    const ModelSpec want = preset("gemma-3-27b");
    EXPECT_EQ(m->head_dim, 128);
    EXPECT_TRUE(m->tied_embeddings);
    EXPECT_EQ(m->vocab, 262208);
    EXPECT_EQ(m->max_ctx, 131072);
    EXPECT_EQ(m->n_sliding_layers, 52);
    EXPECT_EQ(m->params(), want.params());
    // google/gemma-3-270m: flat, with layer_types.
    nlohmann::json types = nlohmann::json::array();
    for (int i = 0; i < 18; ++i)
        types.push_back((i + 1) % 6 == 0 ? "full_attention" : "sliding_attention");
    const nlohmann::json small = {{"model_type", "gemma3_text"},
                                  {"hidden_size", 640},
                                  {"num_hidden_layers", 18},
                                  {"num_attention_heads", 4},
                                  {"num_key_value_heads", 1},
                                  {"head_dim", 256},
                                  {"intermediate_size", 2048},
                                  {"vocab_size", 262144},
                                  {"max_position_embeddings", 32768},
                                  {"sliding_window", 512},
                                  {"layer_types", types}};
    auto s = spec_from_hf_config(small, "gemma-3-270m");
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(s->n_sliding_layers, 15);
    EXPECT_EQ(s->sliding_window, 512);
    EXPECT_EQ(s->params(), preset("gemma-3-270m").params());
    EXPECT_FALSE(spec_from_hf_config({{"model_type", "gemma3"}}, "x").ok());  // no text_config
}

TEST(PlanReport, MoeTextAndJson) {
    PlanOptions o;
    o.ctx = 4096;
    o.batch = 64;
    auto r = make_plan(preset("mixtral-8x7b"), device("H100-SXM"), o);
    ASSERT_TRUE(r.ok());
    const auto j = plan_to_json(*r);
    EXPECT_EQ(j["model"]["params_total"], j["model"]["params"]);
    EXPECT_EQ(j["model"]["params_active"], preset("mixtral-8x7b").active_params());
    EXPECT_EQ(j["model"]["n_experts"], 8);
    EXPECT_EQ(j["model"]["n_experts_used"], 2);
    EXPECT_NEAR(j["performance"]["experts_touched_per_layer"].get<double>(), 8, 1e-6);
    EXPECT_NE(j["performance"]["routing_rule"].get<std::string>().find("uniform"),
              std::string::npos);
    const std::string text = plan_to_text(*r);
    for (const char* words : {"12.88 B active", "8 experts top-2", "(all 8 experts)",
                              "uniform routing", "2 x active params"})
        EXPECT_NE(text.find(words), std::string::npos) << words << "\n" << text;
}

TEST(MachineProbe, MeasuresSomethingQuickly) {
    EXPECT_GT(kernels::cpu::measure_read_bandwidth_gbs(1, 64u << 20), 0.1);
    EXPECT_GT(kernels::cpu::measure_peak_gflops_f32(1), 0.1);
    EXPECT_GT(kernels::cpu::total_memory_bytes(), 1ull << 28);
}

}  // namespace
}  // namespace ferry::plan
