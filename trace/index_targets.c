// index_targets.c — which translation units link into which build target, from CMake's file
// API reply (<build>/.cmake/api/v1/reply: index-*.json → codemodel-v2 → target-*.json).
//
// An executable (or shared/module library) gets its own compiled sources and those of every
// static, object or shared library it depends on, transitively; a static or object library
// gets its own sources only (it does not contain its dependencies).
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileio.h"
#include "core/xalloc.h"
#include "index_compdb.h"
#include "index_reuse.h"
#include "index_targets.h"
#include "strmap.h"

typedef struct tgt {
    const char *id, *name, *type;
    tb_vec sources;  // const char *, absolute
    tb_vec deps;     // int, indices
} tgt;

static json_t *load(const char *path, tb_error *err) {
    json_error_t jerr;
    json_t *j = tb_json_load_file(path, 0, &jerr);
    if (!j) tb_fail(err, "%s:%d:%d: malformed CMake file API reply: %s", path, jerr.line, jerr.column, jerr.text);
    return j;
}

static int is_lib(const char *type) {
    return !strcmp(type, "STATIC_LIBRARY") || !strcmp(type, "OBJECT_LIBRARY") || !strcmp(type, "SHARED_LIBRARY");
}

static void collect(ix_targets *t, tgt *all, int i, const tgt *owner, unsigned char *seen) {
    if (seen[i]) return;
    seen[i] = 1;
    for (size_t k = 0; k < all[i].sources.len; k++) {
        ix_target_row *r = tb_vec_push(&t->rows);
        r->target = owner->name;
        r->type = owner->type;
        r->file = TB_VEC_AT(&all[i].sources, const char *, k);
    }
    for (size_t k = 0; k < all[i].deps.len; k++) {
        int d = TB_VEC_AT(&all[i].deps, int, k);
        if (is_lib(all[d].type)) collect(t, all, d, owner, seen);
    }
}

static int is_file(ix_targets *t, const char *p) {
    const int *known = tb_strmap_get(&t->is_file, p);
    if (known) return *known;
    struct stat st;
    int yes = stat(p, &st) == 0 && S_ISREG(st.st_mode);
    tb_strmap_put(&t->is_file, p, yes);
    return yes;
}

// -lNAME as the linker finds it: lib NAME .so, else .a, on the -L directories, then the
// system's.
static const char *find_lib(ix_targets *t, const char *name, const tb_vec *dirs) {
    static const char *const system_dirs[] = {"/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu",
                                              "/usr/lib/aarch64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib64",
                                              "/lib64", "/usr/lib", "/lib", NULL};
    static const char *const exts[] = {"so", "a"};
    for (int e = 0; e < 2; e++) {
        for (size_t i = 0; i < dirs->len; i++) {
            const char *p = tb_pool_printf(&t->pool, "%s/lib%s.%s", TB_VEC_AT(dirs, const char *, i), name, exts[e]);
            if (is_file(t, p)) return p;
        }
        for (const char *const *d = system_dirs; *d; d++) {
            const char *p = tb_pool_printf(&t->pool, "%s/lib%s.%s", *d, name, exts[e]);
            if (is_file(t, p)) return p;
        }
    }
    return NULL;
}

// The words of a target's link fragments of one role ("libraries", "libraryPath").
static void fragment_words(ix_targets *t, json_t *frags, const char *role, tb_vec *words) {
    size_t k;
    json_t *f;
    json_array_foreach(frags, k, f) {
        const char *r = json_string_value(json_object_get(f, "role"));
        const char *frag = json_string_value(json_object_get(f, "fragment"));
        if (r && frag && !strcmp(r, role)) ix_split_command(&t->pool, frag, words);
    }
}

