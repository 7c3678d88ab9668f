// map_nsys.c — see map_nsys.h.
#include "map_nsys.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

static int has_column(sqlite3 *db, const char *table, const char *column) {
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA table_info(%s)", table);
    sqlite3_stmt *st;
    int found = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return 0;
    while (!found && sqlite3_step(st) == SQLITE_ROW)
    {
        const char *name = (const char *)sqlite3_column_text(st, 1);
        found = name && !strcmp(name, column);
    }
    sqlite3_finalize(st);
    return found;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int tb_rt_load_nsys(tb_rt *rt, const char *path, int first_rank, tb_error *err) {
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        tb_fail(err, "%s: cannot open: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return -1;
    }
    if (!has_column(db, "NVTX_EVENTS", "start") || !has_column(db, "NVTX_EVENTS", "eventType")) {
        sqlite3_close(db);
        return tb_fail(err, "%s: an SQLite file without an NVTX_EVENTS table (not `nsys export --type sqlite`?)",
                       path);
    }
    int text = has_column(db, "NVTX_EVENTS", "text");
    int text_id = has_column(db, "NVTX_EVENTS", "textId") && has_column(db, "StringIds", "value");
    // the default domain's ranges (nvtxRangePushA) only: libraries' own domains (NCCL's)
    // are not the program's ranges; unless that leaves nothing
    int domain = 0;
    if (has_column(db, "NVTX_EVENTS", "domainId")) {
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(db,
                               "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType = 59 AND"
                               " (domainId IS NULL OR domainId = 0)",
                               -1, &q, NULL) == SQLITE_OK &&
            sqlite3_step(q) == SQLITE_ROW)
            domain = sqlite3_column_int64(q, 0) > 0;
        sqlite3_finalize(q);
    }
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT e.start, e.\"end\", %s, e.globalTid FROM NVTX_EVENTS e %s"
             " WHERE e.eventType = 59 AND e.\"end\" IS NOT NULL%s ORDER BY e.start",
             text && text_id ? "COALESCE(e.text, s.value)" : text ? "e.text" : text_id ? "s.value" : "NULL",
             text_id ? "LEFT JOIN StringIds s ON s.id = e.textId" : "",
             domain ? " AND (e.domainId IS NULL OR e.domainId = 0)" : "");
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        tb_fail(err, "%s: reading NVTX_EVENTS: %s", path, sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    int first = rt->nev, n = 0;
    long row = 0;
    tb_rt_drops drops = {0};
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 2);
        int64_t s = sqlite3_column_int64(st, 0), e = sqlite3_column_int64(st, 1);
        row++;
        if (!name || e < s) {  // counted and named, never silently lost
            tb_rt_drop(&drops, !name ? "without a name" : "with a negative duration (end before start)", row - 1);
            continue;
        }
        tb_rt_add_event(rt, name, 0, sqlite3_column_int64(st, 3), s, e - s, NULL);
        n++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    // threads → ranks
    int64_t *tids = tb_xmalloc((size_t)(n + 1) * sizeof *tids, "thread ids");
    for (int i = 0; i < n; i++) tids[i] = rt->ev[first + i].tid;
    qsort(tids, (size_t)n, sizeof *tids, cmp_i64);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (k == 0 || tids[k - 1] != tids[i]) tids[k++] = tids[i];
    for (int i = 0; i < n; i++) {
        int64_t *p = bsearch(&rt->ev[first + i].tid, tids, (size_t)k, sizeof *tids, cmp_i64);
        rt->ev[first + i].rank = first_rank + (int)(p - tids);
    }
    free(tids);
    tb_rt_note_file(rt, path, "nsys-sqlite", n);
    tb_rt_note_drops(rt, path, &drops);
    return 0;
}
