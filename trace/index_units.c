// index_units.c — link units inferred from the units' symbols (index_units.h), for a build
// that does not say which sources link into which binary (a Makefile project's database,
// as bear writes it).
//
// What a linker accepts decides it: two units that both define main, or both define the
// same external symbol (a strong function definition, a variable), are never in one binary
// — nccl-tests' every test file defines the global ncclTestEngine, so all_reduce.cu and
// all_gather.cu are in different binaries although both link common.cu. Which units are in
// a binary follows the references, as an archive link pulls in members: starting from a
// unit that defines main or conflicts with another unit (a seed), every external symbol
// its units refer to (calls, functions named or assigned to fields, variables) and that
// none of them defines pulls in the one unit that defines it and does not conflict with
// the units already in; when several could (common.cu refers to ncclTestEngine, which
// eight test files define), each choice is a link unit of its own, up to CHOICES per seed.
// Link units contained in another are dropped. A unit no link unit holds (nothing refers
// to it) stays in every binary's scope, as files no CMake target claims do.
//
// A link unit is named after its units that tell it apart: its main's file and the
// conflicting units, by file name without the extension ("common+all_reduce"); where two
// names would be equal, by their paths under the database's directory.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "index_units.h"
#include "strmap.h"
#include "vec.h"

#define CHOICES 64  // link units one seed may branch into

typedef struct unit_syms {
    tb_vec defs;  // int: symbols defined
    tb_vec refs;  // int: symbols referred to and not defined here
    int has_main;
} unit_syms;

typedef struct symtab {
    size_t n, w;        // units, 64-bit words per unit set
    unit_syms *u;
    tb_strmap ids;      // usr -> symbol id (defined symbols only)
    tb_vec definers;    // of tb_vec (int units), per symbol id
    tb_vec names;       // of const char *, per symbol id
    uint64_t *conf;     // per unit: the units it conflicts with (n rows of w words)
} symtab;

#define BIT(set, i) (((set)[(i) / 64] >> ((i) % 64)) & 1u)
#define SET(set, i) ((set)[(i) / 64] |= (uint64_t)1 << ((i) % 64))

static int is_header(const char *path) {
    const char *dot = path ? strrchr(path, '.') : NULL;
    static const char *const hdr[] = {".h", ".hh", ".hpp", ".hxx", ".cuh", ".inl", ".inc", NULL};
    for (const char *const *e = hdr; dot && *e; e++)
        if (!strcmp(dot, *e)) return 1;
    return 0;
}

// What the inference reads of one unit: whether it defines main (outside a header), the
// external symbols it defines ('d': USR and name) and those it refers to ('r': calls, functions
// named or assigned to fields, variables; its own among them).
typedef ix_link_symbol_fn link_fact_fn;

static int defines_main(const ix_result *r) {
    for (size_t k = 0; k < r->funcs.len; k++) {
        const ix_func *f = &TB_VEC_AT(&r->funcs, ix_func, k);
        if (f->main_like && f->is_def && !is_header(f->file)) return 1;
    }
    return 0;
}

static void each_def(const ix_result *r, link_fact_fn *fn, void *ctx) {
    for (size_t k = 0; k < r->syms.len; k++) {
        const ix_sym *y = &TB_VEC_AT(&r->syms, ix_sym, k);
        if (y->defines) fn(ctx, 'd', y->usr, y->name);
    }
}

static void each_ref(const ix_result *r, link_fact_fn *fn, void *ctx) {
    const char *usr;
    for (size_t k = 0; k < r->calls.len; k++)
        if ((usr = TB_VEC_AT(&r->calls, ix_call, k).callee_usr)) fn(ctx, 'r', usr, NULL);
    for (size_t k = 0; k < r->callbacks.len; k++)
        if ((usr = TB_VEC_AT(&r->callbacks, ix_callback, k).target_usr)) fn(ctx, 'r', usr, NULL);
    for (size_t k = 0; k < r->ftargets.len; k++)
        if ((usr = TB_VEC_AT(&r->ftargets, ix_ftarget, k).fn_usr)) fn(ctx, 'r', usr, NULL);
    for (size_t k = 0; k < r->syms.len; k++) {
        const ix_sym *y = &TB_VEC_AT(&r->syms, ix_sym, k);
        if (!y->defines && y->usr) fn(ctx, 'r', y->usr, NULL);
    }
}

