// core/output_file.h, the writer: a unique temporary next to the target, renamed only by commit(); a
// user's own PATH.tmp survives; no temporary is left after an abandoned write; --force keeps the
// replaced file's mode; a target that appears or turns into a link during the write is not replaced. The
// library writers built on it (write_file_atomic, safetensors_write, GgufWriter / write_gguf) follow the
// same rules. The checks themselves: output_file_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "core/mmap_file.h"
#include "core/output_file.h"
#include "dir_snapshot.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "temp_dir.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;
using test::file_text;
using test::make_file;
using test::mode_of;
using test::snapshot;
using test::TempDir;

std::set<std::string> names_in(const fs::path& dir) {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
    return out;
}

mode_t current_umask() {
    const mode_t m = ::umask(022);
    ::umask(m);
    return m;
}

void put(const OutputFile& f, const std::string& text) {
    ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), f.stream()), text.size());
}

std::span<const uint8_t> bytes_of(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(OutputFile, TemporaryNextToTargetRenamedAtCommit) {
    TempDir dir("outfile");
    auto f = OutputFile::create(dir / "out.gguf", false);
    ASSERT_TRUE(f.ok()) << f.error().message;
    const fs::path tmp = f->temp_path();
    EXPECT_EQ(tmp.parent_path(), dir.path);
    EXPECT_TRUE(tmp.filename().string().starts_with(".out.gguf.tmp.")) << tmp;
    put(*f, "hello");
    EXPECT_FALSE(fs::exists(dir / "out.gguf"));  // nothing at the target before commit()
    ASSERT_TRUE(f->commit().ok());
    EXPECT_EQ(file_text(dir / "out.gguf"), "hello");
    EXPECT_EQ(names_in(dir.path), std::set<std::string>{"out.gguf"});
    EXPECT_EQ(mode_of(dir / "out.gguf"), 0666 & ~current_umask());
}

TEST(OutputFile, UsersTmpFileSurvives) {
    TempDir dir("outfile");
    make_file(dir / "out.gguf.tmp", "my own notes", 0600);
    const std::string before = snapshot(dir.path).at("out.gguf.tmp");
    auto f = OutputFile::create(dir / "out.gguf", false);
    ASSERT_TRUE(f.ok()) << f.error().message;
    put(*f, "model");
    ASSERT_TRUE(f->commit().ok());
    EXPECT_EQ(file_text(dir / "out.gguf"), "model");
    EXPECT_EQ(snapshot(dir.path).at("out.gguf.tmp"), before);
    EXPECT_EQ(names_in(dir.path), (std::set<std::string>{"out.gguf", "out.gguf.tmp"}));
}

TEST(OutputFile, AbandonedWriteLeavesNothing) {
    TempDir dir("outfile");
    {
        auto f = OutputFile::create(dir / "new.gguf", false);
        ASSERT_TRUE(f.ok());
        put(*f, "partial");
    }
    EXPECT_TRUE(names_in(dir.path).empty());
    make_file(dir / "old.gguf", "old contents", 0644);
    const test::DirSnapshot before = snapshot(dir.path);
    {
        auto f = OutputFile::create(dir / "old.gguf", true);
        ASSERT_TRUE(f.ok());
        put(*f, "partial");
        f->discard();
        EXPECT_TRUE(f->temp_path().empty());
    }
    EXPECT_EQ(snapshot(dir.path), before);
}

TEST(OutputFile, ForceKeepsTheReplacedFilesMode) {
    TempDir dir("outfile");
    for (mode_t mode : {0640, 0600, 0755, 0666}) {
        SCOPED_TRACE(mode);
        make_file(dir / "out.gguf", "old", mode);
        auto f = OutputFile::create(dir / "out.gguf", true);
        ASSERT_TRUE(f.ok()) << f.error().message;
        put(*f, "new");
        ASSERT_TRUE(f->commit().ok());
        EXPECT_EQ(file_text(dir / "out.gguf"), "new");
        EXPECT_EQ(mode_of(dir / "out.gguf"), mode);
    }
    EXPECT_EQ(names_in(dir.path), std::set<std::string>{"out.gguf"});
}

TEST(OutputFile, TargetThatAppearsDuringTheWriteIsKept) {
    TempDir dir("outfile");
    auto f = OutputFile::create(dir / "out.gguf", false);
    ASSERT_TRUE(f.ok());
    put(*f, "mine");
    make_file(dir / "out.gguf", "someone else's", 0644);
    const Status s = f->commit();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("exists; pass --force"), std::string::npos) << s.error().message;
    EXPECT_EQ(file_text(dir / "out.gguf"), "someone else's");
    EXPECT_EQ(names_in(dir.path), std::set<std::string>{"out.gguf"});
}

