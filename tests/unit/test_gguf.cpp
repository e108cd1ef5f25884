#include "gguf/gguf_file.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace ferry::gguf {
namespace {

using VT = ValueType;

// Writes GGUF bytes field by field, so tests can build both valid files and every kind of
// broken one.
class Builder {
  public:
    std::vector<uint8_t> buf;

    template <class T>
    Builder& put(T x) {
        const auto* p = reinterpret_cast<const uint8_t*>(&x);
        buf.insert(buf.end(), p, p + sizeof(T));
        return *this;
    }
    Builder& str(std::string_view s) {
        put<uint64_t>(s.size());
        buf.insert(buf.end(), s.begin(), s.end());
        return *this;
    }
    Builder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        put<uint32_t>(0x46554747).put<uint32_t>(version).put(n_tensors).put(n_kv);
        return *this;
    }
    Builder& key(std::string_view k, VT t) {
        str(k);
        return put(static_cast<uint32_t>(t));
    }
    Builder& kv_u32(std::string_view k, uint32_t v) {
        key(k, VT::UINT32);
        return put(v);
    }
    Builder& kv_str(std::string_view k, std::string_view v) {
        key(k, VT::STRING);
        return str(v);
    }
    Builder& tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t type,
                    uint64_t offset) {
        str(name);
        put<uint32_t>(dims.size());
        for (uint64_t d : dims) put(d);
        return put(type).put(offset);
    }
    Builder& pad(size_t alignment) {
        while (buf.size() % alignment) buf.push_back(0);
        return *this;
    }
    Builder& zeros(size_t n) {
        buf.resize(buf.size() + n, 0);
        return *this;
    }
    std::span<const uint8_t> span() const { return buf; }
};

const uint8_t* file_data_start(const File& f) {
    return f.bytes().data() + f.data_offset();
}

Expected<std::shared_ptr<File>> parse(const Builder& b) {
    return File::parse(b.span(), "t.gguf");
}

