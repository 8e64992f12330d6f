// Generation through the public API (include/pelican/engine.h): streaming detokenizer, stop
// strings, parameter and context errors, KV-cache prefix reuse, callbacks.
#include <gtest/gtest.h>

#include <filesystem>

#include "pelican/engine.h"
#include "core/utf8.h"
#include "runtime/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;

const std::string kModel = (fs::path(PELICAN_SOURCE_DIR) / "tests" / "golden" / "llama").string();

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

class WithModel : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kModel)) GTEST_SKIP() << "no fixture " << kModel;
        auto e = Engine::load(kModel);
        ASSERT_TRUE(e.ok()) << e.error().message;
        engine_ = std::move(e).value();
    }
    std::unique_ptr<Session> session(int64_t n_ctx = 64) {
        auto s = engine_->create_session(SessionOptions{.n_ctx = n_ctx, .n_threads = 2});
        EXPECT_TRUE(s.ok()) << s.error().message;
        return s.ok() ? std::move(s).value() : nullptr;
    }
    static GenerateParams greedy(int32_t n) {
        GenerateParams gp;
        gp.max_tokens = n;
        gp.sampling.temperature = 0;
        return gp;
    }
    std::unique_ptr<Engine> engine_;
};

TEST_F(WithModel, StreamPiecesConcatenateToDecode) {
    const Tokenizer& tok = *engine_->tokenizer();
    const std::string text = "def forward(self, x):\n    return x * 2  # ünïcödé ✓ 😀";
    const auto ids = tok.encode(text);
    TokenTextStream s(&tok, {});
    std::string out;
    for (int32_t id : ids) {
        const std::string piece = s.push(id);
        EXPECT_TRUE(utf8_valid(piece)) << "piece ends inside a character";
        out += piece;
    }
    out += s.finish();
    EXPECT_EQ(out, tok.decode(ids, true));
    EXPECT_EQ(out, text);
}

// Byte tokens that do not form a character (sampling can pick them) come out as U+FFFD, never as
// raw bytes: a lead byte followed by a letter, a stray continuation byte, and a character cut at
// the end.
TEST_F(WithModel, StreamRepairsIllFormedByteTokens) {
    const Tokenizer& tok = *engine_->tokenizer();
    auto byte_token = [&](int b) {  // a token whose text is that one byte (byte-level BPE or SPM byte)
        const std::string text(1, static_cast<char>(b));
        for (int32_t id = 0; id < tok.n_vocab(); ++id) {
            const int32_t one[1] = {id};
            if (tok.decode(one) == text) return id;
        }
        return -1;
    };
    const int32_t c3 = byte_token(0xC3), a9 = byte_token(0xA9), f0 = byte_token(0xF0), x9f = byte_token(0x9F);
    if (c3 < 0 || a9 < 0 || f0 < 0 || x9f < 0) GTEST_SKIP() << "the fixture has no byte tokens";
    const std::vector<int32_t> letters = tok.encode("ab");
    ASSERT_FALSE(letters.empty());
    std::vector<int32_t> ids{c3, a9};                       // "é": whole
    ids.push_back(c3);                                      // lead byte ...
    ids.insert(ids.end(), letters.begin(), letters.end());  // ... followed by letters
    ids.push_back(a9);                                      // a stray continuation byte
    ids.push_back(f0);
    ids.push_back(x9f);  // 😀 cut after two of its four bytes, at the end
    TokenTextStream s(&tok, {});
    std::string out;
    for (int32_t id : ids) {
        const std::string piece = s.push(id);
        EXPECT_TRUE(utf8_valid(piece)) << "ill-formed piece";
        out += piece;
    }
    out += s.finish();
    EXPECT_TRUE(utf8_valid(out));
    const std::string fffd = "\xEF\xBF\xBD";
    std::string letters_text;  // the letters' text as pieces after other text (SPM keeps the space)
    for (int32_t id : letters) letters_text += s.token_piece(id);
    EXPECT_EQ(out, "\xC3\xA9" + fffd + letters_text + fffd + fffd);
}

TEST_F(WithModel, StreamStopsAtStopString) {
    const Tokenizer& tok = *engine_->tokenizer();
    const auto ids = tok.encode("hello world, return self.x and more");
    TokenTextStream s(&tok, {"self", "zzz"});
    std::string out;
    for (int32_t id : ids) {
        out += s.push(id);
        if (s.stopped()) break;
    }
    EXPECT_TRUE(s.stopped());
    EXPECT_EQ(out, "hello world, return ");
    EXPECT_EQ(s.text(), out);
    EXPECT_EQ(s.finish(), "");
}

