#include "gguf/gguf_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "gguf/gguf_file.h"
#include "test_util.h"

namespace ferry::gguf {
namespace {

bool same_value(const Value& a, const Value& b) {
    if (a.type != b.type || a.v.index() != b.v.index()) return false;
    if (const Array* x = a.as_array()) {
        const Array* y = b.as_array();
        if (x->elem_type != y->elem_type || x->items.size() != y->items.size()) return false;
        for (size_t i = 0; i < x->items.size(); ++i)
            if (!same_value(x->items[i], y->items[i])) return false;
        return true;
    }
    if (const auto* s = a.as_string()) return *s == *b.as_string();
    if (const auto* u = std::get_if<uint64_t>(&a.v)) return *u == std::get<uint64_t>(b.v);
    if (const auto* i = std::get_if<int64_t>(&a.v)) return *i == std::get<int64_t>(b.v);
    if (const auto* d = std::get_if<double>(&a.v)) return *d == std::get<double>(b.v);
    return std::get<bool>(a.v) == std::get<bool>(b.v);
}

Writer every_value_type() {
    Writer w;
    w.set("general.architecture", make_string("llama"));
    w.set("t.u8", make_u8(250));
    w.set("t.i8", make_i8(-120));
    w.set("t.u16", make_u16(65000));
    w.set("t.i16", make_i16(-32000));
    w.set("t.u32", make_u32(4000000000u));
    w.set("t.i32", make_i32(-2000000000));
    w.set("t.u64", make_u64(18000000000000000000ull));
    w.set("t.i64", make_i64(-9000000000000000000ll));
    w.set("t.f32", make_f32(0.1f));
    w.set("t.f64", make_f64(0.1));
    w.set("t.bool", make_bool(true));
    w.set("t.empty_string", make_string(""));
    w.set("t.utf8", make_string("h\xC3\xA9llo \xE2\x9C\x93"));
    w.set("t.arr_i32", make_array(ValueType::INT32, {make_i32(1), make_i32(-2), make_i32(3)}));
    w.set("t.arr_str", make_array(ValueType::STRING, {make_string("a"), make_string("")}));
    w.set("t.arr_empty", make_array(ValueType::FLOAT32, {}));
    w.set("t.nested",
          make_array(ValueType::ARRAY, {make_array(ValueType::UINT8, {make_u8(1)}),
                                        make_array(ValueType::BOOL, {make_bool(false)})}));
    return w;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
    return v;
}

TEST(GgufWriter, RoundTripsMetadataOfEveryTypeAndTensorBytes) {
    Writer w = every_value_type();
    ASSERT_TRUE(w.add_tensor("a", {64, 3}, DType::F32, pattern(64 * 3 * 4, 1)).ok());
    ASSERT_TRUE(w.add_tensor("b", {32, 2}, DType::Q8_0, pattern(2 * 34, 2)).ok());
    ASSERT_TRUE(w.add_tensor("c", {256}, DType::Q6_K, pattern(210, 3)).ok());
    ASSERT_TRUE(w.add_tensor("d", {5}, DType::F16, pattern(10, 4)).ok());  // odd size: padding
    auto bytes = w.write_to_memory();
    ASSERT_TRUE(bytes.ok()) << bytes.error().message;
    auto f = File::parse(*bytes);
    ASSERT_TRUE(f.ok()) << f.error().message;
    File& file = **f;
    EXPECT_EQ(file.version(), 3u);
    const Writer ref = every_value_type();
    ASSERT_EQ(file.metadata().size(), 18u);
    for (const auto& [k, v] : file.metadata()) {
        const Value* want = ref.find(k);
        ASSERT_NE(want, nullptr) << k;
        EXPECT_TRUE(same_value(*want, v)) << k;
    }
    EXPECT_EQ(*file.get_float("t.f32"), double(0.1f));
    ASSERT_EQ(file.tensors().size(), 4u);
    const char* names[] = {"a", "b", "c", "d"};
    const size_t sizes[] = {64 * 3 * 4, 68, 210, 10};
    for (int i = 0; i < 4; ++i) {
        const TensorInfo* t = file.tensor(names[i]);
        ASSERT_NE(t, nullptr);
        EXPECT_EQ(t->n_bytes, sizes[i]);
        EXPECT_EQ(t->offset % 32, 0u);
        EXPECT_EQ(0, std::memcmp(t->data, pattern(sizes[i], static_cast<uint8_t>(i + 1)).data(),
                                 sizes[i]))
            << names[i];
    }
    EXPECT_EQ(file.tensor("a")->shape, (std::vector<int64_t>{64, 3}));
}

TEST(GgufWriter, HonoursCustomAlignment) {
    Writer w;
    w.set("general.alignment", make_u32(64));
    ASSERT_TRUE(w.add_tensor("x", {3}, DType::F32, pattern(12, 0)).ok());
    ASSERT_TRUE(w.add_tensor("y", {3}, DType::F32, pattern(12, 9)).ok());
    auto bytes = w.write_to_memory();
    ASSERT_TRUE(bytes.ok());
    auto f = File::parse(*bytes);
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ((*f)->alignment(), 64u);
    EXPECT_EQ((*f)->data_offset() % 64, 0u);
    EXPECT_EQ((*f)->tensor("y")->offset, 64u);
    EXPECT_EQ(0, std::memcmp((*f)->tensor("y")->data, pattern(12, 9).data(), 12));
}

TEST(GgufWriter, RejectsBadTensors) {
    Writer w;
    EXPECT_FALSE(w.add_tensor("q", {48, 2}, DType::Q8_0, std::vector<uint8_t>{}).ok());
    EXPECT_FALSE(w.add_tensor("z", {}, DType::F32, std::vector<uint8_t>{}).ok());
    ASSERT_TRUE(w.add_tensor("ok", {4}, DType::F32, std::vector<uint8_t>(12)).ok());   // short
    EXPECT_FALSE(w.add_tensor("ok", {4}, DType::F32, std::vector<uint8_t>(16)).ok());  // dup
    EXPECT_FALSE(w.write_to_memory().ok());  // 12 bytes produced, 16 declared
}

TEST(GgufWriter, RewritesTheDefaultModelByteForByte) {
    const std::string path = ferry::testing::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no default model at " << path;
    auto in = File::open(path);
    ASSERT_TRUE(in.ok());
    Writer w;
    w.copy_metadata(**in);
    for (const auto& t : (*in)->tensors())
        ASSERT_TRUE(
            w.add_tensor(t.name, t.shape, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes))
                .ok());
    const std::string out = ::testing::TempDir() + "/ferry_writer_copy.gguf";
    ASSERT_TRUE(w.write(out).ok());
    auto back = File::open(out);
    ASSERT_TRUE(back.ok()) << back.error().message;
    // Same layout in, same file out: llama.cpp writes v3 with the same padding rules.
    EXPECT_EQ((*back)->file_size(), (*in)->file_size());
    const auto a = (*in)->bytes(), b = (*back)->bytes();
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
    std::filesystem::remove(out);
}

}  // namespace
}  // namespace ferry::gguf