void ix_unit_link_symbols(const ix_result *r, ix_link_symbol_fn *fn, void *ctx) {
    each_def(r, fn, ctx);
    each_ref(r, fn, ctx);
}

typedef struct unit_ctx {
    symtab *s;
    size_t i;
    unsigned char *mark;  // per symbol id: already one of unit i's definitions or references
} unit_ctx;

static void add_def(void *ctx, char kind, const char *usr, const char *name) {
    unit_ctx *c = ctx;
    symtab *s = c->s;
    int *id = tb_strmap_get(&s->ids, usr);
    if (!id) {
        id = tb_strmap_put(&s->ids, usr, (int)s->definers.len);
        tb_vec *d = tb_vec_push(&s->definers);
        tb_vec_init(d, sizeof(int), "symbol definers");
        *(const char **)tb_vec_push(&s->names) = name;
    }
    tb_vec *d = &TB_VEC_AT(&s->definers, tb_vec, *id);
    if (d->len && TB_VEC_AT(d, int, d->len - 1) == (int)c->i) return;
    *(int *)tb_vec_push(d) = (int)c->i;
    *(int *)tb_vec_push(&s->u[c->i].defs) = *id;
}

static void add_ref(void *ctx, char kind, const char *usr, const char *name) {
    unit_ctx *c = ctx;
    int *id = tb_strmap_get(&c->s->ids, usr);
    if (!id || c->mark[*id]) return;
    c->mark[*id] = 1;
    *(int *)tb_vec_push(&c->s->u[c->i].refs) = *id;
}

static void conflict(symtab *s, size_t a, size_t b) {
    if (a == b) return;
    SET(s->conf + a * s->w, b);
    SET(s->conf + b * s->w, a);
}

static void symtab_build(symtab *s, const ix_compdb *db, const ix_result *results) {
    memset(s, 0, sizeof *s);
    s->n = db->ntus;
    s->w = (s->n + 63) / 64;
    s->u = tb_xcalloc(s->n ? s->n : 1, sizeof *s->u, "unit symbols");
    tb_strmap_init(&s->ids);
    tb_vec_init(&s->definers, sizeof(tb_vec), "symbol definers");
    tb_vec_init(&s->names, sizeof(const char *), "symbol names");
    for (size_t i = 0; i < s->n; i++) {
        tb_vec_init(&s->u[i].defs, sizeof(int), "unit definitions");
        tb_vec_init(&s->u[i].refs, sizeof(int), "unit references");
        s->u[i].has_main = defines_main(&results[i]);
        each_def(&results[i], add_def, &(unit_ctx){s, i, NULL});
    }
    unsigned char *mark = tb_xcalloc(s->definers.len + 1, 1, "reference marks");
    for (size_t i = 0; i < s->n; i++) {
        unit_syms *u = &s->u[i];
        for (size_t k = 0; k < u->defs.len; k++) mark[TB_VEC_AT(&u->defs, int, k)] = 1;  // its own: no reference
        each_ref(&results[i], add_ref, &(unit_ctx){s, i, mark});
        for (size_t k = 0; k < u->defs.len; k++) mark[TB_VEC_AT(&u->defs, int, k)] = 0;
        for (size_t k = 0; k < u->refs.len; k++) mark[TB_VEC_AT(&u->refs, int, k)] = 0;
    }
    free(mark);
    s->conf = tb_xcalloc(s->n * s->w + 1, sizeof *s->conf, "unit conflicts");
    for (size_t id = 0; id < s->definers.len; id++) {
        const tb_vec *d = &TB_VEC_AT(&s->definers, tb_vec, id);
        for (size_t a = 0; a < d->len; a++)
            for (size_t b = a + 1; b < d->len; b++)
                conflict(s, (size_t)TB_VEC_AT(d, int, a), (size_t)TB_VEC_AT(d, int, b));
    }
    for (size_t a = 0; a < s->n; a++)
        for (size_t b = a + 1; b < s->n && s->u[a].has_main; b++)
            if (s->u[b].has_main) conflict(s, a, b);
}

