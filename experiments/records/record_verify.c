#include "records/record_verify.h"

#include <limits.h>
#include <stdio.h>
#include <strings.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
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

int tb_record_verify_files(const char *dir, const json_t *files, void (*problem)(void *arg, const char *text),
                           void *arg) {
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
        if (stat(full, &st) != 0) {
            snprintf(text, sizeof text, "file missing: %s (manifest sha256 %s)", full, json_string_value(want));
            problem(arg, text);
        } else if (tb_sha256_file(full, hex, &err) != 0) {
            snprintf(text, sizeof text, "file unreadable: %s", err.msg);
            problem(arg, text);
        } else if (strcasecmp(hex, json_string_value(want)) != 0) {
            snprintf(text, sizeof text, "file altered: %s: sha256 expected %s, actual %s", full,
                     json_string_value(want), hex);
            problem(arg, text);
        } else {
            verified++;
        }
    }
    return verified;
}
