#define _GNU_SOURCE  // nftw's FTW_DEPTH / FTW_PHYS
#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/xalloc.h"

int tb_atomic_open(tb_atomic_file *a, const char *path, tb_error *err) {
    // unique per writer: rank threads of one process may write the same path at once
    static atomic_uint writers;
    a->f = NULL;
    if (tb_path_format(a->path, sizeof a->path, err, "%s", path) != 0 ||
        tb_path_format(a->tmp, sizeof a->tmp, err, "%s.tmp.%ld.%u", path, (long)getpid(),
                       atomic_fetch_add(&writers, 1)) != 0)
        return -1;
    a->f = fopen(a->tmp, "wb");
    if (!a->f) return tb_fail(err, "%s: cannot create: %s", a->tmp, strerror(errno));
    return 0;
}

int tb_atomic_close(tb_atomic_file *a, int ok, tb_error *err) {
    if (!a->f) return ok ? tb_fail(err, "%s: not open for writing", a->path) : -1;
    const int wanted = ok;
    errno = 0;
    ok = ok && !ferror(a->f) && fflush(a->f) == 0 && fsync(fileno(a->f)) == 0;
    int saved = errno;
    if (fclose(a->f) != 0 && ok) ok = 0, saved = errno;
    a->f = NULL;
    if (ok && rename(a->tmp, a->path) == 0) return 0;
    if (ok) saved = errno;
    unlink(a->tmp);
    if (!wanted) return -1;
    return tb_fail(err, "%s: cannot write: %s", a->path, saved ? strerror(saved) : "a write to it failed");
}

int tb_write_file_atomic(const char *path, const void *data, size_t len, tb_error *err) {
    tb_atomic_file a;
    if (tb_atomic_open(&a, path, err) != 0) return -1;
    if (fwrite(data, 1, len, a.f) != len) {
        int saved = errno;
        tb_atomic_close(&a, 0, err);
        return tb_fail(err, "%s: cannot write: %s", path, strerror(saved));
    }
    return tb_atomic_close(&a, 1, err);
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

const char *tb_file_kind(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "a special file";
}

int tb_open_regular(const char *path, const char *note, struct stat *out, tb_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) return tb_fail(err, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return tb_fail(err, "%s: is %s, not a regular file%s%s%s", path, tb_file_kind(st.st_mode),
                       note ? " (" : "", note ? note : "", note ? ")" : "");
    // O_NONBLOCK: a file swapped for a FIFO between the stat and the open cannot block the
    // open either; the fstat below then sees what was opened.
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return tb_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat now;
    if (fstat(fd, &now) != 0) {
        int e = errno;
        close(fd);
        return tb_fail(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(now.st_mode) || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
        close(fd);
        return tb_fail(err, "%s: was replaced while being opened (now %s)", path, tb_file_kind(now.st_mode));
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return tb_fail(err, "%s: cannot clear O_NONBLOCK: %s", path, strerror(e));
    }
    if (out) *out = now;
    return fd;
}

static size_t read_chunk(void *buf, size_t len, void *data) {
    size_t n = fread(buf, 1, len, data);
    return n == 0 && ferror((FILE *)data) ? (size_t)-1 : n;
}

json_t *tb_json_load_file(const char *path, size_t flags, json_error_t *error) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (error) {
            *error = (json_error_t){.line = -1, .column = -1};
            snprintf(error->source, sizeof error->source, "%s", path);
            snprintf(error->text, sizeof error->text, "unable to open %s: %s", path, strerror(errno));
        }
        return NULL;
    }
    json_t *j = json_load_callback(read_chunk, f, flags, error);
    fclose(f);
    return j;
}

int tb_path_format(char *buf, size_t len, tb_error *err, const char *fmt, ...) {
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < len) {
        va_end(again);
        return 0;
    }
    if (len > 0) buf[0] = '\0';  // a cut path must not be used by a caller that ignores -1
    if (n < 0) {
        va_end(again);
        return tb_fail(err, "cannot format a path from '%s'", fmt);
    }
    // The message names the whole path, formatted again at full length: its start says which
    // root was too long, its end which file was wanted. A long one keeps both ends, so the
    // message still fits a tb_error with the callers' context before it.
    char *full = tb_xmalloc((size_t)n + 1, "too-long path");
    vsnprintf(full, (size_t)n + 1, fmt, again);
    va_end(again);
    enum { SHOWN = 300 };  // bytes of each end of a path too long to show whole
    if (n <= 2 * SHOWN)
        tb_fail(err, "path too long: %s (%d bytes, over the limit of %zu)", full, n, len ? len - 1 : 0);
    else
        tb_fail(err, "path too long: %.*s...%s (%d bytes, over the limit of %zu)", SHOWN, full, full + n - SHOWN, n,
                len ? len - 1 : 0);
    free(full);
    return -1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int tb_remove_tree(const char *path, tb_error *err) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : tb_fail(err, "%s: %s", path, strerror(errno));
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return tb_fail(err, "%s: cannot remove (%s)", path, strerror(errno));
    return 0;
}

int tb_output_dir_check(const char *flag, const char *dir, tb_error *err) {
    if (!dir || !dir[0]) return 0;
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return tb_fail(err, "%s %s is %s, not a directory", flag, dir, tb_file_kind(st.st_mode));
    if (tb_mkdir_p(dir, err) != 0) return tb_fail_prefix(err, "%s %s", flag, dir);
    if (access(dir, W_OK) != 0) return tb_fail(err, "%s %s: not writable: %s", flag, dir, strerror(errno));
    return 0;
}

int tb_output_file_check(const char *flag, const char *path, tb_error *err) {
    if (!path || !path[0]) return 0;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return tb_fail(err, "%s %s is a directory, not a file", flag, path);
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return tb_fail(err, "%s %s: its directory %s does not exist", flag, path, dir);
    if (access(dir, W_OK) != 0) return tb_fail(err, "%s %s: its directory %s is not writable: %s", flag, path, dir,
                                               strerror(errno));
    return 0;
}
