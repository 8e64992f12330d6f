// GGUF writer: byte-identical round trips of the shared vocab files and of synthetic files with every
// value type, nested arrays, several tensor types and a non-default alignment; writer errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Files in dir whose names contain ".tmp" (the writer's temporaries).
int stray_temps(const fs::path& dir) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir))
        n += e.path().filename().string().find(".tmp") != std::string::npos;
    return n;
}

fs::path temp_path(const std::string& name) {
    fs::path dir = fs::temp_directory_path() / ("pelican_gguf_test_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir / name;
}

TEST(GgufWrite, VocabFilesRoundTripByteIdentical) {
    fs::path dir = fs::path(PELICAN_SHARED_DIR) / "data" / "vocab";
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
        if (e.path().extension() != ".gguf") continue;
        SCOPED_TRACE(e.path().string());
        auto f = GgufFile::open(e.path().string());
        ASSERT_TRUE(f.ok()) << f.error().message;
        auto bytes = gguf_to_bytes(*f);
        ASSERT_TRUE(bytes.ok()) << bytes.error().message;
        ASSERT_EQ(bytes->size(), f->bytes().size());
        EXPECT_TRUE(std::equal(bytes->begin(), bytes->end(), f->bytes().begin()));
        ++n;
    }
    EXPECT_GE(n, 10);
    // And once through the streaming file path.
    auto f = GgufFile::open((dir / "ggml-vocab-llama-spm.gguf").string());
    ASSERT_TRUE(f.ok());
    fs::path out = temp_path("spm.gguf");
    ASSERT_TRUE(write_gguf(*f, out.string()).ok());
    auto written = read_bytes(out);
    ASSERT_EQ(written.size(), f->bytes().size());
    EXPECT_TRUE(std::equal(written.begin(), written.end(), f->bytes().begin()));
    fs::remove(out);
}

GgufValue scalar(GgufType t, uint64_t u, int64_t i, double f) {
    GgufValue v;
    v.type = t;
    v.u = u;
    v.i = i;
    v.f = f;
    return v;
}

// One KV per value type, plus nested arrays.
void add_all_kvs(GgufWriter& w) {
    ASSERT_TRUE(w.add_kv("t.u8", scalar(GgufType::U8, 200, 0, 0)).ok());
    ASSERT_TRUE(w.add_kv("t.i8", scalar(GgufType::I8, 0, -100, 0)).ok());
    ASSERT_TRUE(w.add_kv("t.u16", scalar(GgufType::U16, 60000, 0, 0)).ok());
    ASSERT_TRUE(w.add_kv("t.i16", scalar(GgufType::I16, 0, -30000, 0)).ok());
    ASSERT_TRUE(w.add_kv("t.u32", gguf_u32(4000000000u)).ok());
    ASSERT_TRUE(w.add_kv("t.i32", gguf_i32(-2000000000)).ok());
    ASSERT_TRUE(w.add_kv("t.f32", gguf_f32(0.1f)).ok());
    ASSERT_TRUE(w.add_kv("t.bool", gguf_bool(true)).ok());
    ASSERT_TRUE(w.add_kv("t.string", gguf_string("h\xC3\xA9llo")).ok());
    ASSERT_TRUE(w.add_kv("t.u64", gguf_u64(~uint64_t{0})).ok());
    ASSERT_TRUE(w.add_kv("t.i64", scalar(GgufType::I64, 0, INT64_MIN, 0)).ok());
    ASSERT_TRUE(w.add_kv("t.f64", scalar(GgufType::F64, 0, 0, 1.0 / 3.0)).ok());
    ASSERT_TRUE(w.add_kv("t.strs", gguf_string_array({"a", "", "ccc"})).ok());
    ASSERT_TRUE(w.add_kv("t.empty", gguf_array(GgufType::F32, {})).ok());
    std::vector<GgufValue> inner1 = {gguf_i32(1), gguf_i32(2)};
    std::vector<GgufValue> inner2 = {gguf_i32(3)};
    std::vector<GgufValue> outer = {gguf_array(GgufType::I32, inner1), gguf_array(GgufType::I32, inner2)};
    ASSERT_TRUE(w.add_kv("t.nested", gguf_array(GgufType::ARRAY, outer)).ok());
    ASSERT_TRUE(w.add_kv("general.alignment", gguf_u32(64)).ok());
}