// The libraries of a target's link line (link.commandFragments, role "libraries"; -L from
// role "libraryPath"), as files, in order, and libc.
static void add_links(ix_targets *t, const char *target, json_t *jtarget, const char *build_dir) {
    json_t *frags = json_object_get(json_object_get(jtarget, "link"), "commandFragments");
    tb_vec dirs, words;
    tb_vec_init(&dirs, sizeof(const char *), "library directories");
    tb_vec_init(&words, sizeof(const char *), "link words");
    fragment_words(t, frags, "libraryPath", &words);
    for (size_t w = 0; w < words.len; w++) {
        const char *a = TB_VEC_AT(&words, const char *, w);
        if (!strncmp(a, "-L", 2) && a[2]) *(const char **)tb_vec_push(&dirs) = ix_abspath(&t->pool, build_dir, a + 2);
    }
    words.len = 0;
    fragment_words(t, frags, "libraries", &words);
    for (size_t w = 0; w < words.len; w++) {
        const char *a = TB_VEC_AT(&words, const char *, w), *lib = NULL;
        if (!strncmp(a, "-l", 2) && a[2]) lib = find_lib(t, a + 2, &dirs);
        else if (a[0] != '-') lib = ix_abspath(&t->pool, build_dir, a);
        if (lib) *(ix_target_link *)tb_vec_push(&t->links) = (ix_target_link){target, lib};
    }
    const char *libc = find_lib(t, "c", &dirs);
    if (libc) *(ix_target_link *)tb_vec_push(&t->links) = (ix_target_link){target, libc};
    tb_vec_free(&dirs);
    tb_vec_free(&words);
}

int ix_targets_load(ix_targets *t, const char *build_dir, tb_error *err) {
    memset(t, 0, sizeof *t);
    tb_vec_init(&t->rows, sizeof(ix_target_row), "target rows");
    tb_vec_init(&t->links, sizeof(ix_target_link), "target links");
    t->reply_dir = tb_pool_printf(&t->pool, "%s/.cmake/api/v1/reply", build_dir);
    DIR *d = opendir(t->reply_dir);
    if (!d) return 1;
    char best[512] = "";
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, "index-", 6) && strlen(e->d_name) < sizeof best && strcmp(e->d_name, best) > 0)
            strcpy(best, e->d_name);
    closedir(d);
    if (!best[0]) return 1;

    int rc = -1;
    json_t *index = NULL, *model = NULL;
    tgt *all = NULL;
    size_t n = 0;
    const char *path = tb_pool_printf(&t->pool, "%s/%s", t->reply_dir, best);
    if (!(index = load(path, err))) goto done;
    const char *model_file = json_string_value(json_object_get(
        json_object_get(json_object_get(index, "reply"), "codemodel-v2"), "jsonFile"));
    if (!model_file) {
        rc = 1;  // a reply without the code model (another client's query)
        goto done;
    }
    path = tb_pool_printf(&t->pool, "%s/%s", t->reply_dir, model_file);
    if (!(model = load(path, err))) goto done;
    const char *src = json_string_value(json_object_get(json_object_get(model, "paths"), "source"));
    json_t *configs = json_object_get(model, "configurations");
    json_t *targets = json_object_get(json_array_get(configs, 0), "targets");
    if (!src || !json_is_array(targets)) {
        tb_fail(err, "%s: malformed CMake code model: no paths.source or configurations[0].targets", path);
        goto done;
    }
    t->source_dir = ix_abspath(&t->pool, NULL, src);
    const char *jbuild = json_string_value(json_object_get(json_object_get(model, "paths"), "build"));
    const char *build = jbuild ? ix_abspath(&t->pool, NULL, jbuild) : build_dir;
    n = json_array_size(targets);
    all = tb_xcalloc(n ? n : 1, sizeof *all, "targets");
    tb_strmap ids;
    tb_strmap_init(&ids);
    json_t **files = tb_xcalloc(n ? n : 1, sizeof *files, "file table");
    for (size_t i = 0; i < n; i++) {
        json_t *ref = json_array_get(targets, i);
        tb_vec_init(&all[i].sources, sizeof(const char *), "target sources");
        tb_vec_init(&all[i].deps, sizeof(int), "target dependencies");
        const char *id = json_string_value(json_object_get(ref, "id"));
        const char *name = json_string_value(json_object_get(ref, "name"));
        const char *jf = json_string_value(json_object_get(ref, "jsonFile"));
        if (!id || !name || !jf) continue;
        all[i].id = tb_pool_dup(&t->pool, id);
        all[i].name = tb_pool_dup(&t->pool, name);
        tb_strmap_put(&ids, id, (int)i);
        const char *tp = tb_pool_printf(&t->pool, "%s/%s", t->reply_dir, jf);
        if (!(files[i] = load(tp, err))) break;
    }
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        if (!all[i].id) continue;
        if (!files[i]) {
            ok = 0;
            break;
        }
        const char *type = json_string_value(json_object_get(files[i], "type"));
        all[i].type = tb_pool_dup(&t->pool, type ? type : "UNKNOWN");
        if (!strcmp(all[i].type, "EXECUTABLE") || !strcmp(all[i].type, "SHARED_LIBRARY") ||
            !strcmp(all[i].type, "MODULE_LIBRARY"))
            add_links(t, all[i].name, files[i], build);
        json_t *sources = json_object_get(files[i], "sources");
        for (size_t k = 0; k < json_array_size(sources); k++) {
            json_t *s = json_array_get(sources, k);
            const char *p = json_string_value(json_object_get(s, "path"));
            if (!p || !json_object_get(s, "compileGroupIndex")) continue;  // headers, not compiled
            *(const char **)tb_vec_push(&all[i].sources) = ix_abspath(&t->pool, t->source_dir, p);
        }
        json_t *deps = json_object_get(files[i], "dependencies");
        for (size_t k = 0; k < json_array_size(deps); k++) {
            const char *did = json_string_value(json_object_get(json_array_get(deps, k), "id"));
            int *di = did ? tb_strmap_get(&ids, did) : NULL;
            if (di) *(int *)tb_vec_push(&all[i].deps) = *di;
        }
    }
    for (size_t i = 0; i < n; i++) json_decref(files[i]);
    free(files);
    tb_strmap_free(&ids);
    if (!ok) goto done;

    unsigned char *seen = tb_xcalloc(n ? n : 1, 1, "seen flags");
    for (size_t i = 0; i < n; i++) {
        if (!all[i].id) continue;
        const char *type = all[i].type;
        int links = !strcmp(type, "EXECUTABLE") || !strcmp(type, "SHARED_LIBRARY") || !strcmp(type, "MODULE_LIBRARY");
        if (!links && strcmp(type, "STATIC_LIBRARY") && strcmp(type, "OBJECT_LIBRARY")) continue;
        size_t before = t->rows.len;
        memset(seen, 0, n);
        if (links) {
            collect(t, all, (int)i, &all[i], seen);
        } else {
            for (size_t k = 0; k < all[i].sources.len; k++) {
                ix_target_row *r = tb_vec_push(&t->rows);
                r->target = all[i].name;
                r->type = type;
                r->file = TB_VEC_AT(&all[i].sources, const char *, k);
            }
        }
        if (t->rows.len > before) t->ntargets++;
    }
    free(seen);
    rc = 0;
