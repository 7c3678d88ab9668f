// index_visit.c — one translation unit through libclang: parse it with its own flags, then
// walk the AST of every non-system file and collect functions, call sites, functions
// assigned to function-pointer fields, and range sites (see index.c for the semantics).
#include <clang-c/Index.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/xalloc.h"
#include "index_openmp.h"
#include "index_unsaved.h"
#include "index_visit.h"
#include "index_visit_internal.h"
#include "strmap.h"

// ---------------------------------------------------------------------------------------
// Parsing

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

static double thread_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int count_errors(CXTranslationUnit tu, int *driver_errors) {
    int n = 0;
    if (driver_errors) *driver_errors = 0;
    unsigned nd = clang_getNumDiagnostics(tu);
    for (unsigned i = 0; i < nd; i++) {
        CXDiagnostic d = clang_getDiagnostic(tu, i);
        if (clang_getDiagnosticSeverity(d) >= CXDiagnostic_Error) {
            n++;
            CXFile f = NULL;
            clang_getFileLocation(clang_getDiagnosticLocation(d), &f, NULL, NULL, NULL);
            if (!f && driver_errors) (*driver_errors)++;
        }
        clang_disposeDiagnostic(d);
    }
    return n;
}

static void collect_diagnostics(ctx *c, const char *tu_file, const char *note) {
    tb_buf b = {0};
    if (note) tb_buf_printf(&b, "%s: %s\n", tu_file, note);
    unsigned nd = clang_getNumDiagnostics(c->tu);
    for (unsigned i = 0; i < nd; i++) {
        CXDiagnostic d = clang_getDiagnostic(c->tu, i);
        if (clang_getDiagnosticSeverity(d) >= CXDiagnostic_Error) {
            c->r->errors++;
            unsigned line = 0, col = 0;
            const char *file = ixv_file_loc(c, clang_getDiagnosticLocation(d), &line, &col);
            CXString msg = clang_getDiagnosticSpelling(d);
            if (file)
                tb_buf_printf(&b, "%s:%u:%u: %s\n", file, line, col, clang_getCString(msg));
            else
                tb_buf_printf(&b, "%s: %s\n", tu_file, clang_getCString(msg));
            clang_disposeString(msg);
        }
        clang_disposeDiagnostic(d);
    }
    if (b.len && b.s[b.len - 1] == '\n') b.s[--b.len] = 0;
    c->r->diagnostics = b.len ? b.s : NULL;
    if (!b.len) free(b.s);
}

static const char *cx_error_name(enum CXErrorCode e) {
    switch (e) {
    case CXError_Failure: return "libclang could not create the translation unit";
    case CXError_Crashed: return "libclang crashed while parsing it";
    case CXError_InvalidArguments: return "libclang rejected the arguments";
    case CXError_ASTReadError: return "libclang could not read the AST";
    default: return "libclang failed";
    }
}

// The unit's input files (the source, every file included, system headers too; not the
// in-memory stand-ins under IX_STUB_DIR) into r->deps, for incremental re-indexing. With
// c->omp, their OpenMP directives are scanned too (system headers' and stand-ins' as well: a
// macro of theirs may put one in the unit's code).
static void inclusion(CXFile f, CXSourceLocation *stack, unsigned depth, CXClientData d) {
    (void)stack;
    (void)depth;
    ctx *c = d;
    file_ent *e = ixv_file_of(c, f);
    if (!e || e->is_dep || !e->path) return;
    e->is_dep = 1;
    if (strncmp(e->path, IX_STUB_DIR "/", sizeof IX_STUB_DIR)) ((ix_dep *)tb_vec_push(&c->r->deps))->path = e->path;
    // libclang finds a file's text by a search through every file of the unit: only once a run
    if (c->omp && !ix_omp_files_directives(c->omp_files, c->omp, e->path, NULL, 0)) {
        if (!e->contents) e->contents = clang_getFileContents(c->tu, f, &e->size);
        if (e->contents) ix_omp_files_directives(c->omp_files, c->omp, e->path, e->contents, e->size);
        else if (!c->omp->why) c->omp->why = tb_pool_printf(&c->omp->pool, "%s: its text cannot be read", e->path);
    }
}

static void record_inclusions(ctx *c) { clang_getInclusions(c->tu, inclusion, c); }