// Expects a parse failure whose message names the file and contains `word`.
void expect_error(const Builder& b, std::string_view word) {
    auto f = parse(b);
    ASSERT_FALSE(f.ok()) << "expected an error containing '" << word << "'";
    const std::string& msg = f.error().message;
    EXPECT_NE(msg.find("t.gguf: "), std::string::npos) << msg;
    EXPECT_NE(msg.find(word), std::string::npos) << "missing '" << word << "' in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// One tensor of 32 f32 values at offset 0; the base for the tensor validation cases.
Builder one_tensor(std::vector<uint64_t> dims, uint32_t type = 0, uint64_t offset = 0) {
    Builder b;
    b.header(1, 0).tensor("w", dims, type, offset).pad(32).zeros(128);
    return b;
}

// A small valid file using every value type, nested arrays and two tensors.
Builder rich_file(uint32_t version = 3) {
    Builder b;
    b.header(2, 16, version);
    b.key("u8", VT::UINT8).put<uint8_t>(200);
    b.key("i8", VT::INT8).put<int8_t>(-100);
    b.key("u16", VT::UINT16).put<uint16_t>(60000);
    b.key("i16", VT::INT16).put<int16_t>(-30000);
    b.kv_u32("u32", 4000000000u);
    b.key("i32", VT::INT32).put<int32_t>(-2000000000);
    b.key("f32", VT::FLOAT32).put<float>(1.5f);
    b.key("bool", VT::BOOL).put<uint8_t>(1);
    b.kv_str("str", "hello");
    b.key("u64", VT::UINT64).put<uint64_t>(~0ull);
    b.key("i64", VT::INT64).put<int64_t>(-(1ll << 62));
    b.key("f64", VT::FLOAT64).put<double>(-2.25);
    b.key("arr_i32", VT::ARRAY).put(static_cast<uint32_t>(VT::INT32)).put<uint64_t>(3);
    b.put<int32_t>(1).put<int32_t>(-2).put<int32_t>(3);
    b.key("arr_str", VT::ARRAY).put(static_cast<uint32_t>(VT::STRING)).put<uint64_t>(2);
    b.str("a").str("");
    // [[1, 2], [], [["x"]]] : an array of arrays whose items differ in element type.
    b.key("nested", VT::ARRAY).put(static_cast<uint32_t>(VT::ARRAY)).put<uint64_t>(3);
    b.put(static_cast<uint32_t>(VT::UINT16)).put<uint64_t>(2).put<uint16_t>(1).put<uint16_t>(2);
    b.put(static_cast<uint32_t>(VT::FLOAT32)).put<uint64_t>(0);
    b.put(static_cast<uint32_t>(VT::ARRAY)).put<uint64_t>(1);
    b.put(static_cast<uint32_t>(VT::STRING)).put<uint64_t>(1).str("x");
    b.kv_str("general.architecture", "llama");
    b.tensor("a", {32, 2}, 2 /*q4_0*/, 0).tensor("b", {4}, 0 /*f32*/, 64);
    b.pad(32).zeros(96);
    return b;
}

TEST(Gguf, RealModel) {
    const std::string path = ferry::testing::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path;
    auto f = File::open(path);
    ASSERT_TRUE(f.ok()) << f.error().message;
    const File& file = **f;
    EXPECT_EQ(file.version(), 3u);
    EXPECT_EQ(file.alignment(), 32u);
    EXPECT_EQ(file.data_offset(), 1785664u);
    EXPECT_EQ(file.metadata().size(), 33u);
    EXPECT_EQ(file.tensors().size(), 272u);
    EXPECT_EQ(file.get_string("general.architecture"), "llama");
    EXPECT_EQ(file.get_int("llama.block_count"), 30);
    EXPECT_EQ(file.get_int("llama.embedding_length"), 576);
    EXPECT_NEAR(*file.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
    const Array* tokens = file.get_array("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->elem_type, VT::STRING);
    EXPECT_EQ(tokens->items.size(), 49152u);

    const TensorInfo* emb = file.tensor("token_embd.weight");
    ASSERT_NE(emb, nullptr);
    EXPECT_EQ(emb->type, DType::Q8_0);
    EXPECT_EQ(emb->shape, (std::vector<int64_t>{576, 49152}));
    EXPECT_EQ(emb->n_elements, 576 * 49152);
    EXPECT_EQ(emb->n_bytes, 576u / 32 * 34 * 49152);
    EXPECT_EQ(emb->data, file_data_start(file));
    const TensorInfo* down = file.tensor("blk.0.ffn_down.weight");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->type, DType::Q4_1);
    EXPECT_EQ(down->shape, (std::vector<int64_t>{1536, 576}));
    EXPECT_EQ(file.tensor("no.such.tensor"), nullptr);
}

TEST(Gguf, OpenReportsMissingFile) {
    auto f = File::open("/nonexistent/x.gguf");
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.error().message.find("/nonexistent/x.gguf: cannot open"), std::string::npos);
}

TEST(Gguf, OpenRefusesAFifoWithoutWaitingForAWriter) {
    const auto path = std::filesystem::temp_directory_path() / "ferry_test_gguf_fifo";
    std::filesystem::remove(path);
    ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
    auto opened = std::async(std::launch::async, [&] { return File::open(path.string()); });
    const bool returned = opened.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    if (!returned) ::close(::open(path.c_str(), O_WRONLY));  // a writer lets the blocked open end
    EXPECT_TRUE(returned) << "opening a FIFO waited for a writer";
    auto f = opened.get();
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.error().message.find("not a regular file"), std::string::npos) << f.error().message;
    std::filesystem::remove(path);
}

TEST(Gguf, OpenMapsAFileFromDisk) {
    const Builder b = rich_file();
    const auto path = std::filesystem::temp_directory_path() / "ferry_test_gguf_open.gguf";
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.buf.data()), b.buf.size());
    auto f = File::open(path.string());
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ((*f)->file_size(), b.buf.size());
    EXPECT_EQ((*f)->tensors().size(), 2u);
    std::filesystem::remove(path);
}

