// index_reuse.c — incremental re-indexing for `tracebook index` (see index.c): content hashes
// of the units' input files, the hash of their command lines, and reading the previous
// index's per-unit facts (the tu_* tables of index_db.h) back, so that a unit whose inputs are
// unchanged is not parsed again.
//
// A unit is reused when the previous index (same schema, written by the same tracebook
// executable with the same libclang) has it with the same ix_inputs_hash and every file it
// read (its source and every file it included, system headers too) still has the SHA-256
// recorded then. Anything else parses it again: a changed or new unit, a changed header, a
// changed flag, a unit whose errors include a missing header (the header may exist now).
#include <clang-c/Index.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/xalloc.h"
#include "index_db.h"
#include "index_reuse.h"
#include "index_reuse_internal.h"
#include "index_unit_rows.h"

typedef struct hash_ent {
    const char *hash;
    long lines;
    ix_file_stat st;  // as hashed (st.size < 0: no stat, nothing to keep)
    // A file of the previous index's file_stats, stat'ed ahead by stat_known: now_taken 1,
    // now_ok whether it is a regular file, now its stat.
    int now_taken, now_ok;
    ix_file_stat now;
} hash_ent;

static const char *hex(tb_pool *p, const unsigned char *md, unsigned n) {
    static const char digits[] = "0123456789abcdef";
    char s[2 * EVP_MAX_MD_SIZE + 1];
    for (unsigned i = 0; i < n; i++) s[2 * i] = digits[md[i] >> 4], s[2 * i + 1] = digits[md[i] & 15];
    s[2 * n] = 0;
    return tb_pool_dup(p, s);
}

// SHA-256 fetched once: EVP_sha256() makes every EVP_DigestInit_ex fetch the implementation
// again (OpenSSL 3), a few microseconds per digest, and the index takes one per unit and file.
static EVP_MD *sha256_md;
static void fetch_sha256(void) { sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL); }
static const EVP_MD *sha256(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fetch_sha256);
    return sha256_md ? sha256_md : EVP_sha256();
}

void ix_digest_fetch(void) { (void)sha256(); }

EVP_MD_CTX *ix_digest_new(void) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || EVP_DigestInit_ex(ctx, sha256(), NULL) != 1)
        tb_host_oom(sizeof(EVP_MD_CTX *), "a SHA-256 context", __FILE__, __LINE__);
    return ctx;
}

void ix_digest_add(EVP_MD_CTX *ctx, const char *s) {
    EVP_DigestUpdate(ctx, s ? s : "", s ? strlen(s) + 1 : 1);  // each string with its NUL: unambiguous
}

const char *ix_digest_hex(tb_pool *p, EVP_MD_CTX *ctx) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    EVP_DigestFinal_ex(ctx, md, &n);
    EVP_MD_CTX_free(ctx);
    return hex(p, md, n);
}

void ix_hashes_init(ix_hashes *h) {
    memset(h, 0, sizeof *h);
    tb_strmap_init(&h->idx);
    tb_vec_init(&h->ents, sizeof(hash_ent), "file hashes");
    tb_strmap_init(&h->known_idx);
    tb_vec_init(&h->known, sizeof(hash_ent), "known file hashes");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    h->start_ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void ix_hashes_free(ix_hashes *h) {
    tb_strmap_free(&h->idx);
    tb_vec_free(&h->ents);
    tb_strmap_free(&h->known_idx);
    tb_vec_free(&h->known);
    tb_pool_free(&h->pool);
}

static ix_file_stat stat_of(const struct stat *st) {
    return (ix_file_stat){.size = (long long)st->st_size,
                          .mtime_ns = (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec,
                          .ctime_ns = (long long)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec,
                          .ino = (long long)st->st_ino,
                          .dev = (long long)st->st_dev};
}

// SHA-256 and line count of a file's contents; "-" when it cannot be read.
static const char *hash_file(ix_hashes *h, const char *path, long *lines, ix_file_stat *fs) {
    *lines = 0;
    fs->size = -1;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return "-";
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return "-";
    }
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md || !EVP_DigestInit_ex(md, sha256(), NULL)) abort();
    static _Thread_local unsigned char buf[1 << 16];
    ssize_t n;
    int last = '\n';
    long nl = 0;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        EVP_DigestUpdate(md, buf, (size_t)n);
        for (ssize_t i = 0; i < n; i++) nl += buf[i] == '\n';
        last = buf[n - 1];
    }
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_DigestFinal_ex(md, out, &len);
    EVP_MD_CTX_free(md);
    // Modified since the run started (or during it): this run may have parsed another version.
    long long mt = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    struct stat st2;
    int changed = fstat(fd, &st2) != 0 || st2.st_mtim.tv_sec != st.st_mtim.tv_sec ||
                  st2.st_mtim.tv_nsec != st.st_mtim.tv_nsec || st2.st_size != st.st_size;
    close(fd);
    if (n < 0) return "-";
    *lines = nl + (last != '\n');
    // (20 ms of slack: file systems stamp with a coarse clock that may lag CLOCK_REALTIME)
    if (changed || mt >= h->start_ns - 20000000LL) return "~";
    *fs = stat_of(&st);
    return hex(&h->pool, out, len);
}