struct Synthetic {
    std::vector<std::vector<uint8_t>> data;  // tensor bytes, random
};

Synthetic add_tensors(GgufWriter& w) {
    struct Spec {
        const char* name;
        DType type;
        std::vector<uint64_t> dims;
    };
    std::vector<Spec> specs = {
        {"f32", DType::F32, {3, 5}},         {"f16", DType::F16, {7}},        {"q4_0", DType::Q4_0, {64, 3}},
        {"q8_0", DType::Q8_0, {32, 2, 2}},   {"q4_k", DType::Q4_K, {256, 2}}, {"q6_k", DType::Q6_K, {512}},
        {"bf16", DType::BF16, {5, 1, 1, 3}}, {"empty", DType::F32, {0, 4}},   {"i32", DType::I32, {1}},
    };
    Synthetic s;
    std::mt19937 rng(42);
    for (const auto& sp : specs) {
        EXPECT_TRUE(w.add_tensor(sp.name, sp.type, sp.dims).ok()) << sp.name;
        std::vector<uint8_t> d(w.tensors().back().n_bytes);
        for (auto& b : d) b = static_cast<uint8_t>(rng());
        s.data.push_back(std::move(d));
    }
    return s;
}

TEST(GgufWrite, SyntheticAllTypesStreamedRoundTrip) {
    GgufWriter w;
    add_all_kvs(w);
    Synthetic s = add_tensors(w);
    EXPECT_EQ(w.alignment(), 64u);
    fs::path out = temp_path("synthetic.gguf");
    ASSERT_TRUE(w.begin(out.string()).ok());
    for (const auto& d : s.data)  // odd chunk sizes: 7 bytes at a time
        for (size_t i = 0; i < d.size(); i += 7)
            ASSERT_TRUE(w.write_tensor_data(std::span(d).subspan(i, std::min<size_t>(7, d.size() - i))).ok());
    ASSERT_TRUE(w.finish().ok());
    auto bytes = read_bytes(out);
    EXPECT_EQ(bytes.size(), w.file_size());

    auto f = GgufFile::parse(bytes, "synthetic");
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->alignment(), 64u);
    EXPECT_EQ(f->data_offset() % 64, 0u);
    EXPECT_EQ(f->find("t.u8")->u, 200u);
    EXPECT_EQ(f->find("t.i8")->i, -100);
    EXPECT_EQ(f->get_int("t.u16"), 60000);
    EXPECT_EQ(f->get_int("t.i16"), -30000);
    EXPECT_EQ(f->get_int("t.u32"), 4000000000LL);
    EXPECT_EQ(f->get_int("t.i32"), -2000000000);
    EXPECT_EQ(f->get_float("t.f32"), static_cast<double>(0.1f));
    EXPECT_EQ(f->get_bool("t.bool"), true);
    EXPECT_EQ(f->get_string("t.string"), "h\xC3\xA9llo");
    EXPECT_EQ(f->find("t.u64")->u, ~uint64_t{0});
    EXPECT_FALSE(f->get_int("t.u64"));  // does not fit int64
    EXPECT_EQ(f->get_int("t.i64"), INT64_MIN);
    EXPECT_EQ(f->get_float("t.f64"), 1.0 / 3.0);
    EXPECT_EQ(f->get_string_array("t.strs"), (std::vector<std::string>{"a", "", "ccc"}));
    EXPECT_EQ(f->get_f32_array("t.empty")->size(), 0u);
    const GgufValue* nested = f->find("t.nested");
    ASSERT_NE(nested, nullptr);
    ASSERT_EQ(nested->elem_type, GgufType::ARRAY);
    ASSERT_EQ(nested->arr.size(), 2u);
    EXPECT_EQ(nested->arr[0].arr[1].i, 2);
    EXPECT_EQ(nested->arr[1].arr[0].i, 3);

    ASSERT_EQ(f->tensors().size(), s.data.size());
    for (size_t i = 0; i < s.data.size(); ++i) {
        const auto& t = f->tensors()[i];
        SCOPED_TRACE(t.name);
        EXPECT_EQ(t.offset % 64, 0u);
        auto d = f->tensor_data(t);
        ASSERT_EQ(d.size(), s.data[i].size());
        EXPECT_TRUE(std::equal(d.begin(), d.end(), s.data[i].begin()));
    }
    EXPECT_EQ(f->find_tensor("q4_k")->n_bytes, 2u * 144);
    EXPECT_EQ(f->find_tensor("q6_k")->n_bytes, 2u * 210);
    EXPECT_EQ(f->find_tensor("empty")->n_bytes, 0u);

    // read -> write is byte-identical, in memory and through the file path.
    auto again = gguf_to_bytes(*f);
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(*again, bytes);
    std::vector<std::span<const uint8_t>> spans(s.data.begin(), s.data.end());
    auto mem = w.to_bytes(spans);
    ASSERT_TRUE(mem.ok());
    EXPECT_EQ(*mem, bytes);
    fs::path out2 = temp_path("synthetic2.gguf");
    ASSERT_TRUE(write_gguf(*f, out2.string()).ok());
    EXPECT_EQ(read_bytes(out2), bytes);
    fs::remove(out);
    fs::remove(out2);
}

