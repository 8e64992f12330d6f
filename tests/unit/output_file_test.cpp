// core/output_file.h, the checks: which output paths are accepted (new file; existing with force) and
// which are refused (existing without force, read-only even with force, folder, symlink to a file or
// dangling, FIFO, character device, "-", missing or non-folder parent), each refusal creating or changing
// nothing in the folder; outputs that are the input (any spelling, hard link, symlink, a file of an
// input folder). The writer: output_file_writer_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/output_file.h"
#include "dir_snapshot.h"
#include "temp_dir.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;
using test::make_file;
using test::snapshot;
using test::TempDir;

// check_output_path and OutputFile::create both refuse path with a message holding needle, and the
// folder `watch` is left exactly as it was.
void expect_refused(const std::string& path, bool force, const std::string& needle, const fs::path& watch) {
    SCOPED_TRACE(path + (force ? " (force)" : ""));
    const test::DirSnapshot before = snapshot(watch);
    const Status s = check_output_path(path, force);
    ASSERT_FALSE(s.ok()) << "expected a refusal containing: " << needle;
    EXPECT_NE(s.error().message.find(needle), std::string::npos) << s.error().message;
    {
        Expected<OutputFile> f = OutputFile::create(path, force);
        ASSERT_FALSE(f.ok());
        EXPECT_NE(f.error().message.find(needle), std::string::npos) << f.error().message;
    }
    EXPECT_EQ(snapshot(watch), before);
}

TEST(OutputPath, NewFileAccepted) {
    TempDir dir("outpath");
    EXPECT_TRUE(check_output_path(dir / "new.gguf", false).ok());
    EXPECT_TRUE(check_output_path(dir / "new.gguf", true).ok());
    EXPECT_TRUE(snapshot(dir.path).empty());  // checking creates nothing
}

TEST(OutputPath, ExistingNeedsForce) {
    TempDir dir("outpath");
    make_file(dir / "out.gguf", "user data", 0644);
    expect_refused(dir / "out.gguf", false, "out.gguf' exists; pass --force to replace it", dir.path);
    const test::DirSnapshot before = snapshot(dir.path);
    EXPECT_TRUE(check_output_path(dir / "out.gguf", true).ok());
    EXPECT_EQ(snapshot(dir.path), before);
}

TEST(OutputPath, ReadOnlyRefusedEvenWithForce) {
    TempDir dir("outpath");
    make_file(dir / "ro.gguf", "keep me", 0444);
    expect_refused(dir / "ro.gguf", true, "is read-only (mode 0444)", dir.path);
    expect_refused(dir / "ro.gguf", true, "even with --force", dir.path);
    expect_refused(dir / "ro.gguf", false, "exists; pass --force", dir.path);
}

TEST(OutputPath, FolderRefused) {
    TempDir dir("outpath");
    fs::create_directory(dir / "sub");
    for (bool force : {false, true}) {
        expect_refused(dir / "sub", force, "is a folder", dir.path);
        expect_refused(dir / "sub/", force, "names a folder", dir.path);
        expect_refused(dir / "new/", force, "names a folder", dir.path);
    }
    EXPECT_TRUE(fs::is_empty(dir / "sub"));
}

TEST(OutputPath, SymlinkToFileRefused) {
    TempDir dir("outpath");
    make_file(dir / "target.gguf", "the real file", 0644);
    fs::create_symlink("target.gguf", dir / "link.gguf");
    test::age(dir / "link.gguf");
    for (bool force : {false, true}) expect_refused(dir / "link.gguf", force, "is a symbolic link", dir.path);
    EXPECT_EQ(fs::read_symlink(dir / "link.gguf"), "target.gguf");
}

TEST(OutputPath, DanglingSymlinkRefused) {
    TempDir dir("outpath");
    fs::create_symlink("missing.gguf", dir / "link.gguf");
    test::age(dir / "link.gguf");
    for (bool force : {false, true}) expect_refused(dir / "link.gguf", force, "is a symbolic link", dir.path);
    EXPECT_FALSE(fs::exists(dir / "missing.gguf"));
}

TEST(OutputPath, FifoRefused) {
    TempDir dir("outpath");
    ASSERT_EQ(::mkfifo((dir / "pipe").c_str(), 0644), 0);
    test::age(dir / "pipe");
    for (bool force : {false, true}) expect_refused(dir / "pipe", force, "is a FIFO (named pipe)", dir.path);
}