// The hash a previous run recorded for the file, when its stat says it is the same file
// unchanged since: size, mtime, inode and device as then, and ctime, which the kernel sets to
// the current time on every change of contents or metadata and no program can set back. Both
// times before the run's start (20 ms of slack), as hash_file requires.
static const hash_ent *known_unchanged(ix_hashes *h, const char *path, ix_file_stat *fs) {
    int *k = tb_strmap_get(&h->known_idx, path);
    if (!k) return NULL;
    const hash_ent *e = &TB_VEC_AT(&h->known, hash_ent, *k);
    if (e->now_taken) {
        if (!e->now_ok) return NULL;
        *fs = e->now;
    } else {
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return NULL;
        *fs = stat_of(&st);
    }
    long long limit = h->start_ns - 20000000LL;
    if (memcmp(&e->st, fs, sizeof *fs) || fs->mtime_ns >= limit || fs->ctime_ns >= limit) return NULL;
    return e;
}

const char *ix_file_hash(ix_hashes *h, const char *path, long *lines) {
    int *i = tb_strmap_get(&h->idx, path);
    if (!i) {
        ix_file_stat fs;
        const hash_ent *k = known_unchanged(h, path, &fs);
        hash_ent *e = tb_vec_push(&h->ents);
        if (k) {
            *e = *k;
        } else {
            e->hash = hash_file(h, path, &e->lines, &fs);
            e->st = fs;
        }
        i = tb_strmap_put(&h->idx, path, (int)(h->ents.len - 1));
    }
    hash_ent *e = &TB_VEC_AT(&h->ents, hash_ent, *i);
    if (lines) *lines = e->lines;
    return e->hash;
}

static void add_str(EVP_MD_CTX *md, const char *tag, const char *s) {
    EVP_DigestUpdate(md, tag, strlen(tag) + 1);
    if (s) EVP_DigestUpdate(md, s, strlen(s) + 1);
    else EVP_DigestUpdate(md, "", 0);
}

const char *ix_inputs_hash(tb_pool *p, const ix_tu *tu, const ix_options *opt) {
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md || !EVP_DigestInit_ex(md, sha256(), NULL)) abort();
    add_str(md, "dir", tu->directory);
    add_str(md, "file", tu->file);
    add_str(md, "cuda", tu->cuda ? "1" : "0");
    for (int i = 0; i < tu->nargs; i++) add_str(md, "arg", tu->args[i]);
    for (int i = 0; i < tu->nfallback; i++) add_str(md, "fallback", tu->fallback[i]);
    for (size_t i = 0; i < opt->nrange_push; i++) add_str(md, "push", opt->range_push[i]);
    for (size_t i = 0; i < opt->nrange_pop; i++) add_str(md, "pop", opt->range_pop[i]);
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_DigestFinal_ex(md, out, &len);
    EVP_MD_CTX_free(md);
    return hex(p, out, len);
}