TEST(OutputFile, TargetThatTurnsIntoALinkIsNotReplaced) {
    TempDir dir("outfile");
    make_file(dir / "out.gguf", "old", 0644);
    make_file(dir / "elsewhere", "precious", 0644);
    auto f = OutputFile::create(dir / "out.gguf", true);
    ASSERT_TRUE(f.ok());
    put(*f, "new");
    fs::remove(dir / "out.gguf");
    fs::create_symlink("elsewhere", dir / "out.gguf");
    const Status s = f->commit();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("symbolic link"), std::string::npos) << s.error().message;
    EXPECT_TRUE(fs::is_symlink(dir / "out.gguf"));
    EXPECT_EQ(file_text(dir / "elsewhere"), "precious");
    EXPECT_EQ(names_in(dir.path), (std::set<std::string>{"elsewhere", "out.gguf"}));
}

TEST(OutputFile, TwoWritersNeverShareATemporary) {
    TempDir dir("outfile");
    auto a = OutputFile::create(dir / "out.gguf", false);
    auto b = OutputFile::create(dir / "out.gguf", false);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NE(a->temp_path(), b->temp_path());
    put(*a, "a");
    put(*b, "b");
    ASSERT_TRUE(a->commit().ok());
    EXPECT_FALSE(b->commit().ok());  // the first one won; the second does not replace it
    EXPECT_EQ(file_text(dir / "out.gguf"), "a");
    EXPECT_EQ(names_in(dir.path), std::set<std::string>{"out.gguf"});

    OutputFile moved = OutputFile::create(dir / "m.gguf", false).value();  // moves keep the temp
    put(moved, "m");
    ASSERT_TRUE(moved.commit().ok());
    EXPECT_EQ(file_text(dir / "m.gguf"), "m");
}

TEST(OutputFile, LibraryWritersFollowTheRules) {
    TempDir dir("outfile");
    make_file(dir / "target", "precious", 0644);
    fs::create_symlink("target", dir / "link");
    ASSERT_EQ(::mkfifo((dir / "pipe").c_str(), 0644), 0);
    make_file(dir / "out.bin.tmp", "user's", 0600);
    make_file(dir / "out.bin", "old", 0640);
    const test::DirSnapshot before = snapshot(dir.path);

    // write_file_atomic: replaces a regular file (mode kept), never a link or a FIFO.
    EXPECT_FALSE(write_file_atomic(dir / "link", bytes_of("x")).ok());
    EXPECT_FALSE(write_file_atomic(dir / "pipe", bytes_of("x")).ok());
    EXPECT_FALSE(write_file_atomic(dir / "out.bin", bytes_of("x"), /*force=*/false).ok());
    EXPECT_EQ(snapshot(dir.path), before);
    ASSERT_TRUE(write_file_atomic(dir / "out.bin", bytes_of("new")).ok());
    EXPECT_EQ(file_text(dir / "out.bin"), "new");
    EXPECT_EQ(mode_of(dir / "out.bin"), 0640u);
    EXPECT_EQ(snapshot(dir.path).at("out.bin.tmp"), before.at("out.bin.tmp"));

    // safetensors_write: the same.
    const std::string data(16, '\0');
    std::vector<SafetensorsWriteTensor> ts = {{"t", StDType::F32, {2, 2}, bytes_of(data)}};
    EXPECT_FALSE(safetensors_write(dir / "link", ts, {}).ok());
    EXPECT_FALSE(safetensors_write(dir / "pipe", ts, {}).ok());
    ASSERT_TRUE(safetensors_write(dir / "out.bin", ts, {}).ok());
    EXPECT_EQ(mode_of(dir / "out.bin"), 0640u);
    EXPECT_EQ(snapshot(dir.path).at("out.bin.tmp"), before.at("out.bin.tmp"));

    // GgufWriter / write_gguf: an existing file only with force.
    GgufWriter w;
    ASSERT_TRUE(w.add_kv("general.architecture", gguf_string("llama")).ok());
    const Status s = w.begin(dir / "out.bin");
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("exists; pass --force"), std::string::npos) << s.error().message;
    auto bytes = w.to_bytes({});
    ASSERT_TRUE(bytes.ok());
    auto g = GgufFile::parse(*bytes, "mem");
    ASSERT_TRUE(g.ok());
    EXPECT_FALSE(write_gguf(*g, dir / "link", true).ok());
    EXPECT_FALSE(write_gguf(*g, dir / "pipe", true).ok());
    EXPECT_FALSE(write_gguf(*g, dir / "out.bin").ok());
    ASSERT_TRUE(write_gguf(*g, dir / "out.bin", true).ok());
    EXPECT_EQ(file_text(dir / "out.bin"), std::string(bytes->begin(), bytes->end()));
    EXPECT_EQ(mode_of(dir / "out.bin"), 0640u);

    EXPECT_EQ(fs::read_symlink(dir / "link"), "target");
    EXPECT_EQ(file_text(dir / "target"), "precious");
    EXPECT_TRUE(fs::is_fifo(fs::symlink_status(dir / "pipe")));
    EXPECT_EQ(names_in(dir.path),
              (std::set<std::string>{"link", "out.bin", "out.bin.tmp", "pipe", "target"}));
}

}  // namespace
}  // namespace pelican
