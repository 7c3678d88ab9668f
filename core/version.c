#include "core/version.h"

#include <stdio.h>
#include <string.h>

#include "tb_revision.h"  // (the build directory's, scripts/revision.cmake)

#ifndef TB_VERSION
#error "TB_VERSION: CMake's project version (CMakeLists.txt, core/version.c)"
#endif

const char *tb_version(void) { return TB_VERSION; }
const char *tb_revision(void) { return TB_REVISION; }
const char *tb_revision_date(void) { return TB_REVISION_DATE; }
int tb_revision_dirty(void) { return TB_REVISION_DIRTY; }

void tb_version_line(char *buf, size_t len, const char *program) {
    const char *rev = tb_revision();
    snprintf(buf, len, "%s %s (commit %.12s, %s%s; %s build, %s)", program, tb_version(), rev, tb_revision_date(),
             tb_revision_dirty() ? ", tracked files modified" : "", TB_VERSION_BUILD_TYPE, TB_VERSION_COMPILER);
}