void ix_indexer_init(ix_indexer *ind, tb_pool *p) {
    struct stat st;
    ind->pool = p;
    ind->key = NULL;
    ind->stat = "";
    if (stat("/proc/self/exe", &st) == 0) {
        ix_file_stat fs = stat_of(&st);
        ind->stat = tb_pool_printf(p, "%lld %lld %lld %lld %lld", fs.size, fs.mtime_ns, fs.ctime_ns, fs.ino, fs.dev);
    }
}

static const char *clang_version(tb_pool *p) {
    CXString v = clang_getClangVersion();
    const char *s = tb_pool_dup(p, clang_getCString(v) ? clang_getCString(v) : "");
    clang_disposeString(v);
    return s;
}

const char *ix_indexer_key(ix_indexer *ind) {
    if (ind->key) return ind->key;
    ix_hashes h;
    ix_hashes_init(&h);
    h.start_ns = 0x7fffffffffffffffLL;  // the executable's mtime does not matter here
    const char *exe = ix_file_hash(&h, "/proc/self/exe", NULL);
    ind->key = tb_pool_printf(ind->pool, "%s %s %s", TB_INDEX_SCHEMA_VERSION, exe, clang_version(ind->pool));
    ix_hashes_free(&h);
    return ind->key;
}

// The previous index's key, when it was written by this very executable (same stat) with
// the same schema and libclang.
static void take_recorded_key(ix_indexer *ind, const char *key, const char *stat) {
    if (ind->key || !key || !stat || !*ind->stat || strcmp(stat, ind->stat)) return;
    size_t ns = strlen(TB_INDEX_SCHEMA_VERSION);
    const char *clang = clang_version(ind->pool);
    size_t nk = strlen(key), nc = strlen(clang);
    if (nk > ns + nc + 2 && !strncmp(key, TB_INDEX_SCHEMA_VERSION, ns) && key[ns] == ' ' &&
        !strcmp(key + nk - nc, clang) && key[nk - nc - 1] == ' ')
        ind->key = tb_pool_dup(ind->pool, key);
}

// ---------------------------------------------------------------------------------------
// The previous index

const char *ixr_col_text(tb_pool *p, sqlite3_stmt *st, int i) {
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? tb_pool_dup(p, (const char *)s) : NULL;
}

static const char *meta_value(sqlite3 *db, tb_pool *p, const char *key) {
    sqlite3_stmt *st = NULL;
    const char *v = NULL;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW) v = ixr_col_text(p, st, 0);
    }
    sqlite3_finalize(st);
    return v;
}

const char *ix_prev_meta(ix_prev *p, const char *key) { return p->db ? meta_value(p->db, &p->pool, key) : NULL; }