// After record_inclusions with c->omp: whether a file or the command line defines a macro
// the directives name.
static void scan_macros(ctx *c, const char *const *args, int nargs) {
    ix_omp_scan *s = c->omp;
    for (size_t i = 0; i < c->fcap && s->directives && !s->why; i++) {
        file_ent *e = &c->files[i];
        if (!e->file || !e->is_dep) continue;
        if (ix_omp_files_macros(c->omp_files, s, e->path, NULL, 0)) continue;
        if (!e->contents) e->contents = clang_getFileContents(c->tu, e->file, &e->size);
        if (e->contents) ix_omp_files_macros(c->omp_files, s, e->path, e->contents, e->size);
        else s->why = tb_pool_printf(&s->pool, "%s: its text cannot be read", e->path);
    }
    if (s->directives) ix_omp_scan_command_line(s, args, nargs);
}

static void add_note(ix_result *r, const char *note) {
    tb_buf b = {0};
    tb_buf_printf(&b, "%s%s%s", r->diagnostics ? r->diagnostics : "", r->diagnostics ? "\n" : "", note);
    free(r->diagnostics);
    r->diagnostics = b.s;
}

// The CXFile entries, OpenMP passes' state and declarations noted belong to one translation
// unit: forgotten before another is walked.
static void forget_unit(ctx *c) {
    tb_u64map_clear(&c->noted);
    ixv_roles_clear(&c->roles);
    free(c->files);
    c->files = NULL;
    c->fcap = c->flen = 0;
}

static void walk(ctx *c) {
    double t = thread_cpu();
    clang_visitChildren(clang_getTranslationUnitCursor(c->tu), ixv_top_visit, c);
    c->r->walk_cpu += thread_cpu() - t;
}

static void dispose(ctx *c) {
    double t = thread_cpu();
    clang_disposeTranslationUnit(c->tu);
    c->tu = NULL;
    c->r->dispose_cpu += thread_cpu() - t;
}

// One of the unit's parses, its time counted.
static enum CXErrorCode parse(ctx *c, void *cxindex, const ix_tu *tu, const char *const *args, int nargs,
                              struct CXUnsavedFile *unsaved, unsigned nunsaved, unsigned flags,
                              CXTranslationUnit *out) {
    struct timespec tp;
    clock_gettime(CLOCK_MONOTONIC, &tp);
    const double cpu = thread_cpu();
    enum CXErrorCode e =
        clang_parseTranslationUnit2((CXIndex)cxindex, tu->file, args, nargs, unsaved, nunsaved, flags, out);
    c->r->parse_cpu += thread_cpu() - cpu;
    c->r->parse_seconds += seconds_since(&tp);
    return e;
}

// The second pass (see ctx) over `plain`, the unit parsed without -fopenmp (the pragmas
// ignored, _OPENMP defined as -fopenmp defines it, so the preprocessor sees the same code):
// only what is inside the captured statements is recorded. Disposes of it.
static void walk_captured(ctx *c, CXTranslationUnit plain) {
    forget_unit(c);  // the first unit's CXFile and declaration pointers mean nothing in the second
    c->tu = plain;
    c->captured_pass = 1;
    walk(c);
    dispose(c);
}

// Whether libclang parses the unit as C: the last -x names c, or there is none and the source
// ends in .c (the compiler's name is not on the command line: a .c file g++ compiles is
// parsed as C, as libclang sees it).
static int parsed_as_c(const ix_tu *tu, const char *const *args, int nargs) {
    const char *lang = NULL;
    for (int i = 0; i < nargs; i++) {
        if (!strcmp(args[i], "-x") && i + 1 < nargs) lang = args[++i];
        else if (!strncmp(args[i], "-x", 2) && args[i][2]) lang = args[i] + 2;
    }
    if (lang) return !strcmp(lang, "c");
    size_t n = strlen(tu->file);
    return !tu->cuda && n > 2 && !strcmp(tu->file + n - 2, ".c");
}

// Every parse's options: errors in one function do not stop the parse; warnings are not kept.
static const unsigned parse_flags = CXTranslationUnit_KeepGoing | CXTranslationUnit_IgnoreNonErrorsFromIncludedFiles;

