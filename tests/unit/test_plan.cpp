// The planner against the seeds' worked numbers, the public parameter counts of the presets,
// and the advice / TP / max-sequences arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

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
    };
    for (const auto& [name, count] : official) {
        const double got = static_cast<double>(preset(name).params());
        EXPECT_NEAR(got / count, 1.0, 0.01) << name << " formula gives " << got;
    }
    EXPECT_EQ(preset_names().size(), std::size(official));
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
    EXPECT_NEAR(r.decode_step_ms, p.weights_bytes_total / 2e12 * 1e3, 0.01);
    EXPECT_NEAR(r.decode_step_ms, 6.74, 0.1);
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

TEST(PlanReport, JsonHasStableKeys) {
    PlanOptions o;
    o.ctx = 8192;
    o.batch = 16;
    auto r = make_plan(preset("llama-3-70b"), device("H100-SXM"), o);
    ASSERT_TRUE(r.ok());
    const auto j = plan_to_json(*r);
    for (const char* k :
         {"weights_bytes", "kv_bytes_per_token", "kv_bytes_per_token_mha", "kv_bytes_per_sequence",
          "kv_bytes_total", "activation_bytes", "overhead_bytes", "total_bytes", "capacity_bytes",
          "fits", "margin_bytes", "max_sequences"})
        EXPECT_TRUE(j["memory"].contains(k)) << k;
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

TEST(MachineProbe, MeasuresSomethingQuickly) {
    EXPECT_GT(kernels::cpu::measure_read_bandwidth_gbs(1, 64u << 20), 0.1);
    EXPECT_GT(kernels::cpu::measure_peak_gflops_f32(1), 0.1);
    EXPECT_GT(kernels::cpu::total_memory_bytes(), 1ull << 28);
}

}  // namespace
}  // namespace ferry::plan