TEST(OutputPath, CharacterDeviceRefused) {
    struct stat before {};
    if (::lstat("/dev/null", &before) != 0 || !S_ISCHR(before.st_mode)) GTEST_SKIP() << "no /dev/null";
    TempDir dir("outpath");
    for (bool force : {false, true}) expect_refused("/dev/null", force, "is a character device", dir.path);
    struct stat after {};
    ASSERT_EQ(::lstat("/dev/null", &after), 0);
    EXPECT_TRUE(S_ISCHR(after.st_mode));
    EXPECT_EQ(after.st_rdev, before.st_rdev);
    EXPECT_EQ(after.st_ino, before.st_ino);
}

TEST(OutputPath, StdoutDashRefused) {
    TempDir dir("outpath");
    const bool had_dash = fs::exists(fs::symlink_status("-"));
    for (bool force : {false, true}) expect_refused("-", force, "cannot write to standard output", dir.path);
    expect_refused("-", false, "give a file name", dir.path);
    EXPECT_EQ(fs::exists(fs::symlink_status("-")), had_dash);  // no file named "-" in the working folder
    EXPECT_TRUE(check_output_path(dir / "-", false).ok());     // a path that merely ends in "-" is fine
    expect_refused("", false, "no output file given", dir.path);
}

TEST(OutputPath, ParentMustBeAWritableFolder) {
    TempDir dir("outpath");
    for (bool force : {false, true}) {
        expect_refused(dir / "nope/out.gguf", force, "folder '" + dir / "nope" + "' does not exist",
                       dir.path);
        expect_refused(dir / "nope/deeper/out.gguf", force, "does not exist", dir.path);
    }
    EXPECT_FALSE(fs::exists(dir / "nope"));
    make_file(dir / "file", "x", 0644);
    expect_refused(dir / "file/out.gguf", false, "is not a folder", dir.path);
    if (::geteuid() != 0) {  // root may write into any folder
        fs::create_directory(dir / "ro");
        ::chmod((dir / "ro").c_str(), 0555);
        expect_refused(dir / "ro/out.gguf", false, "is not writable", dir.path);
        ::chmod((dir / "ro").c_str(), 0755);
    }
}

TEST(OutputPath, OutputMustNotBeTheInput) {
    TempDir dir("outpath");
    make_file(dir / "in.gguf", "input bytes", 0644);
    fs::create_directory(dir / "sub");
    const auto refused = [](const std::string& out, const std::string& in, const std::string& needle) {
        const Status s = check_output_not_input(out, in);
        ASSERT_FALSE(s.ok()) << out << " vs " << in;
        EXPECT_NE(s.error().message.find(needle), std::string::npos) << s.error().message;
    };
    refused(dir / "in.gguf", dir / "in.gguf", "is the input");
    refused(dir / "sub/../in.gguf", dir / "in.gguf", "is the input");  // another spelling
    ASSERT_EQ(::link((dir / "in.gguf").c_str(), (dir / "hard.gguf").c_str()), 0);
    refused(dir / "hard.gguf", dir / "in.gguf", "is the input");  // a hard link
    fs::create_symlink("in.gguf", dir / "soft.gguf");
    refused(dir / "soft.gguf", dir / "in.gguf", "is the input");
    EXPECT_TRUE(check_output_not_input(dir / "new.gguf", dir / "in.gguf").ok());
    make_file(dir / "other.gguf", "other", 0644);
    EXPECT_TRUE(check_output_not_input(dir / "other.gguf", dir / "in.gguf").ok());

    // An HF folder input: none of its files may be the output.
    fs::create_directory(dir / "hf");
    make_file(dir / "hf/config.json", "{}", 0644);
    make_file(dir / "hf/model.safetensors", "weights", 0644);
    refused(dir / "hf/model.safetensors", dir / "hf", "in the input folder");
    refused(dir / "sub/../hf/config.json", dir / "hf", "in the input folder");
    EXPECT_TRUE(check_output_not_input(dir / "hf/new.gguf", dir / "hf").ok());
    EXPECT_TRUE(check_output_not_input(dir / "other.gguf", dir / "hf").ok());
    EXPECT_EQ(std::string(test::file_text(dir / "in.gguf")), "input bytes");
}

}  // namespace
}  // namespace pelican
