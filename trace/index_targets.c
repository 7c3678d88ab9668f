// index_targets.c — which translation units link into which build target, from CMake's file
// API reply (<build>/.cmake/api/v1/reply: index-*.json → codemodel-v2 → target-*.json).
//
// An executable (or shared/module library) gets its own compiled sources and those of every
// static, object or shared library it depends on, transitively; a static or object library
// gets its own sources only (it does not contain its dependencies).
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/xalloc.h"
#include "index_compdb.h"
#include "index_targets.h"
#include "strmap.h"

typedef struct tgt {
    const char *id, *name, *type;
    tb_vec sources;  // const char *, absolute
    tb_vec deps;     // int, indices
} tgt;

static json_t *load(const char *path, tb_error *err) {
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
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

int ix_targets_load(ix_targets *t, const char *build_dir, tb_error *err) {
    memset(t, 0, sizeof *t);
    tb_vec_init(&t->rows, sizeof(ix_target_row), "target rows");
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

void ix_targets_free(ix_targets *t) {
    tb_vec_free(&t->rows);
    tb_pool_free(&t->pool);
    memset(t, 0, sizeof *t);
}