int ix_prev_load(ix_prev *p, const char *path, ix_indexer *ind, const char **why) {
    memset(p, 0, sizeof *p);
    tb_vec_init(&p->paths, sizeof(const char *), "previous index paths");
    tb_strmap_init(&p->units);
    tb_vec_init(&p->list, sizeof(ix_prev_unit), "previous units");
    *why = NULL;
    if (access(path, F_OK) != 0) {
        *why = "no previous index";
        return 1;
    }
    if (sqlite3_open_v2(path, &p->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        *why = "the previous index cannot be opened";
        goto none;
    }
    const char *version = meta_value(p->db, &p->pool, "schema_version");
    if (!version || strcmp(version, TB_INDEX_SCHEMA_VERSION)) {
        *why = "the previous index has another schema version";
        goto none;
    }
    const char *key = meta_value(p->db, &p->pool, "indexer");
    take_recorded_key(ind, key, meta_value(p->db, &p->pool, "indexer_exe_stat"));
    if (!key || strcmp(key, ix_indexer_key(ind))) {
        *why = "the previous index was written by another build of tracebook or libclang";
        goto none;
    }
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(p->db, "SELECT id, path FROM files ORDER BY id", -1, &st, NULL) != SQLITE_OK) {
        *why = "the previous index cannot be read";
        goto none;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        long long id = sqlite3_column_int64(st, 0);
        if (id <= 0 || id > 100000000) continue;
        while (p->paths.len <= (size_t)id) tb_vec_push(&p->paths);
        TB_VEC_AT(&p->paths, const char *, id) = ixr_col_text(&p->pool, st, 1);
    }
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(p->db,
                           "SELECT f.path, u.tu_id, u.inputs, f.status, f.diagnostics, f.errors, u.reduced, u.deps_kept FROM tu_inputs u"
                           " JOIN files f ON f.id = u.tu_id",
                           -1, &st, NULL) != SQLITE_OK) {
        *why = "the previous index cannot be read";
        goto none;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        ix_prev_unit *u = tb_vec_push(&p->list);
        const char *file = ixr_col_text(&p->pool, st, 0);
        u->id = sqlite3_column_int64(st, 1);
        u->inputs = ixr_col_text(&p->pool, st, 2);
        const char *diags = (const char *)sqlite3_column_text(st, 4);
        u->missing_header = diags && strstr(diags, "file not found");
        const char *status = (const char *)sqlite3_column_text(st, 3);
        u->status = !status ? "failed" : !strcmp(status, "ok") ? "ok" : !strcmp(status, "partial") ? "partial" : "failed";
        u->diagnostics = diags ? ixr_col_text(&p->pool, st, 4) : NULL;
        u->errors = sqlite3_column_int(st, 5);
        u->reduced = sqlite3_column_int(st, 6);
        u->deps_kept = sqlite3_column_int(st, 7);
        tb_vec_init(&u->deps, sizeof(ix_dep), "unit inputs");
        if (file) tb_strmap_put(&p->units, file, (int)(p->list.len - 1));
    }
    sqlite3_finalize(st);
    p->by_id = tb_xcalloc(p->paths.len + 1, sizeof *p->by_id, "previous units by id");
    for (size_t i = 0; i < p->list.len; i++) {
        ix_prev_unit *u = &TB_VEC_AT(&p->list, ix_prev_unit, i);
        if (u->id > 0 && (size_t)u->id < p->paths.len) p->by_id[u->id] = u;
    }
    return 0;
none:
    sqlite3_close(p->db);
    p->db = NULL;
    return 1;
}

// The previous unit at files.id `id`, or NULL.
static ix_prev_unit *unit_by_id(const ix_prev *p, long long id) {
    return id > 0 && (size_t)id < p->paths.len ? p->by_id[id] : NULL;
}

// One scan of tu_deps: fn(unit, path, hash, arg) for each input of each unit's record, in the
// order they were recorded; a record that does not unpack gives one call with path and hash
// NULL. The text pointers are valid during the call.
static int scan_deps(ix_prev *p, void (*fn)(ix_prev_unit *, const char *, const char *, void *), void *arg) {
    sqlite3_stmt *st = NULL;
    int rc = -1;
    if (sqlite3_prepare_v2(p->db, "SELECT tu_id, rows FROM tu_deps ORDER BY tu_id", -1, &st, NULL) == SQLITE_OK) {
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            ix_prev_unit *u = unit_by_id(p, sqlite3_column_int64(st, 0));
            if (!u) continue;
            ix_result deps;
            ix_result_init(&deps);
            if (ix_rows_unpack(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), IX_TU_DEPS, &deps, NULL,
                               NULL))
                fn(u, NULL, NULL, arg);
            else
                for (size_t i = 0; i < deps.deps.len; i++)
                    fn(u, TB_VEC_AT(&deps.deps, ix_dep, i).path, TB_VEC_AT(&deps.deps, ix_dep, i).hash, arg);
            ix_result_free(&deps);
        }
        rc = r == SQLITE_DONE ? 0 : -1;
    }
    sqlite3_finalize(st);
    return rc;
}

static void check_dep(ix_prev_unit *u, const char *path, const char *hash, void *arg) {
    u->ndeps++;
    if (!path || !hash || strcmp(ix_file_hash(arg, path, NULL), hash)) u->deps_changed = 1;
}