// --- whether one unit's new facts could change the inference ----------------------------
//
// The inference reads a unit's main, the symbols it defines that another unit defines too
// (conflicts) or refers to (pulls), and, in order, its references to symbols another unit
// defines (expand() branches on the first with several candidates). A symbol only this unit
// knows changes nothing: ids are numbered anew, but expand() reads no id's value.

typedef struct link_facts {
    const ix_link_lookup *look;
    tb_strmap own;  // USRs defined
    tb_strmap seen;
    tb_vec refs;    // const char *: USRs another unit defines, first use first (not the own)
} link_facts;

static void put_def(void *ctx, char kind, const char *usr, const char *name) {
    tb_strmap_put(&((link_facts *)ctx)->own, usr, 1);
}

static void put_ref(void *ctx, char kind, const char *usr, const char *name) {
    link_facts *f = ctx;
    if (tb_strmap_get(&f->seen, usr)) return;
    tb_strmap_put(&f->seen, usr, 1);
    if (!tb_strmap_get(&f->own, usr) && f->look->defined_elsewhere(f->look->ctx, usr))
        *(const char **)tb_vec_push(&f->refs) = usr;
}

static void link_facts_of(const ix_result *r, const ix_link_lookup *look, link_facts *f) {
    f->look = look;
    tb_strmap_init(&f->own);
    tb_strmap_init(&f->seen);
    tb_vec_init(&f->refs, sizeof(const char *), "unit references");
    each_def(r, put_def, f);
    each_ref(r, put_ref, f);
}

static void link_facts_free(link_facts *f) {
    tb_strmap_free(&f->own);
    tb_strmap_free(&f->seen);
    tb_vec_free(&f->refs);
}

// A symbol a defines and b does not that another unit defines or refers to.
static int def_that_counts(const link_facts *a, const link_facts *b) {
    const ix_link_lookup *l = a->look;
    for (size_t k = 0; k < a->own.cap; k++) {
        const char *usr = a->own.keys[k];
        if (usr && !tb_strmap_get(&b->own, usr) &&
            (l->defined_elsewhere(l->ctx, usr) || l->referenced_elsewhere(l->ctx, usr)))
            return 1;
    }
    return 0;
}

static int same_refs(const link_facts *a, const link_facts *b) {
    if (a->refs.len != b->refs.len) return 0;
    for (size_t k = 0; k < a->refs.len; k++)
        if (strcmp(TB_VEC_AT(&a->refs, const char *, k), TB_VEC_AT(&b->refs, const char *, k))) return 0;
    return 1;
}

const char *ix_units_link_facts_changed(const ix_result *old, const ix_result *now, const ix_link_lookup *look) {
    if (defines_main(old) != defines_main(now))
        return "the link units are inferred, and a parsed unit now defines main or no longer does";
    link_facts a, b;
    link_facts_of(old, look, &a);
    link_facts_of(now, look, &b);
    const char *why = NULL;
    if (def_that_counts(&a, &b) || def_that_counts(&b, &a))
        why = "the link units are inferred, and a parsed unit defines, or no longer defines, a symbol another unit "
              "defines or uses";
    else if (!same_refs(&a, &b))
        why = "the link units are inferred, and a parsed unit uses other symbols of other units, or in another order";
    link_facts_free(&a);
    link_facts_free(&b);
    return why;
}

static void symtab_free(symtab *s) {
    for (size_t i = 0; i < s->n; i++) {
        tb_vec_free(&s->u[i].defs);
        tb_vec_free(&s->u[i].refs);
    }
    for (size_t i = 0; i < s->definers.len; i++) tb_vec_free(&TB_VEC_AT(&s->definers, tb_vec, i));
    tb_vec_free(&s->definers);
    tb_vec_free(&s->names);
    tb_strmap_free(&s->ids);
    free(s->u);
    free(s->conf);
}

static int conflicts_any(const symtab *s, size_t i) {
    const uint64_t *row = s->conf + i * s->w;
    for (size_t k = 0; k < s->w; k++)
        if (row[k]) return 1;
    return 0;
}

// --- the closure of a seed -------------------------------------------------------------

typedef struct search {
    const symtab *s;
    tb_vec *out;   // of uint64_t * (unit sets, malloc'd)
    int emitted;   // link units of this seed
    int capped;
} search;

