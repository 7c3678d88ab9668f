#include "core/fileio.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/xalloc.h"

int tb_write_file_atomic(const char *path, const void *data, size_t len, tb_error *err) {
    // unique per writer: rank threads of one process may write the same path at once
    static atomic_uint writers;
    char tmp[4096];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&writers, 1));
    if (n < 0 || (size_t)n >= sizeof tmp) return tb_fail(err, "%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return tb_fail(err, "%s: cannot create: %s", tmp, strerror(errno));
    int ok = fwrite(data, 1, len, f) == len && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) saved = errno;
        unlink(tmp);
        return tb_fail(err, "%s: cannot write: %s", path, strerror(saved));
    }
    return 0;
}

int tb_write_json_atomic(const char *path, const json_t *root, tb_error *err) {
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
    if (!text) return tb_fail(err, "%s: cannot serialise JSON", path);
    size_t n = strlen(text);
    char *buf = tb_xmalloc(n + 2, "JSON text");
    memcpy(buf, text, n);
    buf[n] = '\n';
    free(text);
    int rc = tb_write_file_atomic(path, buf, n + 1, err);
    free(buf);
    return rc;
}

int tb_mkdir_p(const char *path, tb_error *err) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return tb_fail(err, "path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0775) != 0 && errno != EEXIST)
                return tb_fail(err, "%s: cannot create directory: %s", buf, strerror(errno));
            struct stat st;
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
                return tb_fail(err, "%s: exists and is not a directory", buf);
            *p = c;
            if (c == '\0') break;
        }
    }
    return 0;
}