// A C unit compiled with -fopenmp was parsed without it (c->tu): when its directives may hold
// a call only the parse with -fopenmp shows (index_openmp.h), that parse becomes the first
// pass and c->tu the second's (*plain); else c->tu is the only pass. Its inputs are recorded.
// 0, or -1 when the parse with -fopenmp was needed and failed (c->tu stays the only pass).
static int openmp_once_or_twice(ctx *c, void *cxindex, const ix_tu *tu, struct CXUnsavedFile *unsaved,
                                unsigned nunsaved, CXTranslationUnit *plain) {
    int rc = 0;
    ix_omp_scan scan = {0};
    c->omp = &scan;
    double t = thread_cpu();
    record_inclusions(c);
    scan_macros(c, tu->args, tu->nargs);
    c->r->inclusions_cpu += thread_cpu() - t;
    c->omp = NULL;
    if (!scan.why) {
        c->r->openmp = scan.directives ? "OpenMP directives: one parse, without -fopenmp" : NULL;
    } else {
        CXTranslationUnit with = NULL;
        int driver_errors = 0;  // a flag libclang rejects with -fopenmp (-fopenmp=bogus): no unit
        // as a unit's first parse: its command line, else the reduced one (which keeps -fopenmp)
        for (int reduced = 0; reduced < 2 && !with; reduced++) {
            const char *const *a = reduced ? tu->fallback : tu->args;
            int n = reduced ? tu->nfallback : tu->nargs;
            if (reduced && !ix_openmp_on(a, n)) break;  // without -fopenmp it shows no clause
            if (parse(c, cxindex, tu, a, n, unsaved, nunsaved, parse_flags, &with) == CXError_Success)
                count_errors(with, &driver_errors);
            if (with && driver_errors) {
                clang_disposeTranslationUnit(with);
                with = NULL;
            }
        }
        if (with) {
            *plain = c->tu;
            forget_unit(c);
            c->tu = with;
            c->r->openmp = tb_pool_printf(&c->r->pool, "OpenMP directives: parsed with and without -fopenmp: %s",
                                          scan.why);
        } else {
            c->r->openmp = "OpenMP directives: one parse, without -fopenmp (the parse with it failed)";
            rc = -1;
        }
    }
    ix_omp_scan_free(&scan);
    return rc;
}

void ix_index_tu(void *cxindex, const ix_tu *tu, const ix_options *opt, ix_omp_files *omp_files, ix_result *r) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ix_result_init(r);

    ctx c = {.opt = opt, .r = r, .omp_files = omp_files};
    tb_vec_init(&c.seen_refs, sizeof(CXSourceLocation), "seen references");
    tb_vec_init(&c.captured, sizeof(ix_extent), "OpenMP captured statements");
    if (access(tu->file, R_OK) != 0) {
        r->status = "failed";
        r->errors = 1;
        tb_buf b = {0};
        tb_buf_printf(&b, "%s: cannot read the source file: %s", tu->file, strerror(errno));
        r->diagnostics = b.s;
        return;
    }
    tb_strmap_init(&c.funcs);
    tb_strmap_init(&c.syms);
    c.source = tu->file;
    struct CXUnsavedFile unsaved[IX_UNSAVED_MAX];
    unsigned nunsaved = ix_unit_unsaved(tu, unsaved, &r->pool);
    // A C unit compiled with -fopenmp is parsed without it first (index_openmp.h).
    tb_vec plain_args;
    tb_vec_init(&plain_args, sizeof(const char *), "clang arguments");
    int once = parsed_as_c(tu, tu->args, tu->nargs) && ix_openmp_plain_args(&r->pool, tu->args, tu->nargs, &plain_args);
    const char *const *args = once ? (const char *const *)plain_args.items : tu->args;
    int nargs = once ? (int)plain_args.len : tu->nargs;
    enum CXErrorCode e = parse(&c, cxindex, tu, args, nargs, unsaved, nunsaved, parse_flags, &c.tu);
    const char *note = NULL;
    int driver_errors = 0;
    if (e == CXError_Success) count_errors(c.tu, &driver_errors);
    if (e != CXError_Success || driver_errors) {
        // Flags libclang does not take (a GCC-only option, say): try the reduced command line.
        CXTranslationUnit tu2 = NULL;
        enum CXErrorCode e2 = parse(&c, cxindex, tu, tu->fallback, tu->nfallback, unsaved, nunsaved, parse_flags, &tu2);
        int e2_errors = e2 == CXError_Success ? count_errors(tu2, NULL) : 0;
        if (e2 == CXError_Success && (e != CXError_Success || e2_errors < count_errors(c.tu, NULL))) {
            if (c.tu) clang_disposeTranslationUnit(c.tu);
            c.tu = tu2;
            e = e2;
            r->reduced = 1;
            note = "note: parsed with a reduced command line (-D -U -I -include -std -x) after the full one "
                   "was rejected";
        } else if (tu2) {
            clang_disposeTranslationUnit(tu2);
        }
    }
    if (e != CXError_Success) {
        r->status = "failed";
        r->errors = 1;
        tb_buf b = {0};
        tb_buf_printf(&b, "%s: %s (error %d)", tu->file, cx_error_name(e), (int)e);
        r->diagnostics = b.s;
    } else {
        c.c_unit = r->reduced ? parsed_as_c(tu, tu->fallback, tu->nfallback) : parsed_as_c(tu, tu->args, tu->nargs);
        CXTranslationUnit plain = NULL;  // the second pass's unit, once parsed without -fopenmp
        once = once && !r->reduced;
        int with_failed = once && openmp_once_or_twice(&c, cxindex, tu, unsaved, nunsaved, &plain);
        collect_diagnostics(&c, tu->file, note);
        if (with_failed) {
            r->errors++;
            tb_buf b = {0};
            tb_buf_printf(&b, "%s: the parse with -fopenmp for the calls in OpenMP directives' clauses failed; "
                              "the unit was parsed without it only: those calls are missing",
                          tu->file);
            add_note(r, b.s);
            tb_buf_free(&b);
        }
        r->status = r->errors ? "partial" : "ok";
        walk(&c);
        if (!once) {
            double t = thread_cpu();
            record_inclusions(&c);
            r->inclusions_cpu += thread_cpu() - t;
        }
        dispose(&c);
        if (c.captured.len && !once) {  // the unit's first parse was with -fopenmp: parse it without
            r->openmp = "OpenMP directives: parsed with and without -fopenmp";
            const char *const *a = r->reduced ? tu->fallback : tu->args;
            int n = r->reduced ? tu->nfallback : tu->nargs;
            plain_args.len = 0;
            (void)ix_openmp_plain_args(&r->pool, a, n, &plain_args);
            e = parse(&c, cxindex, tu, (const char *const *)plain_args.items, (int)plain_args.len, unsaved, nunsaved,
                      parse_flags, &plain);
            if (e != CXError_Success) {
                r->errors++;
                r->status = "partial";
                tb_buf b = {0};
                tb_buf_printf(&b, "%s: the parse without -fopenmp for the code inside OpenMP directives failed (%s); "
                                  "the calls there are missing",
                              tu->file, cx_error_name(e));
                add_note(r, b.s);
                tb_buf_free(&b);
            }
        }
        if (plain && c.captured.len) walk_captured(&c, plain);
        else if (plain) clang_disposeTranslationUnit(plain);
    }
    tb_vec_free(&plain_args);
    tb_strmap_free(&c.funcs);
    tb_strmap_free(&c.syms);
    tb_vec_free(&c.captured);
    free(c.files);
    tb_vec_free(&c.seen_refs);
    ixv_roles_free(&c.roles);
    tb_u64map_free(&c.noted);
    r->seconds = seconds_since(&t0);
}

