#include "index_db.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileio.h"

// The file's identity and last change, "size mtime.ns inode": what a passed check records
// in PATH.checked, so that the next open of an unchanged file skips the check.
static int file_stamp(const char *path, char *out, size_t cap) {
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    snprintf(out, cap, "%lld %lld.%09ld %llu\n", (long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
             (long)sb.st_mtim.tv_nsec, (unsigned long long)sb.st_ino);
    return 1;
}

static int stamp_matches(const char *sidecar, const char *stamp) {
    char have[128] = "";
    FILE *f = fopen(sidecar, "r");
    if (!f) return 0;
    int ok = fgets(have, sizeof have, f) != NULL && !strcmp(have, stamp);
    fclose(f);
    return ok;
}

int tb_index_open(sqlite3 **db, const char *path, tb_error *err) {
    *db = NULL;
    struct stat st_path;  // SQLite says only "disk I/O error" of a directory
    if (stat(path, &st_path) != 0)
        return tb_fail(err, "%s: cannot open index: %s (run `tracebook index` first)", path, strerror(errno));
    if (!S_ISREG(st_path.st_mode))
        return tb_fail(err, "%s: is %s, not an index file (`tracebook index --output FILE` writes one)", path,
                       tb_file_kind(st_path.st_mode));
    if (sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        int rc = tb_fail(err, "%s: cannot open index: %s (run `tracebook index` first)", path,
                         *db ? sqlite3_errmsg(*db) : "out of memory");
        sqlite3_close(*db);
        *db = NULL;
        return rc;
    }
    sqlite3_stmt *st = NULL;
    int ok = sqlite3_prepare_v2(*db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &st, NULL) ==
                 SQLITE_OK &&
             sqlite3_step(st) == SQLITE_ROW &&
             !strcmp((const char *)sqlite3_column_text(st, 0), TB_INDEX_SCHEMA_VERSION);
    sqlite3_finalize(st);
    if (!ok) {
        sqlite3_close(*db);
        *db = NULL;
        return tb_fail(err, "%s: not a tracebook index (schema version %s expected)", path, TB_INDEX_SCHEMA_VERSION);
    }
    // A damaged file could still answer a query or two, wrongly: nothing is read from one.
    // quick_check reads every page and checks the b-trees, as integrity_check does, but not
    // that each index matches its table: a third of the time (50 vs 130 ms on this project's
    // 9 MB index), paid by every query; the index is written in one transaction and renamed
    // into place, so an index out of step with its table is not what a damaged file shows.
    // The check costs ~50 ms on every query; a file whose size, mtime (ns) and inode are those
    // a passed check recorded has not been written since (a rewrite renames a new file into
    // place: a new inode), so it is not checked again. Damage that keeps all three (a disk
    // flipping bits under an unchanged inode) is what this gives up; `rm PATH.checked` forces it.
    char stamp[128] = "", sidecar[4096];
    int have_stamp = file_stamp(path, stamp, sizeof stamp) &&
                     snprintf(sidecar, sizeof sidecar, "%s.checked", path) < (int)sizeof sidecar;
    if (have_stamp && stamp_matches(sidecar, stamp)) return 0;
    char problem[512] = "";
    if (sqlite3_prepare_v2(*db, "PRAGMA quick_check(1)", -1, &st, NULL) != SQLITE_OK)
        snprintf(problem, sizeof problem, "%s", sqlite3_errmsg(*db));
    else if (sqlite3_step(st) != SQLITE_ROW)
        snprintf(problem, sizeof problem, "%s", sqlite3_errmsg(*db));
    else if (!sqlite3_column_text(st, 0) || strcmp((const char *)sqlite3_column_text(st, 0), "ok"))
        snprintf(problem, sizeof problem, "%s",
                 sqlite3_column_text(st, 0) ? (const char *)sqlite3_column_text(st, 0) : "no answer");
    sqlite3_finalize(st);
    for (char *q = problem; *q; q++)
        if (*q == '\n') *q = ' ';  // integrity_check's lines, on one
    if (problem[0]) {
        sqlite3_close(*db);
        *db = NULL;
        return tb_fail(err, "%s: the index is damaged (SQLite's quick_check: %s); write it again with `tracebook index "
                            "--full`",
                       path, problem);
    }
    if (have_stamp) {
        // a cache only: an unwritable directory means the next query checks again
        FILE *f = fopen(sidecar, "w");
        if (f) {
            fputs(stamp, f);
            if (fclose(f) != 0) remove(sidecar);
        }
    }
    return 0;
}
