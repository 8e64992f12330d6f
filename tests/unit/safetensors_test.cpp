// safetensors reader/writer (one test per validation rule), HF folders with shards, hf_info.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mmap_file.h"
#include "formats/hf_folder.h"
#include "formats/hf_info.h"
#include "formats/safetensors.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

// 8-byte little-endian length + header + data.
Bytes make_file(const std::string& header, const Bytes& data, uint64_t declared_len = UINT64_MAX) {
    uint64_t n = declared_len == UINT64_MAX ? header.size() : declared_len;
    Bytes out(8 + header.size() + data.size());
    for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
    std::copy(header.begin(), header.end(), out.begin() + 8);
    std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
    return out;
}

Bytes iota_bytes(size_t n, uint8_t start = 0) {
    Bytes b(n);
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(start + i);
    return b;
}

// Parses and expects failure; returns the message.
std::string parse_error(const Bytes& file) {
    auto r = SafetensorsFile::parse(file, "bad.safetensors");
    EXPECT_FALSE(r.ok()) << "parse unexpectedly succeeded";
    if (r.ok()) return "";
    EXPECT_NE(r.error().message.find("bad.safetensors"), std::string::npos) << r.error().message;
    return r.error().message;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

const char* kGood =
    R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
    R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";

TEST(Safetensors, ReadsGoodFile) {
    Bytes data = iota_bytes(28);
    Bytes file = make_file(kGood, data);
    auto r = SafetensorsFile::parse(file, "good");
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->tensors().size(), 2u);
    EXPECT_EQ(r->tensors()[0].name, "a");  // offset order
    const SafetensorsTensor* a = r->find("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->dtype_str, "F32");
    EXPECT_EQ(a->st_dtype, StDType::F32);
    ASSERT_TRUE(a->dtype.has_value());
    EXPECT_EQ(*a->dtype, DType::F32);
    EXPECT_EQ(a->shape, (std::vector<uint64_t>{2, 3}));
    EXPECT_EQ(a->n_elements(), 6u);
    ASSERT_EQ(a->data.size(), 24u);
    EXPECT_EQ(a->data.data(), file.data() + 8 + r->header_bytes());
    const SafetensorsTensor* b = r->find("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(*b->dtype, DType::BF16);
    EXPECT_EQ(b->data[0], 24);
    EXPECT_EQ(r->find("c"), nullptr);
    EXPECT_TRUE(r->has_metadata());
    EXPECT_EQ(r->metadata().at("format"), "pt");
}

TEST(Safetensors, DtypeTable) {
    struct Row {
        const char* name;
        uint32_t bytes;
        std::optional<DType> dt;
    };
    for (const Row& row :
         {Row{"F64", 8, DType::F64}, Row{"F32", 4, DType::F32}, Row{"F16", 2, DType::F16},
          Row{"BF16", 2, DType::BF16}, Row{"F8_E4M3", 1, DType::F8_E4M3}, Row{"F8_E5M2", 1, {}},
          Row{"I64", 8, DType::I64}, Row{"I32", 4, DType::I32}, Row{"I16", 2, DType::I16},
          Row{"I8", 1, DType::I8}, Row{"U8", 1, {}}, Row{"BOOL", 1, {}}}) {
        std::string h = fmt::format(R"({{"t":{{"dtype":"{}","shape":[3],"data_offsets":[0,{}]}}}})", row.name,
                                    3 * row.bytes);
        auto r = SafetensorsFile::parse(make_file(h, Bytes(3 * row.bytes)));
        ASSERT_TRUE(r.ok()) << row.name << ": " << r.error().message;
        EXPECT_EQ(r->tensors()[0].dtype_str, row.name);
        EXPECT_EQ(r->tensors()[0].dtype, row.dt) << row.name;
    }
    EXPECT_FALSE(st_dtype_from_name("bf16").has_value());  // names are case-sensitive
}

TEST(Safetensors, ZeroSizedAndEmpty) {
    auto r =
        SafetensorsFile::parse(make_file(R"({"z":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]}})", {}));
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->find("z")->n_elements(), 0u);
    auto e = SafetensorsFile::parse(make_file("{}      ", {}));
    ASSERT_TRUE(e.ok()) << e.error().message;
    EXPECT_TRUE(e->tensors().empty());
}

TEST(SafetensorsBad, TooSmall) { EXPECT_TRUE(contains(parse_error(Bytes{1, 2, 3}), "too small")); }

TEST(SafetensorsBad, HeaderLengthAbsurd) {
    EXPECT_TRUE(contains(parse_error(make_file("{}", {}, 100'000'001)), "absurd"));
    EXPECT_TRUE(contains(parse_error(make_file("{}", {}, UINT64_MAX - 1)), "absurd"));
}

TEST(SafetensorsBad, HeaderLengthBeyondFile) {
    EXPECT_TRUE(contains(parse_error(make_file("{}", {}, 1000)), "past the end"));
}

TEST(SafetensorsBad, JsonDoesNotParse) {
    EXPECT_TRUE(contains(parse_error(make_file(R"({"a":{"dtype":)", {})), "not valid JSON"));
    EXPECT_TRUE(contains(parse_error(make_file(std::string("{}\0\0", 4), {})), "not valid JSON"));
}

TEST(SafetensorsBad, HeaderNotObject) {
    EXPECT_TRUE(contains(parse_error(make_file("[1,2]", {})), "must be a JSON object"));
}

TEST(SafetensorsBad, WrongValueShapes) {
    EXPECT_TRUE(contains(parse_error(make_file(R"({"a":5})", {})), "tensor 'a': entry must be an object"));
    EXPECT_TRUE(contains(parse_error(make_file(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", Bytes(4))),
                         "\"dtype\""));
    EXPECT_TRUE(
        contains(parse_error(make_file(R"({"a":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", Bytes(4))),
                 "\"shape\""));
    EXPECT_TRUE(contains(
        parse_error(make_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", Bytes(4))),
        "non-negative"));
    EXPECT_TRUE(contains(
        parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", Bytes(4))),
        "non-negative"));
    EXPECT_TRUE(
        contains(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", Bytes(4))),
                 "data_offsets"));
    EXPECT_TRUE(contains(parse_error(make_file(R"({"__metadata__":{"k":1}})", {})), "__metadata__"));
    EXPECT_TRUE(contains(parse_error(make_file(R"({"__metadata__":[]})", {})), "__metadata__"));
}

TEST(SafetensorsBad, UnknownDtype) {
    std::string m =
        parse_error(make_file(R"({"w":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]}})", Bytes(1)));
    EXPECT_TRUE(contains(m, "tensor 'w'")) << m;
    EXPECT_TRUE(contains(m, "unknown dtype \"Q4_K\"")) << m;
}

TEST(SafetensorsBad, ShapeProductOverflow) {
    std::string m = parse_error(
        make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}})", {}));
    EXPECT_TRUE(contains(m, "overflow")) << m;
    // Elements fit in 64 bits, bytes do not.
    m = parse_error(
        make_file(R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", {}));
    EXPECT_TRUE(contains(m, "overflow")) << m;
}

TEST(SafetensorsBad, SizeMismatch) {
    std::string m =
        parse_error(make_file(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", Bytes(12)));
    EXPECT_TRUE(contains(m, "tensor 'w'")) << m;
    EXPECT_TRUE(contains(m, "needs 16 bytes")) << m;
}

TEST(SafetensorsBad, OffsetsOutsideData) {
    std::string m =
        parse_error(make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", Bytes(4)));
    EXPECT_TRUE(contains(m, "outside the data section")) << m;
    m = parse_error(make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", Bytes(8)));
    EXPECT_TRUE(contains(m, "end before begin")) << m;
}

TEST(SafetensorsBad, OverlappingTensors) {
    std::string m = parse_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                          Bytes(12)));
    EXPECT_TRUE(contains(m, "overlap")) << m;
    EXPECT_TRUE(contains(m, "'b'") && contains(m, "'a'")) << m;
}

TEST(SafetensorsBad, GapBetweenTensors) {
    // The reference library rejects gaps (InvalidOffset), so do we.
    std::string m = parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                          Bytes(12)));
    EXPECT_TRUE(contains(m, "tensor 'b'") && contains(m, "4 unused bytes")) << m;
}

TEST(SafetensorsBad, TrailingBytes) {
    // The reference library rejects data not covered by tensors (MetadataIncompleteBuffer).
    std::string m =
        parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", Bytes(6)));
    EXPECT_TRUE(contains(m, "2 trailing bytes")) << m;
}

// Byte vectors below are the reference library's documented serializer outputs (its unit tests).
TEST(SafetensorsWriter, MatchesReferenceBytes) {
    Bytes data(24);
    float vals[6] = {0, 1, 2, 3, 4, 5};
    std::memcpy(data.data(), vals, 24);
    auto out = safetensors_serialize({{"attn.0", StDType::F32, {1, 2, 3}, data}}, {});
    ASSERT_TRUE(out.ok()) << out.error().message;
    std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    EXPECT_EQ(header.size(), 64u);
    EXPECT_EQ(*out, make_file(header, data));

    auto empty = safetensors_serialize({}, {});
    ASSERT_TRUE(empty.ok());
    EXPECT_EQ(*empty, make_file("{}      ", {}));

    auto meta = safetensors_serialize({}, {{"framework", "pt"}});
    ASSERT_TRUE(meta.ok());
    EXPECT_EQ(*meta, make_file(R"({"__metadata__":{"framework":"pt"}}     )", {}));
}

TEST(SafetensorsWriter, RoundTripAndByteIdentity) {
    Bytes f32 = iota_bytes(4 * 6), bf16 = iota_bytes(2 * 4, 100), i8 = iota_bytes(5, 200),
          f64 = iota_bytes(8, 7);
    std::vector<SafetensorsWriteTensor> ts = {
        {"model.layers.0.mlp.up_proj.weight", StDType::BF16, {2, 2}, bf16},
        {"model.embed_tokens.weight", StDType::F32, {3, 2}, f32},
        {"flags", StDType::I8, {5}, i8},
        {"scale", StDType::F64, {}, f64},
        {"tëst \"quoted\"", StDType::F32, {0}, {}},
    };
    std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ünïcode"}};
    auto bytes = safetensors_serialize(ts, meta);
    ASSERT_TRUE(bytes.ok()) << bytes.error().message;
    EXPECT_EQ((bytes->size() - 8 - 45) % 8, 0u);  // 45 data bytes; header padded to 8

    auto r = SafetensorsFile::parse(*bytes, "rt");
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->tensors().size(), ts.size());
    EXPECT_EQ(r->tensors()[0].name, "scale");  // F64 sorts first (largest alignment)
    for (const auto& w : ts) {
        const SafetensorsTensor* t = r->find(w.name);
        ASSERT_NE(t, nullptr) << w.name;
        EXPECT_EQ(t->st_dtype, w.dtype);
        EXPECT_EQ(t->shape, w.shape);
        EXPECT_TRUE(std::equal(t->data.begin(), t->data.end(), w.data.begin(), w.data.end())) << w.name;
        EXPECT_EQ(static_cast<size_t>(t->data.data() - bytes->data()) % st_dtype_info(t->st_dtype).elem_bytes,
                  0u);
    }
    EXPECT_EQ(r->metadata(), meta);

    // write(read(f)) == f, through a real file.
    fs::path p = fs::temp_directory_path() / fmt::format("pelican_st_rt_{}.safetensors", getpid());
    std::vector<SafetensorsWriteTensor> again;
    for (const auto& t : r->tensors()) again.push_back(to_write_tensor(t));
    ASSERT_TRUE(safetensors_write(p.string(), again, r->metadata()).ok());
    EXPECT_FALSE(fs::exists(p.string() + ".tmp"));
    auto m = MappedFile::open(p.string());
    ASSERT_TRUE(m.ok());
    EXPECT_TRUE(std::equal(m->bytes().begin(), m->bytes().end(), bytes->begin(), bytes->end()));
    auto opened = SafetensorsFile::open(p.string());
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    EXPECT_EQ(opened->tensors().size(), ts.size());
    fs::remove(p);
}

// A file written by the reference library (safetensors 0.8.0 via torch save_file, metadata
// {"format": "pt"}): we read it and rewrite it byte for byte.
TEST(SafetensorsWriter, ReproducesReferenceLibraryFile) {
    std::string path =
        std::string(PELICAN_SOURCE_DIR) + "/tests/fuzz/corpus/safetensors/ref_torch_mixed.safetensors";
    auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->tensors().size(), 9u);
    EXPECT_EQ(f->metadata().at("format"), "pt");
    const SafetensorsTensor* i8 = f->find("i.i8");  // torch.arange(7, dtype=int8)
    ASSERT_NE(i8, nullptr);
    EXPECT_EQ(i8->dtype_str, "I8");
    for (size_t i = 0; i < 7; ++i) EXPECT_EQ(i8->data[i], i);
    const SafetensorsTensor* l = f->find("l.i64");  // torch.arange(3)
    ASSERT_NE(l, nullptr);
    int64_t lv[3];
    std::memcpy(lv, l->data.data(), 24);
    EXPECT_EQ(lv[2], 2);
    const SafetensorsTensor* s = f->find("s.f64");  // scalar 1.5
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->shape.empty());
    double sv;
    std::memcpy(&sv, s->data.data(), 8);
    EXPECT_EQ(sv, 1.5);
    EXPECT_EQ(f->find("b.bool")->dtype_str, "BOOL");
    EXPECT_EQ(f->find("q.f8")->dtype, DType::F8_E4M3);
    EXPECT_EQ(f->find("w.bf16")->shape, (std::vector<uint64_t>{3, 5}));
    EXPECT_EQ(f->find("z.empty")->shape, (std::vector<uint64_t>{0, 4}));

    std::vector<SafetensorsWriteTensor> ws;
    for (const auto& t : f->tensors()) ws.push_back(to_write_tensor(t));
    auto out = safetensors_serialize(ws, f->metadata());
    ASSERT_TRUE(out.ok()) << out.error().message;
    auto m = MappedFile::open(path);
    ASSERT_TRUE(m.ok());
    EXPECT_TRUE(std::equal(out->begin(), out->end(), m->bytes().begin(), m->bytes().end()));
}

TEST(SafetensorsWriter, RejectsBadInput) {
    Bytes four(4);
    auto e = safetensors_serialize({{"a", StDType::F32, {2}, four}}, {});
    ASSERT_FALSE(e.ok());
    EXPECT_TRUE(contains(e.error().message, "needs 8 bytes")) << e.error().message;
    e = safetensors_serialize({{"a", StDType::F32, {1}, four}, {"a", StDType::F32, {1}, four}}, {});
    ASSERT_FALSE(e.ok());
    EXPECT_TRUE(contains(e.error().message, "twice"));
    e = safetensors_serialize({{"bad\xff", StDType::F32, {1}, four}}, {});
    ASSERT_FALSE(e.ok());
    EXPECT_TRUE(contains(e.error().message, "UTF-8"));
    e = safetensors_serialize({{"__metadata__", StDType::F32, {1}, four}}, {});
    EXPECT_FALSE(e.ok());
}

// ---- HF folders ------------------------------------------------------------------------------

struct TempDir {
    fs::path path;
    explicit TempDir(const std::string& tag) {
        path = fs::temp_directory_path() / fmt::format("pelican_hf_{}_{}", tag, getpid());
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
    void write(const std::string& name, const std::string& text) const {
        ASSERT_TRUE(write_file_atomic((path / name).string(),
                                      {reinterpret_cast<const uint8_t*>(text.data()), text.size()})
                        .ok());
    }
    void write_st(const std::string& name, const std::vector<std::string>& tensors) const {
        static const Bytes data = iota_bytes(16);
        std::vector<SafetensorsWriteTensor> ts;
        for (const auto& t : tensors) ts.push_back({t, StDType::F32, {2, 2}, data});
        ASSERT_TRUE(safetensors_write((path / name).string(), ts, {{"format", "pt"}}).ok());
    }
};

const char* kTinyConfig =
    R"({"model_type":"llama","architectures":["LlamaForCausalLM"],"hidden_size":64,"num_hidden_layers":2,)"
    R"("num_attention_heads":4,"vocab_size":128,"intermediate_size":128})";

void write_index(const TempDir& d, const std::string& weight_map) {
    d.write("model.safetensors.index.json",
            R"({"metadata":{"total_size":64},"weight_map":{)" + weight_map + "}}");
}

TEST(HfFolder, ShardedLookup) {
    TempDir d("sharded");
    d.write("config.json", kTinyConfig);
    d.write_st("model-00001-of-00002.safetensors", {"a.weight", "b.weight"});
    d.write_st("model-00002-of-00002.safetensors", {"c.weight"});
    write_index(
        d, R"("a.weight":"model-00001-of-00002.safetensors","b.weight":"model-00001-of-00002.safetensors",)"
           R"("c.weight":"model-00002-of-00002.safetensors")");
    EXPECT_TRUE(is_hf_folder(d.path.string()));
    auto w = HfWeights::open(d.path.string());
    ASSERT_TRUE(w.ok()) << w.error().message;
    EXPECT_TRUE(w->indexed());
    EXPECT_EQ(w->shards().size(), 2u);
    EXPECT_EQ(w->n_tensors(), 3u);
    ASSERT_NE(w->find("c.weight"), nullptr);
    EXPECT_EQ(w->shard_of("c.weight"), 1u);
    EXPECT_EQ(w->find("c.weight")->shape, (std::vector<uint64_t>{2, 2}));
    EXPECT_EQ(w->find("zzz"), nullptr);
    auto all = w->tensors();
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all[0]->name, "a.weight");
    // Moving the folder keeps lookups valid.
    HfWeights moved = std::move(*w);
    EXPECT_EQ(moved.find("b.weight")->data.size(), 16u);
    // The index file itself is also accepted as the path.
    auto via_index = HfWeights::open((d.path / "model.safetensors.index.json").string());
    ASSERT_TRUE(via_index.ok()) << via_index.error().message;
    EXPECT_EQ(via_index->n_tensors(), 3u);

    auto s = hf_model_summary(d.path.string(), true);
    ASSERT_TRUE(s.ok()) << s.error().message;
    auto j = nlohmann::json::parse(*s);
    EXPECT_EQ(j["config"]["model_type"], "llama");
    EXPECT_EQ(j["config"]["head_dim"], 16);
    EXPECT_EQ(j["weights"]["tensors"], 3);
    EXPECT_EQ(j["weights"]["shards"], 2);
    EXPECT_EQ(j["weights"]["parameters"], 12);
    EXPECT_EQ(j["weights"]["bytes_per_dtype"]["F32"], 48);
    EXPECT_EQ(j["weights"]["bytes_total"], 48);
    EXPECT_EQ(j["tokenizer_json"], false);
    EXPECT_EQ(j["chat_template"], false);

    d.write("tokenizer.json", "{}");
    d.write("tokenizer_config.json", R"({"chat_template":"{{ messages }}"})");
    j = nlohmann::json::parse(*hf_model_summary(d.path.string(), true));
    EXPECT_EQ(j["tokenizer_json"], true);
    EXPECT_EQ(j["chat_template"], true);
    auto text = hf_model_summary(d.path.string(), false);
    ASSERT_TRUE(text.ok());
    EXPECT_TRUE(contains(*text, "llama")) << *text;
    EXPECT_TRUE(contains(*text, "3 in 2 shard(s)")) << *text;
}

TEST(HfFolder, SingleFileAndPlainFile) {
    TempDir d("single");
    d.write("config.json", kTinyConfig);
    d.write_st("model.safetensors", {"x", "y"});
    auto w = HfWeights::open(d.path.string());
    ASSERT_TRUE(w.ok()) << w.error().message;
    EXPECT_FALSE(w->indexed());
    EXPECT_EQ(w->n_tensors(), 2u);
    auto f = HfWeights::open((d.path / "model.safetensors").string());
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->n_tensors(), 2u);
    auto s = hf_model_summary((d.path / "model.safetensors").string(), true);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(nlohmann::json::parse(*s)["metadata"]["format"], "pt");
}

