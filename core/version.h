// version.h — what this build is: `tracebook --version` and `pretrain_gpt --version`.
//
// The version is CMake's project version (CMakeLists.txt); the revision is the git commit the
// build was compiled from, with its date and whether tracked files differed from it then,
// written into the build directory at every build (scripts/revision.cmake) — so a binary names
// the commit it was made from, not the checkout's current one. Outside a git checkout the
// revision is "unknown".
#ifndef TB_CORE_VERSION_H
#define TB_CORE_VERSION_H

#include <stddef.h>

const char *tb_version(void);        // "0.1.0"
const char *tb_revision(void);       // the commit's 40 hex digits, or "unknown"
const char *tb_revision_date(void);  // its commit date, YYYY-MM-DD, or "unknown"
int tb_revision_dirty(void);         // 1: tracked files differed from the commit when built

// "PROGRAM 0.1.0 (commit 831a3472788f, 2026-12-05[, tracked files modified]; Release build, GNU 12.2.0)"
void tb_version_line(char *buf, size_t len, const char *program);

#endif