done:
    for (size_t i = 0; i < n; i++) {
        tb_vec_free(&all[i].sources);
        tb_vec_free(&all[i].deps);
    }
    free(all);
    json_decref(model);
    json_decref(index);
    return rc;
}

const char *ix_targets_digest(tb_pool *p, const char *targets_source, const ix_targets *targets) {
    EVP_MD_CTX *ctx = ix_digest_new();
    ix_digest_add(ctx, targets_source);
    for (size_t i = 0; targets && i < targets->rows.len; i++) {
        const ix_target_row *t = &TB_VEC_AT(&targets->rows, ix_target_row, i);
        ix_digest_add(ctx, "row");
        ix_digest_add(ctx, t->target);
        ix_digest_add(ctx, t->type);
        ix_digest_add(ctx, t->file);
    }
    for (size_t i = 0; targets && i < targets->links.len; i++) {
        const ix_target_link *l = &TB_VEC_AT(&targets->links, ix_target_link, i);
        ix_digest_add(ctx, "link");
        ix_digest_add(ctx, l->target);
        ix_digest_add(ctx, l->library);
    }
    return ix_digest_hex(p, ctx);
}


static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

const char *ix_targets_signature(tb_pool *p, const char *build_dir) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/.cmake/api/v1/reply", build_dir);
    DIR *d = opendir(dir);
    if (!d) return NULL;
    tb_vec names;
    tb_vec_init(&names, sizeof(char *), "reply files");
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') *(char **)tb_vec_push(&names) = tb_xstrdup(e->d_name, "reply file");
    closedir(d);
    if (names.len) qsort(names.items, names.len, sizeof(char *), name_cmp);
    EVP_MD_CTX *ctx = ix_digest_new();
    for (size_t i = 0; i < names.len; i++) {
        char *name = TB_VEC_AT(&names, char *, i), path[4608], num[160];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        struct stat st;
        if (stat(path, &st) == 0)
            snprintf(num, sizeof num, "%lld %lld.%09ld %lld.%09ld %llu", (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                     st.st_mtim.tv_nsec, (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec, (unsigned long long)st.st_ino);
        else
            snprintf(num, sizeof num, "-");
        ix_digest_add(ctx, name);
        ix_digest_add(ctx, num);
        free(name);
    }
    tb_vec_free(&names);
    return ix_digest_hex(p, ctx);
}

void ix_targets_free(ix_targets *t) {
    tb_strmap_free(&t->is_file);
    tb_vec_free(&t->rows);
    tb_vec_free(&t->links);
    tb_pool_free(&t->pool);
    memset(t, 0, sizeof *t);
}

int ix_targets_load_map(ix_targets *t, const char *path, const ix_compdb *db, tb_error *err) {
    memset(t, 0, sizeof *t);
    tb_vec_init(&t->rows, sizeof(ix_target_row), "target rows");
    tb_vec_init(&t->links, sizeof(ix_target_link), "target links");
    t->reply_dir = tb_pool_dup(&t->pool, path);
    json_error_t jerr;
    json_t *j = tb_json_load_file(path, 0, &jerr);
    if (!j) {
        if (jerr.line < 0)
            return tb_fail(err, "--targets %s: cannot read it: %s", path, jerr.text);
        return tb_fail(err, "--targets %s:%d:%d: malformed JSON: %s", path, jerr.line, jerr.column, jerr.text);
    }
    int rc = -1;
    if (!json_is_object(j) || json_object_size(j) == 0) {
        tb_fail(err, "--targets %s: expected an object of binaries to their sources, {\"binary\": [\"src.c\", ...]}, "
                     "got %s", path, json_is_object(j) ? "an empty object" : "another JSON value");
        goto out;
    }
    const char *slash = strrchr(path, '/');
    const char *dir = ix_abspath(&t->pool, NULL, slash ? tb_pool_dupn(&t->pool, path, (size_t)(slash - path)) : ".");
    if (slash == path) dir = "/";
    tb_strmap units;
    tb_strmap_init(&units);
    for (size_t i = 0; i < db->ntus; i++) tb_strmap_put(&units, db->tus[i].file, 1);
    const char *name;
    json_t *srcs;
    json_object_foreach(j, name, srcs) {
        if (!*name) {
            tb_fail(err, "--targets %s: a binary with an empty name", path);
            goto bad;
        }
        if (!json_is_array(srcs) || json_array_size(srcs) == 0) {
            tb_fail(err, "--targets %s: binary '%s': expected a non-empty array of source paths", path, name);
            goto bad;
        }
        const char *target = tb_pool_dup(&t->pool, name);
        size_t k;
        json_t *src;
        json_array_foreach(srcs, k, src) {
            const char *p = json_string_value(src);
            if (!p || !*p) {
                tb_fail(err, "--targets %s: binary '%s': source %zu is not a path", path, name, k + 1);
                goto bad;
            }
            const char *abs = ix_abspath(&t->pool, dir, p);
            if (!tb_strmap_get(&units, abs)) {
                tb_fail(err, "--targets %s: binary '%s': '%s' (%s) is not a unit of the compilation database %s", path,
                        name, p, abs, db->path);
                goto bad;
            }
            *(ix_target_row *)tb_vec_push(&t->rows) = (ix_target_row){target, "EXECUTABLE (targets file)", abs};
        }
        t->ntargets++;
    }
    rc = 0;
bad:
    tb_strmap_free(&units);
out:
    json_decref(j);
    return rc;
}