TEST(HfFolder, MissingShard) {
    TempDir d("missing");
    d.write_st("model-00001-of-00002.safetensors", {"a"});
    write_index(d, R"("a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors")");
    auto w = HfWeights::open(d.path.string());
    ASSERT_FALSE(w.ok());
    EXPECT_TRUE(contains(w.error().message, "model-00002-of-00002.safetensors")) << w.error().message;
    EXPECT_TRUE(contains(w.error().message, "missing")) << w.error().message;
}

TEST(HfFolder, IndexNamesTensorNotInShard) {
    TempDir d("notinshard");
    d.write_st("s1.safetensors", {"a", "c"});
    d.write_st("s2.safetensors", {"b"});
    write_index(d,
                R"("a":"s1.safetensors","b":"s2.safetensors","c":"s1.safetensors","ghost":"s1.safetensors")");
    auto w = HfWeights::open(d.path.string());
    ASSERT_FALSE(w.ok());
    EXPECT_TRUE(contains(w.error().message, "'ghost'")) << w.error().message;

    write_index(d, R"("a":"s2.safetensors","b":"s2.safetensors","c":"s1.safetensors")");  // a is in s1
    w = HfWeights::open(d.path.string());
    ASSERT_FALSE(w.ok());
    EXPECT_TRUE(contains(w.error().message, "'a'") && contains(w.error().message, "s1.safetensors"))
        << w.error().message;
}

