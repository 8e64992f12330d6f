// `pelican convert -o PATH` through the binary (GGUF -> GGUF of models/pelican-tiny.gguf, a fraction of a
// second each): an existing file is refused without --force and left as it was; --force replaces it and
// keeps its mode, but not a read-only one; "-", a FIFO (without blocking), a symlink, a folder and the
// input itself (any spelling, a hard link, the synthetic form's vocabulary) are refused with nothing
// changed; a user's PATH.tmp survives; the output is checked before the input is read.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "dir_snapshot.h"
#include "formats/gguf.h"
#include "temp_dir.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;
using test::make_file;
using test::mode_of;
using test::snapshot;
using test::TempDir;

const fs::path kTiny = fs::path(PELICAN_SOURCE_DIR) / "models" / "pelican-tiny.gguf";
constexpr int kTimeoutS = 120;  // a hang (e.g. opening a FIFO) fails the test instead of blocking it

// A temp dir whose sub-folder "out" holds the outputs (the runner's stdout/stderr files stay outside).
struct Workspace {
    TempDir dir{"convert_out"};
    fs::path out = dir.path / "out";
    Workspace() { fs::create_directory(out); }
    std::string operator/(const std::string& name) const { return (out / name).string(); }
};

std::set<std::string> names_in(const fs::path& dir) {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
    return out;
}

test::CliResult convert(const Workspace& w, const std::string& output,
                        const std::vector<std::string>& extra = {},
                        const std::string& input = kTiny.string()) {
    std::vector<std::string> args = {"convert", input, "-o", output, "--type", "q8_0", "--no-progress"};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_pelican_in(args, w.dir, kTimeoutS);
}

// The run failed (exit status 1, not a hang or crash), said `needle`, and left `out` as it was.
void expect_refused(const test::CliResult& r, const std::string& needle, const Workspace& w,
                    const test::DirSnapshot& before) {
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(snapshot(w.out), before);
}

class ConvertOutput : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kTiny)) GTEST_SKIP() << "no " << kTiny;
    }
};

TEST_F(ConvertOutput, ExistingFileNeedsForce) {
    Workspace w;
    make_file(w / "m.gguf", "user data", 0640);
    const test::DirSnapshot before = snapshot(w.out);
    expect_refused(convert(w, w / "m.gguf"), "m.gguf' exists; pass --force to replace it", w, before);
}

TEST_F(ConvertOutput, ForceReplacesAndKeepsTheMode) {
    Workspace w;
    make_file(w / "m.gguf", "user data", 0640);
    const test::CliResult r = convert(w, w / "m.gguf", {"--force"});
    ASSERT_EQ(r.status, 0) << r.err;
    auto f = GgufFile::open(w / "m.gguf");
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_FALSE(f->tensors().empty());
    EXPECT_EQ(mode_of(w / "m.gguf"), 0640u);
    EXPECT_EQ(names_in(w.out), std::set<std::string>{"m.gguf"});  // no temporary left
}

TEST_F(ConvertOutput, ForceRefusesAReadOnlyFile) {
    Workspace w;
    make_file(w / "m.gguf", "read-only data", 0444);
    const test::DirSnapshot before = snapshot(w.out);
    expect_refused(convert(w, w / "m.gguf", {"--force"}), "is read-only (mode 0444)", w, before);
}

TEST_F(ConvertOutput, StdoutDashRefused) {
    Workspace w;
    const test::CliResult r = convert(w, "-", {"--force"});
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find("cannot write to standard output; give a file name"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
    EXPECT_FALSE(fs::exists(fs::symlink_status(w.dir.path / "-")));  // not created in the working folder
}

TEST_F(ConvertOutput, FifoRefusedWithoutBlocking) {
    Workspace w;
    ASSERT_EQ(::mkfifo((w / "pipe.gguf").c_str(), 0644), 0);
    test::age(w / "pipe.gguf");
    const test::DirSnapshot before = snapshot(w.out);
    expect_refused(convert(w, w / "pipe.gguf"), "is a FIFO", w, before);
    expect_refused(convert(w, w / "pipe.gguf", {"--force"}), "is a FIFO", w, before);
}

TEST_F(ConvertOutput, SymlinkAndFolderRefused) {
    Workspace w;
    make_file(w / "target.gguf", "the real file", 0644);
    fs::create_symlink("target.gguf", w / "link.gguf");
    fs::create_symlink("missing.gguf", w / "dangling.gguf");
    fs::create_directory(w / "sub");
    test::age(w / "link.gguf");
    test::age(w / "dangling.gguf");
    test::age(w / "sub");
    const test::DirSnapshot before = snapshot(w.out);
    expect_refused(convert(w, w / "link.gguf", {"--force"}), "is a symbolic link", w, before);
    expect_refused(convert(w, w / "dangling.gguf"), "is a symbolic link", w, before);
    expect_refused(convert(w, w / "sub", {"--force"}), "is a folder", w, before);
    expect_refused(convert(w, w / "nope/m.gguf"), "does not exist", w, before);
    EXPECT_TRUE(fs::is_empty(w / "sub"));
}

TEST_F(ConvertOutput, UsersTmpFileSurvives) {
    Workspace w;
    make_file(w / "m.gguf.tmp", "my own file", 0600);
    const std::string before = snapshot(w.out).at("m.gguf.tmp");
    const test::CliResult r = convert(w, w / "m.gguf");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(GgufFile::open(w / "m.gguf").ok());
    EXPECT_EQ(snapshot(w.out).at("m.gguf.tmp"), before);
    EXPECT_EQ(names_in(w.out), (std::set<std::string>{"m.gguf", "m.gguf.tmp"}));
}

TEST_F(ConvertOutput, OutputCheckedBeforeTheInputIsRead) {
    Workspace w;
    make_file(w / "junk.gguf", "not a gguf file", 0644);
    make_file(w / "m.gguf", "user data", 0644);
    const test::DirSnapshot before = snapshot(w.out);
    // The input is garbage: an error about the output shows that nothing was read or planned first.
    expect_refused(convert(w, w / "m.gguf", {}, w / "junk.gguf"), "exists; pass --force", w, before);
    expect_refused(convert(w, w / "nope/m.gguf", {}, w / "junk.gguf"), "does not exist", w, before);
}

TEST_F(ConvertOutput, InputIsNeverTheOutput) {
    Workspace w;
    fs::copy_file(kTiny, w / "in.gguf");
    ASSERT_EQ(::link((w / "in.gguf").c_str(), (w / "hard.gguf").c_str()), 0);
    const test::DirSnapshot before = snapshot(w.out);
    expect_refused(convert(w, w / "in.gguf", {"--force"}, w / "in.gguf"), "is the input", w, before);
    expect_refused(convert(w, w / "../out/./in.gguf", {"--force"}, w / "in.gguf"), "is the input", w, before);
    expect_refused(convert(w, w / "hard.gguf", {"--force"}, w / "in.gguf"), "is the input", w, before);
    // The synthetic form's --vocab is an input too.
    const test::CliResult r = test::run_pelican_in(
        {"convert", "--synthetic", "llama", "--config", R"({"hidden_size": 64, "num_hidden_layers": 1})",
         "--vocab", w / "in.gguf", "-o", w / "in.gguf", "--force", "--no-progress"},
        w.dir, kTimeoutS);
    expect_refused(r, "is the input", w, before);
}

}  // namespace
}  // namespace pelican