// The units input_units names for a path, each marked changed: 0, or -1 when its record does
// not unpack (then every unit is compared by a scan instead, and no update in place applies:
// the full merge writes input_units anew).
static int mark_readers(ix_prev *p, sqlite3_stmt *st, const char *path) {
    sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
    int r = sqlite3_step(st), rc = r == SQLITE_DONE ? 0 : -1;
    if (r == SQLITE_ROW) {
        tb_vec ids;
        tb_vec_init(&ids, sizeof(long long), "a file's units");
        rc = ix_units_unpack(sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0), &ids);
        if (rc) p->input_units_bad = 1;
        for (size_t i = 0; !rc && i < ids.len; i++) {
            ix_prev_unit *u = unit_by_id(p, TB_VEC_AT(&ids, long long, i));
            if (u) u->deps_changed = 1;
        }
        tb_vec_free(&ids);
    }
    sqlite3_reset(st);
    return rc;
}

// Every run hashes every unit's input files (or takes their hashes by stat) and records them in
// file_stats, and a unit is reused only when its recorded hashes are the current ones; so after
// each run a unit's tu_deps hashes are file_stats' (deps_kept: all of them SHA-256s). The files
// of file_stats that changed since are found by their stat (and hash), and the units that read
// them by a search of tu_deps per changed file; a unit with a '-' or '~' input is parsed again.
// Without file_stats, or with many changed files, one scan compares each unit's rows.
// stat_known's threads: every `stride`-th known file from `first`.
typedef struct stat_share {
    const char *const *paths;
    hash_ent *const *ents;
    size_t n, first, stride;
} stat_share;

static void *stat_some(void *arg) {
    const stat_share *s = arg;
    for (size_t i = s->first; i < s->n; i += s->stride) {
        struct stat st;
        hash_ent *e = s->ents[i];
        e->now_ok = stat(s->paths[i], &st) == 0 && S_ISREG(st.st_mode);
        if (e->now_ok) e->now = stat_of(&st);
        e->now_taken = 1;
    }
    return NULL;
}

// Every file of the previous index's file_stats stat'ed now, `jobs` threads at a time (a
// system call per file, ~1.5 ms for this project's 900 inputs on one thread).
static void stat_known(ix_hashes *h, int jobs) {
    size_t n = 0;
    const char **paths = tb_xcalloc(h->known.len + 1, sizeof *paths, "known files");
    hash_ent **ents = tb_xcalloc(h->known.len + 1, sizeof *ents, "known files");
    for (size_t k = 0; k < h->known_idx.cap; k++) {
        if (!h->known_idx.keys[k]) continue;
        paths[n] = h->known_idx.keys[k];
        ents[n++] = &TB_VEC_AT(&h->known, hash_ent, h->known_idx.vals[k]);
    }
    size_t nthreads = jobs < 1 ? 1 : (size_t)jobs;
    if (nthreads > n / 128 + 1) nthreads = n / 128 + 1;  // a thread is worth ~100 stats
    stat_share *shares = tb_xcalloc(nthreads, sizeof *shares, "stat shares");
    pthread_t *th = tb_xcalloc(nthreads, sizeof *th, "stat threads");
    for (size_t t = 0; t < nthreads; t++) shares[t] = (stat_share){paths, ents, n, t, nthreads};
    size_t started = 0;
    for (size_t t = 1; t < nthreads && pthread_create(&th[t], NULL, stat_some, &shares[t]) == 0; t++) started++;
    for (size_t t = started + 1; t < nthreads; t++) stat_some(&shares[t]);  // a thread that did not start
    stat_some(&shares[0]);
    for (size_t t = 1; t <= started; t++) pthread_join(th[t], NULL);
    free(th);
    free(shares);
    free(ents);
    free(paths);
}