int ix_parse_only(void *cxindex, const ix_tu *tu, double *parse_cpu, double *dispose_cpu) {
    CXTranslationUnit cx = NULL;
    tb_pool pool = {0};
    struct CXUnsavedFile unsaved[IX_UNSAVED_MAX];
    unsigned nunsaved = ix_unit_unsaved(tu, unsaved, &pool);
    double t = thread_cpu();
    enum CXErrorCode e = clang_parseTranslationUnit2((CXIndex)cxindex, tu->file, tu->args, tu->nargs, unsaved,
                                                     nunsaved, parse_flags, &cx);
    *parse_cpu += thread_cpu() - t;
    tb_pool_free(&pool);
    t = thread_cpu();
    if (cx) clang_disposeTranslationUnit(cx);
    *dispose_cpu += thread_cpu() - t;
    if (e == CXError_Success) return 0;
    fprintf(stderr, "tracebook index --parse-only: %s: %s (error %d)\n", tu->file, cx_error_name(e), (int)e);
    return -1;
}

void ix_result_init(ix_result *r) {
    memset(r, 0, sizeof *r);
    tb_vec_init(&r->funcs, sizeof(ix_func), "unit functions");
    tb_vec_init(&r->calls, sizeof(ix_call), "unit calls");
    tb_vec_init(&r->ftargets, sizeof(ix_ftarget), "unit field targets");
    tb_vec_init(&r->ranges, sizeof(ix_range), "unit range sites");
    tb_vec_init(&r->callbacks, sizeof(ix_callback), "unit callbacks");
    tb_vec_init(&r->deps, sizeof(ix_dep), "unit inputs");
    tb_vec_init(&r->syms, sizeof(ix_sym), "unit symbols");
}

void ix_result_free(ix_result *r) {
    tb_vec_free(&r->funcs);
    tb_vec_free(&r->calls);
    tb_vec_free(&r->ftargets);
    tb_vec_free(&r->ranges);
    tb_vec_free(&r->callbacks);
    tb_vec_free(&r->deps);
    tb_vec_free(&r->syms);
    free(r->diagnostics);
    tb_pool_free(&r->pool);
    memset(r, 0, sizeof *r);
}
