// index_file.c — the index as a file (index_file.h).
#include "index_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"

int ix_output_check(const char *path, tb_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) return errno == ENOENT ? 0 : tb_fail(err, "--output %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return tb_fail(err, "--output %s is %s, not a source index: not replaced", path, tb_file_kind(st.st_mode));
    char head[16] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, head, sizeof head) : -1;
    if (fd >= 0) close(fd);
    if (n == 0) return 0;  // an empty file holds nothing to lose
    const int sqlite_file = n == (ssize_t)sizeof head && !memcmp(head, "SQLite format 3", 16);
    int tables = 0;
    sqlite3 *db = NULL;
    if (sqlite_file && sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt *q = NULL;
        if (sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('functions', "
                                   "'calls', 'meta')", -1, &q, NULL) == SQLITE_OK &&
            sqlite3_step(q) == SQLITE_ROW)
            tables = sqlite3_column_int(q, 0);
        sqlite3_finalize(q);
    }
    sqlite3_close(db);
    if (tables == 3) return 0;
    return tb_fail(err, "--output %s exists and is not a source index (%s): not replaced; remove it, or give "
                        "--output another path", path, sqlite_file ? "an SQLite database without the index's tables"
                                                                   : "not an SQLite database");
}

int ix_file_copy(const char *from, const char *to, tb_error *err) {
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0) return tb_fail(err, "%s: cannot read the previous index: %s", from, strerror(errno));
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        close(in);
        return tb_fail(err, "%s: cannot create the index: %s", to, strerror(errno));
    }
    static char buf[1 << 20];
    int rc = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n == 0) break;
        if (n < 0 || write(out, buf, (size_t)n) != n) {
            rc = tb_fail(err, "%s: copying the previous index: %s", to, strerror(errno));
            break;
        }
    }
    close(in);
    if (close(out) != 0 && !rc) rc = tb_fail(err, "%s: copying the previous index: %s", to, strerror(errno));
    return rc;
}

static void *flush_now(void *arg) {
    ix_early_flush *f = arg;
    f->fd = open(f->path, O_RDONLY);
    if (f->fd >= 0 && fdatasync(f->fd) != 0) f->error = errno;
    return NULL;
}

void ix_flush_start(ix_early_flush *f, const char *path, int start) {
    *f = (ix_early_flush){.path = path, .fd = -1};
    if (start) f->started = pthread_create(&f->th, NULL, flush_now, f) == 0;
}

int ix_flush_finish(ix_early_flush *f, int rc, int publish, const char *to, tb_error *err) {
    const char *tmp = f->path;
    if (f->started) pthread_join(f->th, NULL);
    if (!rc && publish && f->error) rc = tb_fail(err, "%s: fdatasync: %s", tmp, strerror(f->error));
    if (!rc && publish) {
        int fd = f->fd >= 0 ? f->fd : open(tmp, O_RDONLY);
        if (fd < 0 || fsync(fd) != 0) rc = tb_fail(err, "%s: fsync: %s", tmp, strerror(errno));
        if (fd >= 0 && fd != f->fd) close(fd);
        if (!rc && rename(tmp, to) != 0) rc = tb_fail(err, "%s: cannot rename %s over it: %s", to, tmp, strerror(errno));
    }
    if (f->fd >= 0) close(f->fd);
    if (rc || !publish) unlink(tmp);
    return rc;
}