static void add_unit(const symtab *s, uint64_t *in, uint64_t *blocked, size_t c) {
    SET(in, c);
    const uint64_t *row = s->conf + c * s->w;
    for (size_t k = 0; k < s->w; k++) blocked[k] |= row[k];
}

// Pulls in what the units of `in` need; on a symbol several units could define, one link
// unit per choice.
static void expand(search *q, uint64_t *in, uint64_t *blocked) {
    const symtab *s = q->s;
    int choice = -1;  // the first symbol with several candidates
    for (int added = 1; added;) {
        added = 0;
        choice = -1;
        for (size_t i = 0; i < s->n; i++) {
            if (!BIT(in, i)) continue;
            const tb_vec *refs = &s->u[i].refs;
            for (size_t k = 0; k < refs->len; k++) {
                int sym = TB_VEC_AT(refs, int, k);
                const tb_vec *d = &TB_VEC_AT(&s->definers, tb_vec, sym);
                int have = 0, ncand = 0, cand = -1;
                for (size_t j = 0; j < d->len && !have; j++) {
                    size_t x = (size_t)TB_VEC_AT(d, int, j);
                    if (BIT(in, x)) have = 1;
                    else if (!BIT(blocked, x)) ncand++, cand = (int)x;
                }
                if (have || ncand == 0) continue;  // defined here, or only by units it cannot link with
                if (ncand == 1) {
                    add_unit(s, in, blocked, (size_t)cand);
                    added = 1;
                } else if (choice < 0) {
                    choice = sym;
                }
            }
        }
    }
    if (choice >= 0 && q->emitted < CHOICES) {
        const tb_vec *d = &TB_VEC_AT(&s->definers, tb_vec, choice);
        uint64_t *in2 = tb_xmalloc(2 * s->w * sizeof *in2 + 1, "unit sets"), *blocked2 = in2 + s->w;
        for (size_t j = 0; j < d->len; j++) {
            size_t x = (size_t)TB_VEC_AT(d, int, j);
            if (BIT(blocked, x)) continue;
            if (q->emitted >= CHOICES) {
                q->capped = 1;
                break;
            }
            memcpy(in2, in, s->w * sizeof *in2);
            memcpy(blocked2, blocked, s->w * sizeof *in2);
            add_unit(s, in2, blocked2, x);
            expand(q, in2, blocked2);
        }
        free(in2);
        return;
    }
    if (choice >= 0) q->capped = 1;
    uint64_t *set = tb_xmalloc(s->w * sizeof *set + 1, "unit set");
    memcpy(set, in, s->w * sizeof *set);
    *(uint64_t **)tb_vec_push(q->out) = set;
    q->emitted++;
}

static int subset(const uint64_t *a, const uint64_t *b, size_t w) {  // a ⊆ b
    for (size_t k = 0; k < w; k++)
        if (a[k] & ~b[k]) return 0;
    return 1;
}

// --- names -----------------------------------------------------------------------------

// The file's name without directory and extension; or (long) its path under dir, less the
// extension.
static const char *stem(tb_pool *p, const char *path, const char *dir, int lng) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t dl = dir ? strlen(dir) : 0;
    if (lng && dl && !strncmp(path, dir, dl) && path[dl] == '/') base = path + dl + 1;
    else if (lng) base = path;
    const char *dot = strrchr(base, '.');
    return tb_pool_dupn(p, base, dot && dot > base ? (size_t)(dot - base) : strlen(base));
}

static const char *set_name(tb_pool *p, const symtab *s, const ix_compdb *db, const uint64_t *set, int lng) {
    tb_buf b = {0};
    size_t main_unit = s->n;
    for (size_t i = 0; i < s->n && main_unit == s->n; i++)
        if (BIT(set, i) && s->u[i].has_main) main_unit = i;
    if (main_unit < s->n) tb_buf_printf(&b, "%s", stem(p, db->tus[main_unit].file, db->dir, lng));
    for (size_t i = 0; i < s->n; i++)
        if (BIT(set, i) && i != main_unit && conflicts_any(s, i))
            tb_buf_printf(&b, "%s%s", b.len ? "+" : "", stem(p, db->tus[i].file, db->dir, lng));
    const char *name = tb_pool_dup(p, b.s ? b.s : "unit");
    tb_buf_free(&b);
    return name;
}