void ix_prev_check_deps(ix_prev *p, ix_hashes *h, int jobs) {
    if (!p->db) return;
    stat_known(h, jobs);
    tb_strmap_reserve(&h->idx, h->known.len);
    tb_vec changed;  // of const char *: recorded files whose hash is not the recorded one
    tb_vec_init(&changed, sizeof(const char *), "changed input files");
    for (size_t k = 0; k < h->known_idx.cap; k++) {  // every recorded file hashed (or stat'ed) once
        const char *path = h->known_idx.keys[k];
        if (path && strcmp(ix_file_hash(h, path, NULL), TB_VEC_AT(&h->known, hash_ent, h->known_idx.vals[k]).hash))
            *(const char **)tb_vec_push(&changed) = path;
    }
    sqlite3_stmt *st = NULL;
    int scan = !h->known.len || changed.len > 16 ||
               sqlite3_prepare_v2(p->db, "SELECT units FROM input_units WHERE path = ?", -1, &st, NULL) != SQLITE_OK;
    if (!scan) {
        for (size_t i = 0; i < p->list.len; i++) {
            ix_prev_unit *u = &TB_VEC_AT(&p->list, ix_prev_unit, i);
            u->ndeps = 1;
            u->deps_changed = !u->deps_kept;
        }
        for (size_t k = 0; k < changed.len && !scan; k++)
            scan = mark_readers(p, st, TB_VEC_AT(&changed, const char *, k));
    }
    sqlite3_finalize(st);
    tb_vec_free(&changed);
    if (!scan) return;
    for (size_t i = 0; i < p->list.len; i++) {
        ix_prev_unit *u = &TB_VEC_AT(&p->list, ix_prev_unit, i);
        u->ndeps = 0;
        u->deps_changed = 0;
    }
    if (scan_deps(p, check_dep, h))  // unreadable: nothing is reused
        for (size_t i = 0; i < p->list.len; i++) TB_VEC_AT(&p->list, ix_prev_unit, i).deps_changed = 1;
}

static void keep_dep(ix_prev_unit *u, const char *path, const char *hash, void *arg) {
    ix_prev *p = arg;
    if (!path || !hash) {  // its record does not unpack: the unit is parsed, not reused
        u->deps_bad = 1;
        return;
    }
    ix_dep *d = tb_vec_push(&u->deps);
    d->path = tb_pool_dup(&p->pool, path);
    d->hash = tb_pool_dup(&p->pool, hash);
}

int ixr_load_deps(ix_prev *p) {
    if (p->deps_loaded) return 0;
    p->deps_loaded = 1;
    return scan_deps(p, keep_dep, p);
}

int ix_prev_reparsed(const ix_prev_unit *u) { return !u->inputs || u->missing_header || !u->ndeps || u->deps_changed; }

const ix_prev_unit *ix_prev_match(const ix_prev *p, const ix_tu *tu, const char *inputs) {
    if (!p->db) return NULL;
    int *i = tb_strmap_get(&p->units, tu->file);
    if (!i) return NULL;
    const ix_prev_unit *u = &TB_VEC_AT(&p->list, ix_prev_unit, *i);
    return ix_prev_reparsed(u) || strcmp(u->inputs, inputs) ? NULL : u;
}

static int kept(const hash_ent *e) { return e->st.size >= 0 && e->hash && strlen(e->hash) == 64; }

void ix_hashes_known(ix_hashes *h, sqlite3 *db) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT path, size, mtime_ns, ctime_ns, ino, dev, hash, lines FROM file_stats", -1, &st,
                           NULL) != SQLITE_OK)
        return;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *path = (const char *)sqlite3_column_text(st, 0), *hash = (const char *)sqlite3_column_text(st, 6);
        if (!path || !hash || strlen(hash) != 64) continue;
        hash_ent *e = tb_vec_push(&h->known);
        e->st = (ix_file_stat){sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3),
                               sqlite3_column_int64(st, 4), sqlite3_column_int64(st, 5)};
        e->hash = tb_pool_dup(&h->pool, hash);
        e->lines = (long)sqlite3_column_int64(st, 7);
        tb_strmap_put(&h->known_idx, path, (int)(h->known.len - 1));
    }
    sqlite3_finalize(st);
}