TEST(GgufWrite, Version2RoundTrip) {
    GgufWriter w(2);
    ASSERT_TRUE(w.add_kv("general.architecture", gguf_string("llama")).ok());
    ASSERT_TRUE(w.add_tensor("x", DType::F32, {4}).ok());
    std::vector<uint8_t> d(16, 0xAB);
    std::vector<std::span<const uint8_t>> spans = {d};
    auto bytes = w.to_bytes(spans);
    ASSERT_TRUE(bytes.ok());
    auto f = GgufFile::parse(*bytes, "v2");
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->version(), 2u);
    EXPECT_EQ(*gguf_to_bytes(*f), *bytes);
}

TEST(GgufWrite, Errors) {
    GgufWriter w;
    ASSERT_TRUE(w.add_kv("a", gguf_u32(1)).ok());
    EXPECT_NE(w.add_kv("a", gguf_u32(2)).error().message.find("duplicate key 'a'"), std::string::npos);
    EXPECT_FALSE(w.add_kv("", gguf_u32(2)).ok());
    auto mixed = gguf_array(GgufType::I32, {gguf_i32(1), gguf_u32(2)});
    EXPECT_NE(w.add_kv("m", mixed).error().message.find("array of i32 holds a u32"), std::string::npos);
    EXPECT_FALSE(w.add_kv("general.alignment", gguf_u32(24)).ok());
    EXPECT_FALSE(w.add_kv("general.alignment", gguf_u64(32)).ok());
    GgufValue deep = gguf_i32(0);
    for (int i = 0; i < kGgufMaxArrayDepth + 1; ++i) deep = gguf_array(deep.type, {deep});
    EXPECT_NE(w.add_kv("deep", deep).error().message.find("nested"), std::string::npos);
    EXPECT_NE(w.add_tensor("q", DType::Q4_0, {33}).error().message.find("q4_0 blocks"), std::string::npos);
    EXPECT_FALSE(w.add_tensor("d", DType::F32, {1, 1, 1, 1, 1}).ok());
    EXPECT_FALSE(w.add_tensor("f8", DType::F8_E4M3, {4}).ok());
    ASSERT_TRUE(w.add_tensor("t", DType::F32, {4}).ok());
    EXPECT_FALSE(w.add_tensor("t", DType::F32, {4}).ok());

    // Short data: finish() fails, leaves neither the target nor the temp file.
    fs::path out = temp_path("short.gguf");
    ASSERT_TRUE(w.begin(out.string()).ok());
    std::vector<uint8_t> d(8, 1);
    ASSERT_TRUE(w.write_tensor_data(d).ok());
    auto st = w.finish();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("tensor 't' got 8 of 16 bytes"), std::string::npos)
        << st.error().message;
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
    EXPECT_EQ(stray_temps(out.parent_path()), 0);

    // Too much data.
    GgufWriter w2;
    ASSERT_TRUE(w2.add_tensor("t", DType::F32, {1}).ok());
    fs::path out2 = temp_path("long.gguf");
    ASSERT_TRUE(w2.begin(out2.string()).ok());
    EXPECT_FALSE(w2.write_tensor_data(d).ok());
    EXPECT_FALSE(fs::exists(out2.string() + ".tmp"));
    EXPECT_EQ(stray_temps(out2.parent_path()), 0);
}

}  // namespace
}  // namespace pelican