size_t ix_units_infer(ix_targets *t, const ix_compdb *db, const ix_result *results, ix_units_report *rep) {
    memset(rep, 0, sizeof *rep);
    symtab s;
    symtab_build(&s, db, results);
    tb_vec sets;
    tb_vec_init(&sets, sizeof(uint64_t *), "link units");
    uint64_t *in = tb_xcalloc(2 * s.w + 1, sizeof *in, "unit sets"), *blocked = in + s.w;
    for (size_t i = 0; i < s.n; i++) {
        if (!s.u[i].has_main && !conflicts_any(&s, i)) continue;
        memset(in, 0, 2 * s.w * sizeof *in);
        add_unit(&s, in, blocked, i);
        search q = {&s, &sets, 0, 0};
        expand(&q, in, blocked);
        rep->capped += q.capped;
    }
    free(in);
    // keep the maximal sets, each once (the first of equal ones)
    size_t n = sets.len;
    uint64_t **all = sets.items;
    unsigned char *keep = tb_xcalloc(n + 1, 1, "kept link units");
    for (size_t i = 0; i < n; i++) {
        keep[i] = 1;
        for (size_t j = 0; j < n && keep[i]; j++) {
            if (j == i || !subset(all[i], all[j], s.w)) continue;
            if (!subset(all[j], all[i], s.w) || j < i) keep[i] = 0;  // strictly inside, or an earlier equal one
        }
    }
    const char **names = tb_xcalloc(n + 1, sizeof *names, "link unit names");
    for (size_t i = 0; i < n; i++)
        if (keep[i]) names[i] = set_name(&t->pool, &s, db, all[i], 0);
    // equal names: paths under the database's directory, then numbers
    unsigned char *clash = tb_xcalloc(n + 1, 1, "name clashes");
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n && keep[i]; j++)
            if (keep[j] && !strcmp(names[i], names[j])) clash[i] = clash[j] = 1;
    for (size_t i = 0; i < n; i++)
        if (clash[i]) names[i] = set_name(&t->pool, &s, db, all[i], 1);
    free(clash);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1, dup = 2; j < n && keep[i]; j++)
            if (keep[j] && !strcmp(names[i], names[j])) names[j] = tb_pool_printf(&t->pool, "%s#%zu", names[i], dup++);
    unsigned char *claimed = tb_xcalloc(s.n + 1, 1, "claimed units");
    for (size_t i = 0; i < n; i++) {
        if (!keep[i]) continue;
        int has_main = 0;
        for (size_t u = 0; u < s.n; u++) has_main |= BIT(all[i], u) && s.u[u].has_main;
        for (size_t u = 0; u < s.n; u++) {
            if (!BIT(all[i], u)) continue;
            claimed[u] = 1;
            ix_target_row *r = tb_vec_push(&t->rows);
            r->target = names[i];
            r->type = has_main ? "EXECUTABLE (inferred)" : "LINK_UNIT (inferred)";
            r->file = db->tus[u].file;
        }
        t->ntargets++;
        rep->units++;
    }
    for (size_t u = 0; u < s.n && rep->units; u++) rep->unclaimed += !claimed[u];
    free(claimed);
    free(names);
    free(keep);
    for (size_t i = 0; i < n; i++) free(all[i]);
    tb_vec_free(&sets);
    symtab_free(&s);
    return rep->units;
}

