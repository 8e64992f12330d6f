// Files pelican writes (convert -o; later quantize -o, eval --html OUT): the rules and the temporary.
//
// An output is a regular file, or does not exist yet. check_output_path refuses, before any work and
// without creating or changing anything:
//   - "" and "-" (pelican does not write models to standard output);
//   - a folder, device, FIFO or socket, and any symbolic link (neither followed nor replaced);
//   - a parent folder that does not exist, is not a folder or is not writable;
//   - an existing file unless force is set, and even with force one the user may not write (judged by
//     its mode bits, so a read-only file is refused for root too).
//
// OutputFile writes through a temporary created with O_EXCL next to the target (".NAME.tmp.PID.N", so it
// never truncates an existing file and two writers never share one), renamed onto the target by
// commit(); the destructor removes it when commit() was not reached (an error or Ctrl-C). A replaced
// file's permission bits carry over to the new one; a new file gets 0666 less the umask.
//
//   PELICAN_TRY(check_output_path(out, force));            // before any expensive work
//   PELICAN_ASSIGN(OutputFile f, OutputFile::create(out, force));
//   std::fwrite(..., f.stream());
//   PELICAN_TRY(f.commit());
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <string>

#include "core/status.h"

namespace pelican {

// Errors name the path and say what to do ("... exists; pass --force to replace it").
Status check_output_path(const std::string& path, bool force);

// Refuses an output that is the input (same file through any spelling, a symlink or a hard link) or,
// when the input is a folder, one of the files directly inside it. An output that does not exist is
// never the input.
Status check_output_not_input(const std::string& output, const std::string& input);

class OutputFile {
public:
    // check_output_path(path, force), then the temporary, open for writing.
    static Expected<OutputFile> create(const std::string& path, bool force);

    OutputFile() = default;
    OutputFile(OutputFile&& o) noexcept;
    OutputFile& operator=(OutputFile&& o) noexcept;
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;
    ~OutputFile() { discard(); }

    bool is_open() const { return stream_ != nullptr; }
    std::FILE* stream() const { return stream_; }
    const std::string& path() const { return path_; }            // the target
    const std::string& temp_path() const { return temp_path_; }  // "" once committed or discarded

    // Flushes, fsyncs and closes the temporary, checks the target again (it may have appeared or changed
    // during a long write) and renames the temporary onto it; without force the rename never replaces a
    // file that appeared meanwhile. On any error the temporary is removed.
    Status commit();
    // Closes and removes the temporary (no-op when none is open).
    void discard();

private:
    std::FILE* stream_ = nullptr;
    std::string path_, temp_path_;
    bool force_ = false;
};

}  // namespace pelican