TEST(Gguf, EveryValueType) {
    auto f = parse(rich_file());
    ASSERT_TRUE(f.ok()) << f.error().message;
    const File& file = **f;
    EXPECT_EQ(file.metadata().size(), 16u);
    EXPECT_EQ(file.get_int("u8"), 200);
    EXPECT_EQ(file.get_int("i8"), -100);
    EXPECT_EQ(file.get_int("u16"), 60000);
    EXPECT_EQ(file.get_int("i16"), -30000);
    EXPECT_EQ(file.get_int("u32"), 4000000000ll);
    EXPECT_EQ(file.get_int("i32"), -2000000000);
    EXPECT_EQ(file.get_float("f32"), 1.5);
    EXPECT_EQ(file.get_bool("bool"), true);
    EXPECT_EQ(file.get_string("str"), "hello");
    EXPECT_EQ(file.get_int("u64"), std::nullopt);  // does not fit int64
    EXPECT_EQ(std::get<uint64_t>(file.find("u64")->v), ~0ull);
    EXPECT_EQ(file.get_int("i64"), -(1ll << 62));
    EXPECT_EQ(file.get_float("f64"), -2.25);
    EXPECT_EQ(file.get_float("i32"), -2e9);  // integers convert to float
    EXPECT_EQ(file.get_int("str"), std::nullopt);
    EXPECT_EQ(file.get_string("u8"), std::nullopt);
    EXPECT_EQ(file.find("u16")->type, VT::UINT16);
    EXPECT_EQ(file.find("f32")->type, VT::FLOAT32);
    EXPECT_TRUE(file.find("i8")->is_integer());
    EXPECT_TRUE(file.find("f64")->is_float());

    const Array* a = file.get_array("arr_i32");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->elem_type, VT::INT32);
    ASSERT_EQ(a->items.size(), 3u);
    EXPECT_EQ(a->items[1].as_int(), -2);
    const Array* s = file.get_array("arr_str");
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(*s->items[0].as_string(), "a");
    EXPECT_EQ(*s->items[1].as_string(), "");

    const Array* n = file.get_array("nested");
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->elem_type, VT::ARRAY);
    ASSERT_EQ(n->items.size(), 3u);
    const Array* n0 = n->items[0].as_array();
    ASSERT_NE(n0, nullptr);
    EXPECT_EQ(n0->elem_type, VT::UINT16);
    EXPECT_EQ(n0->items[1].as_int(), 2);
    EXPECT_TRUE(n->items[1].as_array()->items.empty());
    const Array* n2 = n->items[2].as_array()->items[0].as_array();
    ASSERT_NE(n2, nullptr);
    EXPECT_EQ(*n2->items[0].as_string(), "x");

    EXPECT_EQ(value_type_name(VT::FLOAT64), "float64");
    EXPECT_EQ(value_type_name(VT::ARRAY), "array");
}

