// Files written so that a crash never leaves a half-written one where a
// reader looks: everything goes to a temporary name in the same directory,
// is flushed and fsynced, and is renamed into place; the directory is
// fsynced after, so the rename itself is on disk.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace ws::io {

// `path` with `parts` as its contents, replaced atomically.
void write_file_atomically(const std::string& path,
                           std::span<const std::span<const std::byte>> parts);
// Writes `parts` to a new file `path` (which must not exist) and fsyncs it.
void write_new_file(const std::string& path, std::span<const std::span<const std::byte>> parts);
// fsync of a directory: makes the entries created or renamed in it durable.
void sync_directory(const std::string& dir);
// The whole file; a ws::Error naming it when it cannot be read.
std::vector<std::byte> read_file(const std::string& path, const char* what);
// The directory part of `path` ("." when there is none).
std::string parent_directory(const std::string& path);

}  // namespace ws::io