size_t ix_units_check(const ix_targets *t, const ix_compdb *db, const ix_result *results, FILE *f) {
    symtab s;
    symtab_build(&s, db, results);
    tb_strmap unit_of;
    tb_strmap_init(&unit_of);
    for (size_t i = 0; i < db->ntus; i++) tb_strmap_put(&unit_of, db->tus[i].file, (int)i);
    size_t bad = 0;
    for (size_t a = 0; a < t->rows.len;) {  // rows are grouped by target
        const char *name = TB_VEC_AT(&t->rows, ix_target_row, a).target;
        size_t b = a;
        int warned = 0;
        for (; b < t->rows.len && !strcmp(TB_VEC_AT(&t->rows, ix_target_row, b).target, name); b++) {
            int *ui = tb_strmap_get(&unit_of, TB_VEC_AT(&t->rows, ix_target_row, b).file);
            for (size_t c = a; ui && c < b && !warned; c++) {
                int *uj = tb_strmap_get(&unit_of, TB_VEC_AT(&t->rows, ix_target_row, c).file);
                if (!uj || !BIT(s.conf + (size_t)*ui * s.w, (size_t)*uj)) continue;
                const char *what = "main";
                const unit_syms *x = &s.u[*ui];
                for (size_t k = 0; k < x->defs.len && !strcmp(what, "main"); k++) {
                    const tb_vec *d = &TB_VEC_AT(&s.definers, tb_vec, TB_VEC_AT(&x->defs, int, k));
                    for (size_t j = 0; j < d->len; j++)
                        if (TB_VEC_AT(d, int, j) == *uj) what = TB_VEC_AT(&s.names, const char *, TB_VEC_AT(&x->defs, int, k));
                }
                fprintf(f, "tracebook index: warning: binary '%s' holds %s and %s, which both define %s: no linker "
                           "accepts that; chains in it may combine them\n",
                        name, db->tus[*uj].file, db->tus[*ui].file, what);
                warned = 1;
            }
        }
        bad += warned;
        a = b;
    }
    tb_strmap_free(&unit_of);
    symtab_free(&s);
    return bad;
}

// The link units: --targets FILE (*source "targets-file"), CMake's file API reply in build_dir,
// or none: *trc 1, to be inferred from the units' symbols (a reply that cannot be read is
// warned about). -1: --targets FILE is wrong (printed).
int ix_link_units_load(ix_targets *targets, const char *targets_file, const ix_compdb *db, const char *build_dir,
                        int *trc, const char **source, tb_error *err) {
    ix_targets_free(targets);
    *source = "cmake-file-api";
    if (targets_file) {
        if (ix_targets_load_map(targets, targets_file, db, err)) {
            fprintf(stderr, "tracebook index: %s\n", err->msg);
            return -1;
        }
        *trc = 0;
        *source = "targets-file";
    } else if ((*trc = ix_targets_load(targets, build_dir, err)) < 0) {
        fprintf(stderr, "tracebook index: warning: %s; link units are inferred instead\n", err->msg);
        const char *reply_dir = targets->reply_dir;
        tb_pool keep = targets->pool;  // reply_dir lives there
        tb_vec_free(&targets->rows);
        tb_vec_free(&targets->links);
        tb_strmap_free(&targets->is_file);
        memset(targets, 0, sizeof *targets);
        targets->pool = keep;
        targets->reply_dir = reply_dir;
        tb_vec_init(&targets->rows, sizeof(ix_target_row), "target rows");
        tb_vec_init(&targets->links, sizeof(ix_target_link), "target links");
        *trc = 1;
    }
    return 0;
}

void ix_units_warn_capped(size_t capped) {
    if (capped)
        fprintf(stderr,
                "tracebook index: warning: %zu unit%s could link with more choices of units than are kept (%d per "
                "unit): some binaries may be missing; --targets FILE names them\n",
                capped, capped == 1 ? "" : "s", CHOICES);
}

// Link units: what the build said, else inferred from the units' symbols (*source "inferred" or
// "none"); a --targets FILE checked against the units.
void ix_link_units_resolve(ix_targets *targets, const ix_compdb *db, const ix_result *results, int trc, int targets_file,
                       const ix_options *opt, const char **source) {
    if (trc > 0) {
        ix_units_report rep;
        size_t n = ix_units_infer(targets, db, results, &rep);
        *source = n ? "inferred" : "none";
        if (!opt->quiet && n)
            fprintf(stderr,
                    "tracebook index: note: no CMake file API reply in %s: %zu link unit%s inferred from the units' "
                    "symbols (no two units defining main or the same external symbol in one; --targets FILE names "
                    "them)%s\n",
                    targets->reply_dir, n, n == 1 ? "" : "s", rep.unclaimed ? "; units in none are in every one's scope" : "");
        else if (!opt->quiet)
            fprintf(stderr,
                    "tracebook index: note: no CMake file API reply in %s and nothing to tell binaries apart by (no main "
                    "or symbol defined twice): one scope\n",
                    targets->reply_dir);
        targets->capped = rep.capped;
        ix_units_warn_capped(rep.capped);
    } else if (targets_file) {
        ix_units_check(targets, db, results, stderr);
    }
}