int ix_hashes_save(const ix_hashes *h, sqlite3 *db, int holds_known) {
    sqlite3_stmt *st = NULL, *del = NULL;
    if (sqlite3_prepare_v2(db, "DELETE FROM file_stats WHERE path = ?", -1, &del, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO file_stats(path, size, mtime_ns, ctime_ns, ino, dev, hash, lines)"
                               " VALUES(?,?,?,?,?,?,?,?)", -1, &st, NULL) != SQLITE_OK) {
        sqlite3_finalize(del);
        return -1;
    }
    int rc = 0;
    if (!holds_known && sqlite3_exec(db, "DELETE FROM file_stats", NULL, NULL, NULL) != SQLITE_OK) rc = -1;
    for (size_t k = 0; holds_known && k < h->known_idx.cap && !rc; k++) {
        const char *path = h->known_idx.keys[k];
        int *i = path ? tb_strmap_get(&h->idx, path) : NULL;
        if (!path || (i && kept(&TB_VEC_AT(&h->ents, hash_ent, *i)))) continue;
        sqlite3_bind_text(del, 1, path, -1, SQLITE_STATIC);
        rc = sqlite3_step(del) == SQLITE_DONE ? 0 : -1;
        sqlite3_reset(del);
    }
    for (size_t k = 0; k < h->idx.cap && !rc; k++) {
        if (!h->idx.keys[k]) continue;
        const hash_ent *e = &TB_VEC_AT(&h->ents, hash_ent, h->idx.vals[k]);
        if (!kept(e)) continue;  // "-", "~": not kept
        int *i = tb_strmap_get(&h->known_idx, h->idx.keys[k]);
        const hash_ent *was = i ? &TB_VEC_AT(&h->known, hash_ent, *i) : NULL;
        if (holds_known && was && !memcmp(&was->st, &e->st, sizeof e->st) && !strcmp(was->hash, e->hash) &&
            was->lines == e->lines)
            continue;  // the row is as it was
        sqlite3_bind_text(st, 1, h->idx.keys[k], -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, e->st.size);
        sqlite3_bind_int64(st, 3, e->st.mtime_ns);
        sqlite3_bind_int64(st, 4, e->st.ctime_ns);
        sqlite3_bind_int64(st, 5, e->st.ino);
        sqlite3_bind_int64(st, 6, e->st.dev);
        sqlite3_bind_text(st, 7, e->hash, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 8, e->lines);
        rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    sqlite3_finalize(del);
    return rc;
}

void ix_prev_close(ix_prev *p) {
    if (p->db) sqlite3_close(p->db);
    p->db = NULL;
}

void ix_prev_free(ix_prev *p) {
    ix_prev_close(p);
    for (size_t i = 0; i < p->list.len; i++) tb_vec_free(&TB_VEC_AT(&p->list, ix_prev_unit, i).deps);
    tb_vec_free(&p->list);
    free(p->by_id);
    tb_strmap_free(&p->units);
    tb_pool_free(&p->pool);
    tb_vec_free(&p->paths);
}

// The parsed units' input files and their hashes (each file read once), and the figures:
// distinct files the parses read (`counted`) and their lines.
void ix_hash_unit_inputs(const ix_compdb *db, ix_result *results, const size_t *todo, size_t ntodo, ix_hashes *hashes,
                        tb_strmap *counted, long *nfiles, long *nlines) {
    for (size_t k = 0; k < ntodo; k++) {
        size_t i = todo[k];
        ix_result *r = &results[i];
        tb_vec deps;
        tb_vec_init(&deps, sizeof(ix_dep), "unit inputs");
        tb_strmap seen;
        tb_strmap_init(&seen);
        ((ix_dep *)tb_vec_push(&deps))->path = db->tus[i].file;  // the source, even when it did not parse
        tb_strmap_put(&seen, db->tus[i].file, 1);
        for (size_t j = 0; j < r->deps.len; j++) {
            const char *path = TB_VEC_AT(&r->deps, ix_dep, j).path;
            if (tb_strmap_get(&seen, path)) continue;
            tb_strmap_put(&seen, path, 1);
            ((ix_dep *)tb_vec_push(&deps))->path = path;
        }
        tb_strmap_free(&seen);
        for (size_t j = 0; j < deps.len; j++) {
            ix_dep *d = &TB_VEC_AT(&deps, ix_dep, j);
            long lines = 0;
            d->hash = ix_file_hash(hashes, d->path, &lines);
            if (!tb_strmap_get(counted, d->path) && strcmp(d->hash, "-")) {
                tb_strmap_put(counted, d->path, 1);
                (*nfiles)++;
                *nlines += lines;
            }
        }
        tb_vec_free(&r->deps);
        r->deps = deps;
    }
}