TEST(HfFolder, DuplicateTensorAcrossShards) {
    TempDir d("dup");
    d.write_st("s1.safetensors", {"a", "b"});
    d.write_st("s2.safetensors", {"b"});
    write_index(d, R"("a":"s1.safetensors","b":"s2.safetensors")");
    auto w = HfWeights::open(d.path.string());
    ASSERT_FALSE(w.ok());
    EXPECT_TRUE(contains(w.error().message, "'b' appears in both")) << w.error().message;
}

TEST(HfFolder, NoWeightsAndBadIndex) {
    TempDir d("empty");
    d.write("config.json", kTinyConfig);
    auto w = HfWeights::open(d.path.string());
    ASSERT_FALSE(w.ok());
    EXPECT_TRUE(contains(w.error().message, "no weights")) << w.error().message;
    EXPECT_FALSE(hf_model_summary(d.path.string(), false).ok());

    write_index(d, R"("a":"../outside.safetensors")");
    w = HfWeights::open(d.path.string());
    ASSERT_FALSE(w.ok());
    EXPECT_TRUE(contains(w.error().message, "outside the folder")) << w.error().message;

    d.write("model.safetensors.index.json", R"({"weight_map": 3})");
    w = HfWeights::open(d.path.string());
    ASSERT_FALSE(w.ok());
    EXPECT_TRUE(contains(w.error().message, "weight_map")) << w.error().message;

    EXPECT_FALSE(HfWeights::open((d.path / "nope").string()).ok());
}

TEST(HfFolder, CorruptShardIsNamed) {
    TempDir d("corrupt");
    d.write("model.safetensors", "garbage!garbage!");
    auto w = HfWeights::open(d.path.string());
    ASSERT_FALSE(w.ok());
    EXPECT_TRUE(contains(w.error().message, "model.safetensors")) << w.error().message;
}

}  // namespace
}  // namespace pelican