TEST_F(WithModel, GreedyIsDeterministicAndReusesTheCache) {
    auto a = session();
    auto b = session();
    ASSERT_TRUE(a && b);
    auto r1 = a->generate("def forward(self", greedy(12));
    ASSERT_TRUE(r1.ok()) << r1.error().message;
    EXPECT_EQ(r1->tokens.size(), 12u);
    EXPECT_EQ(r1->stop, StopReason::kMaxTokens);
    EXPECT_EQ(r1->n_prompt_evaluated, r1->n_prompt);
    // Continue the conversation: the prompt extends the cached tokens, only the new part runs.
    std::vector<int32_t> longer = a->history();
    longer.push_back(r1->tokens.back());
    const auto more = engine_->tokenize(" hidden", false);
    ASSERT_TRUE(more.ok());
    longer.insert(longer.end(), more->begin(), more->end());
    auto r2 = a->generate(std::span<const int32_t>(longer), greedy(8));
    ASSERT_TRUE(r2.ok()) << r2.error().message;
    EXPECT_EQ(r2->n_prompt_evaluated, static_cast<int64_t>(more->size()) + 1);
    auto r3 = b->generate(std::span<const int32_t>(longer), greedy(8));  // fresh session
    ASSERT_TRUE(r3.ok());
    EXPECT_EQ(r3->n_prompt_evaluated, static_cast<int64_t>(longer.size()));
    EXPECT_EQ(r2->tokens, r3->tokens);
    // Same prompt again: everything but the last token is reused.
    auto r4 = b->generate(std::span<const int32_t>(longer), greedy(8));
    ASSERT_TRUE(r4.ok());
    EXPECT_EQ(r4->n_prompt_evaluated, 1);
    EXPECT_EQ(r4->tokens, r3->tokens);
}

TEST_F(WithModel, SeededSamplingRepeats) {
    auto s = session();
    ASSERT_TRUE(s);
    GenerateParams gp;
    gp.max_tokens = 16;
    gp.sampling.temperature = 1.0f;
    gp.sampling.seed = 42;
    auto r1 = s->generate("class Llama", gp);
    auto r2 = s->generate("class Llama", gp);
    ASSERT_TRUE(r1.ok() && r2.ok());
    EXPECT_EQ(r1->tokens, r2->tokens);
    EXPECT_EQ(r1->text, r2->text);
}

TEST_F(WithModel, CallbackStreamsAndCanStop) {
    auto s = session();
    ASSERT_TRUE(s);
    std::string streamed;
    int calls = 0;
    auto r = s->generate("def forward(self", greedy(20), [&](int32_t id, std::string_view piece) {
        streamed += piece;
        return id < 0 || ++calls < 5;
    });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->stop, StopReason::kCallback);
    EXPECT_EQ(r->tokens.size(), 5u);
    EXPECT_EQ(streamed, r->text);
}

TEST_F(WithModel, StopStringEndsGeneration) {
    auto s = session();
    ASSERT_TRUE(s);
    auto full = s->generate("def forward(self", greedy(24));
    ASSERT_TRUE(full.ok());
    ASSERT_GE(full->text.size(), 6u);
    const std::string stop = full->text.substr(full->text.size() / 2, 3);
    const size_t at = full->text.find(stop);
    GenerateParams gp = greedy(24);
    gp.stop = {stop};
    std::string streamed;
    auto r = s->generate("def forward(self", gp, [&](int32_t, std::string_view p) {
        streamed += p;
        return true;
    });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->stop, StopReason::kStopString);
    EXPECT_EQ(r->text, full->text.substr(0, at));
    EXPECT_EQ(streamed, r->text);
}

TEST_F(WithModel, ErrorsAreReported) {
    auto s = session(16);
    ASSERT_TRUE(s);
    // One rule for the context: generation ends when it is full, whatever max_tokens says.
    GenerateParams long_run = greedy(20);  // prompt + 20 > 16
    long_run.ignore_eos = true;
    auto r = s->generate("def forward(self", long_run);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->stop, StopReason::kContextFull);
    EXPECT_EQ(static_cast<int64_t>(r->tokens.size()) + r->n_prompt, s->n_ctx() + 1);
    EXPECT_EQ(r->n_decode_steps, static_cast<int64_t>(r->tokens.size()) - 1);
    // A prompt that does not fit is an error.
    std::vector<int32_t> too_long(17, 1);
    r = s->generate(std::span<const int32_t>(too_long), greedy(1));
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(contains(r.error().message, "context holds 16")) << r.error().message;
    r = s->generate("x", greedy(0));
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(contains(r.error().message, "max_tokens")) << r.error().message;
    GenerateParams gp = greedy(4);
    gp.sampling.top_p = 0;
    r = s->generate("x", gp);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(contains(r.error().message, "top_p")) << r.error().message;
    const std::vector<int32_t> bad{1, 100000};
    r = s->generate(std::span<const int32_t>(bad), greedy(2));
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(contains(r.error().message, "100000")) << r.error().message;
    r = s->generate(std::span<const int32_t>(), greedy(2));
    EXPECT_FALSE(r.ok());
    // -1: until the context is full.
    auto all = s->generate("x", [] {
        GenerateParams g;
        g.max_tokens = -1;
        g.sampling.temperature = 0;
        g.ignore_eos = true;
        return g;
    }());
    ASSERT_TRUE(all.ok()) << all.error().message;
    EXPECT_EQ(all->stop, StopReason::kContextFull);
    EXPECT_EQ(static_cast<int64_t>(all->tokens.size()) + all->n_prompt, s->n_ctx() + 1);
    EXPECT_FALSE(engine_->create_session(SessionOptions{.n_ctx = -1}).ok());
    auto bad_engine = Engine::load("/nonexistent/model.gguf");
    ASSERT_FALSE(bad_engine.ok());
    EXPECT_TRUE(contains(bad_engine.error().message, "/nonexistent/model.gguf"));
}

TEST_F(WithModel, ChatPromptUsesTemplate) {
    auto p = engine_->chat_prompt("hi");
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_EQ(*p, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace pelican
