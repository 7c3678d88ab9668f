#include "records/record_verify.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <strings.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fileio.h"
#include "records/provenance.h"

int tb_record_safe_path(const char *rel) {
    if (!*rel || rel[0] == '/') return 0;
    for (const char *p = rel; *p;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if ((len == 2 && !strncmp(p, "..", 2)) || len == 0) return 0;
        p += len + (slash ? 1 : 0);
    }
    return 1;
}

static tb_file_stamp stamp_of(const struct stat *st) {
    return (tb_file_stamp){(long long)st->st_dev, (long long)st->st_ino, (long long)st->st_size,
                           (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec,
                           (long long)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec};
}

// An open descriptor of the regular file at path (never blocking on a FIFO); -1 with err.
static int open_regular(const char *path, struct stat *st, tb_error *err) {
    return tb_open_regular(path, "a record holds regular files: a FIFO could serve other bytes to every reader", st,
                           err);
}

int tb_file_stamp_of(const char *path, tb_file_stamp *stamp, tb_error *err) {
    struct stat st;
    int fd = open_regular(path, &st, err);
    if (fd < 0) return -1;
    close(fd);
    *stamp = stamp_of(&st);
    return 0;
}

int tb_sha256_regular(const char *path, char hex[65], tb_file_stamp *stamp, tb_error *err) {
    struct stat st;
    int fd = open_regular(path, &st, err);
    if (fd < 0) return -1;
    int rc = tb_sha256_fd(fd, path, hex, err);
    close(fd);
    if (rc == 0) *stamp = stamp_of(&st);
    return rc;
}

int tb_file_unchanged(const char *path, const tb_file_stamp *then, tb_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) return tb_fail(err, "%s: gone while it was read (%s)", path, strerror(errno));
    const tb_file_stamp now = stamp_of(&st);
    if (!memcmp(&now, then, sizeof now)) return 0;
    return tb_fail(err, "%s: changed while it was read (%s): the bytes read may not be the bytes hashed", path,
                   now.dev != then->dev || now.ino != then->ino ? "another file is at its path"
                   : now.size != then->size                      ? "its size changed"
                                                                 : "its contents or metadata changed");
}

int tb_record_verify_files(const char *dir, const json_t *files, void (*problem)(void *arg, const char *text),
                           void (*stamped)(void *arg, const char *path, const tb_file_stamp *stamp), void *arg) {
    int verified = 0;
    const char *rel;
    json_t *want;
    char text[3 * PATH_MAX];
    json_object_foreach((json_t *)files, rel, want) {
        char full[PATH_MAX];
        if (!tb_record_safe_path(rel) || snprintf(full, sizeof full, "%s/%s", dir, rel) >= (int)sizeof full) {
            snprintf(text, sizeof text, "manifest lists a path outside the record: %s (in %s)", rel, dir);
            problem(arg, text);
            continue;
        }
        if (!json_is_string(want)) {
            snprintf(text, sizeof text, "manifest gives no sha256 for %s (in %s)", rel, dir);
            problem(arg, text);
            continue;
        }
        char hex[65];
        tb_error err;
        struct stat st;
        tb_file_stamp stamp;
        if (stat(full, &st) != 0) {
            snprintf(text, sizeof text, "file missing: %s (manifest sha256 %s)", full, json_string_value(want));
            problem(arg, text);
        } else if (tb_sha256_regular(full, hex, &stamp, &err) != 0) {
            snprintf(text, sizeof text, "file unreadable: %s", err.msg);
            problem(arg, text);
        } else if (strcasecmp(hex, json_string_value(want)) != 0) {
            snprintf(text, sizeof text, "file altered: %s: sha256 expected %s, actual %s", full,
                     json_string_value(want), hex);
            problem(arg, text);
        } else {
            verified++;
            if (stamped) stamped(arg, full, &stamp);
        }
    }
    return verified;
}