TEST(Gguf, TensorInfos) {
    auto f = parse(rich_file());
    ASSERT_TRUE(f.ok()) << f.error().message;
    const File& file = **f;
    EXPECT_EQ(file.data_offset() % 32, 0u);
    const TensorInfo* a = file.tensor("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->type, DType::Q4_0);
    EXPECT_EQ(a->n_elements, 64);
    EXPECT_EQ(a->n_bytes, 36u);
    EXPECT_EQ(a->data, file_data_start(file));
    const TensorInfo* b = file.tensor("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->offset, 64u);
    EXPECT_EQ(b->data, file_data_start(file) + 64);
}

TEST(Gguf, Version2And3ReadTheSame) {
    auto v2 = parse(rich_file(2));
    ASSERT_TRUE(v2.ok()) << v2.error().message;
    EXPECT_EQ((*v2)->version(), 2u);
    EXPECT_EQ((*v2)->get_string("str"), "hello");
    EXPECT_EQ((*v2)->tensors().size(), 2u);
}

TEST(Gguf, CustomAlignment) {
    Builder b;
    b.header(2, 1).kv_u32("general.alignment", 64);
    b.tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 64).pad(64).zeros(128);
    auto f = parse(b);
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ((*f)->alignment(), 64u);
    EXPECT_EQ((*f)->data_offset() % 64, 0u);
    EXPECT_GT((*f)->data_offset(), 0u);

    Builder unaligned;  // aligned to 32 but not to the declared 64
    unaligned.header(1, 1).kv_u32("general.alignment", 64).tensor("a", {8}, 0, 32);
    unaligned.pad(64).zeros(128);
    expect_error(unaligned, "not aligned");
}

TEST(Gguf, MetadataOnlyFileWithoutPadding) {
    Builder b;
    b.header(0, 1).kv_str("k", "v");
    auto f = parse(b);
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_TRUE((*f)->tensors().empty());
}

TEST(Gguf, RejectsBadHeaders) {
    Builder magic;
    magic.put<uint32_t>(0x46554746).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(0);
    expect_error(magic, "not a GGUF file (bad magic 0x46554746)");
    expect_error(Builder().put<uint16_t>(0x4747), "not a GGUF file");
    expect_error(Builder().header(0, 0, 1), "unsupported GGUF version 1");
    expect_error(Builder().header(0, 0, 4), "unsupported GGUF version 4");
    Builder short_header;
    short_header.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint32_t>(0);
    expect_error(short_header, "truncated");
    expect_error(Builder().header(0, 1ull << 60), "metadata key #0 of 1152921504606846976");
    expect_error(Builder().header(1ull << 60, 0), "tensor info #0 of 1152921504606846976");
}

TEST(Gguf, RejectsBadMetadata) {
    Builder long_str;
    long_str.header(0, 1).key("k", VT::STRING).put<uint64_t>(1ull << 62).zeros(8);
    expect_error(long_str, "string length");
    Builder long_key;
    long_key.header(0, 1).put<uint64_t>(~0ull).zeros(16);
    expect_error(long_key, "key length");
    Builder long_arr;
    long_arr.header(0, 1).key("k", VT::ARRAY).put(static_cast<uint32_t>(VT::UINT32));
    long_arr.put<uint64_t>(1000).zeros(40);
    expect_error(long_arr, "array length 1000");
    Builder bad_type;
    bad_type.header(0, 1).key("k", static_cast<VT>(13)).zeros(8);
    expect_error(bad_type, "unknown metadata value type 13");
    Builder bad_elem;
    bad_elem.header(0, 1).key("k", VT::ARRAY).put<uint32_t>(99).put<uint64_t>(0);
    expect_error(bad_elem, "unknown array element type 99");
    Builder dup;
    dup.header(0, 2).kv_u32("k", 1).kv_u32("k", 2);
    expect_error(dup, "duplicate metadata key 'k'");
    Builder deep;  // 20 nested single-item arrays
    deep.header(0, 1).key("k", VT::ARRAY);
    for (int i = 0; i < 20; ++i) deep.put(static_cast<uint32_t>(VT::ARRAY)).put<uint64_t>(1);
    deep.zeros(64);
    expect_error(deep, "nested");
    for (uint32_t bad : {0u, 48u}) {
        Builder align;
        align.header(0, 1).kv_u32("general.alignment", bad);
        expect_error(align, "power of two");
    }
    Builder align_type;
    align_type.header(0, 1).kv_str("general.alignment", "32");
    expect_error(align_type, "general.alignment");
}

TEST(Gguf, ReportsWhereATruncationHappened) {
    const Builder full = rich_file();
    Builder cut;
    cut.buf.assign(full.buf.begin(), full.buf.begin() + 40);  // inside the first key
    expect_error(cut, "truncated");
    Builder in_tensor = one_tensor({32});
    in_tensor.buf.resize(24 + 8 + 1 + 4 + 3);  // inside the first dimension
    expect_error(
        in_tensor,
        "truncated file at offset 37 while reading dimension 0 of tensor info #0 of 1 'w'");
    // Every strict prefix of a valid file is rejected cleanly.
    for (size_t n = 0; n < full.buf.size() - 96; ++n) {
        auto f = File::parse(std::span(full.buf.data(), n), "t.gguf");
        EXPECT_FALSE(f.ok()) << "prefix of " << n << " bytes accepted";
    }
}

TEST(Gguf, RejectsBadTensorInfos) {
    expect_error(one_tensor({32, 1, 1, 1, 1}), "n_dims 5");
    expect_error(one_tensor({}), "n_dims 0");
    expect_error(one_tensor({32, 0}), "dimension 1 is 0");
    expect_error(one_tensor({32, ~0ull}), "must be positive");
    expect_error(one_tensor({1ull << 32, 1ull << 32}), "overflows int64");
    expect_error(one_tensor({1ull << 31, 1ull << 31}), "byte size");  // elements fit, bytes don't
    expect_error(one_tensor({32, 1000}), "out of range");             // bigger than file
    expect_error(one_tensor({32}, 0, 1ull << 40), "out of range");
    expect_error(one_tensor({32}, 0, 96), "out of range");  // end runs past the file
    expect_error(one_tensor({32}, 0, 16), "not aligned");
    expect_error(one_tensor({32}, 99), "unknown tensor type id 99 for tensor 'w'");
    expect_error(one_tensor({33}, 2), "not a multiple of block size 32");

    Builder dup;
    dup.header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad(32).zeros(64);
    expect_error(dup, "duplicate tensor name 'w'");
    Builder overlap;
    overlap.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad(32).zeros(64);
    expect_error(overlap, "tensors 'a' and 'b' overlap");
    Builder no_data;  // the data section would start beyond the end of the file
    no_data.header(1, 0).tensor("w", {8}, 0, 0);
    expect_error(no_data, "truncated");
}

// Random truncations and byte flips must give an error or a file, never a crash (the ASan
// build turns any out-of-bounds read into a failure). The fuzz harness does thousands.
void mutate_and_parse(std::vector<uint8_t> base, int iterations, uint32_t seed, int* accepted) {
    std::mt19937 rng(seed);
    for (int it = 0; it < iterations; ++it) {
        std::vector<uint8_t> m = base;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < flips; ++k)
            m[rng() % m.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
        size_t len = m.size();
        if (rng() % 3 == 0) len = rng() % (m.size() + 1);
        auto f = File::parse(std::span(m.data(), len), "mut.gguf");
        if (f.ok()) {
            ++*accepted;
            for (const auto& t : (*f)->tensors()) {
                ASSERT_GE(t.data, m.data());
                ASSERT_LE(t.data + t.n_bytes, m.data() + len);
            }
        } else {
            ASSERT_EQ(f.error().message.rfind("mut.gguf: ", 0), 0u) << f.error().message;
        }
    }
}

TEST(Gguf, SurvivesMutations) {
    int accepted = 0;
    mutate_and_parse(rich_file().buf, 400, 1234, &accepted);
    EXPECT_GT(accepted, 0);  // some flips only touch values, so the mutation reaches deep
}

TEST(Gguf, SurvivesMutationsOfTheRealHeader) {
    const std::string path = ferry::testing::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path;
    auto f = File::open(path);
    ASSERT_TRUE(f.ok()) << f.error().message;
    std::vector<uint8_t> header((*f)->bytes().data(), file_data_start(**f));
    int accepted = 0;
    mutate_and_parse(std::move(header), 40, 99, &accepted);  // tensor data absent: all rejected
}

}  // namespace
}  // namespace ferry::gguf
