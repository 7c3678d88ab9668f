// test_unit_rows.c — a unit's rows of a packed tu_* table, a file's units of input_units and a
// unit's command line of tu_inputs (trace/index_unit_rows.h): every column comes back as it went
// in (NULL and empty texts apart, the largest numbers, files by id), and a record that is cut
// short, has bytes left over or a value out of range is refused.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index_unit_rows.h"
#include "tb_test.h"

static const char *const paths[] = {NULL, "/src/a.c", "/src/a.h", "/usr/include/stdio.h"};

static long long id_of(void *ctx, const char *path) {
    int *asked = ctx;
    (*asked)++;
    for (long long i = 1; i < 4; i++)
        if (!strcmp(paths[i], path)) return i;
    return 0;
}

static const char *path_of(void *ctx, long long id) {
    (void)ctx;
    return id > 0 && id < 4 ? paths[id] : NULL;
}

static int same(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

// A unit's facts with every column's edge values.
static void fill(ix_result *r) {
    ix_result_init(r);
    ix_func *f = tb_vec_push(&r->funcs);
    *f = (ix_func){.usr = "c:@F@f", .name = "f", .file = "/src/a.h", .line = 3, .col = 5, .end_line = UINT_MAX,
                   .end_col = 1, .is_static = 1, .is_def = 1, .main_like = 0};
    f = tb_vec_push(&r->funcs);
    *f = (ix_func){.usr = "c:a.c@F@main", .name = "main", .file = NULL, .main_like = 1};
    ix_call *c = tb_vec_push(&r->calls);
    *c = (ix_call){.caller = 0, .callee_usr = "c:@F@f", .callee_name = "f", .file = "/src/a.c", .line = 1, .col = 2};
    c = tb_vec_push(&r->calls);
    *c = (ix_call){.caller = INT_MAX, .callee_usr = NULL, .callee_name = "", .field = "tb_comm.all_reduce",
                   .file = "/usr/include/stdio.h", .line = UINT_MAX, .col = 128, .in_macro = "TB_RANGE_PUSH",
                   .resolution = "candidates", .candidates = "c:@F@g\nc:@F@h\xc3\xa9"};
    c = tb_vec_push(&r->calls);
    *c = (ix_call){.caller = 1, .callee_usr = "c:@F@g", .callee_name = "g", .file = NULL, .line = 0, .col = 0,
                   .resolution = "name"};
    ix_callback *b = tb_vec_push(&r->callbacks);
    *b = (ix_callback){.caller = 2, .target_usr = "c:@F@cb", .passed_to = "qsort", .file = "/src/a.h", .line = 7,
                       .col = 300};
    b = tb_vec_push(&r->callbacks);
    *b = (ix_callback){.caller = 0, .target_usr = "c:@F@cb2", .passed_to = NULL, .file = NULL};
    ix_range *g = tb_vec_push(&r->ranges);
    *g = (ix_range){.caller = 3, .kind = "push", .name = "forward %d", .file = "/src/a.c", .line = 12, .col = 5};
    ix_sym *y = tb_vec_push(&r->syms);
    *y = (ix_sym){.usr = "c:@shared_count", .name = "shared_count", .kind = 'v', .defines = 0};
    y = tb_vec_push(&r->syms);
    *y = (ix_sym){.usr = "c:@F@lib_fn", .name = "lib_fn", .kind = 'f', .defines = 1};
    ix_dep *d = tb_vec_push(&r->deps);
    *d = (ix_dep){.path = "/src/a.c", .hash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"};
    d = tb_vec_push(&r->deps);
    *d = (ix_dep){.path = "/src/gone.h", .hash = NULL};  // (written as '-': unreadable)
    d = tb_vec_push(&r->deps);
    *d = (ix_dep){.path = "", .hash = "~"};
}

static tb_buf pack(const ix_result *r, ix_unit_table t, size_t *rows, int *asked) {
    tb_buf b = {0};
    *rows = ix_rows_pack(&b, r, t, id_of, asked);
    return b;
}

TB_TEST(every_column_comes_back_as_it_went_in) {
    ix_result in, out;
    fill(&in);
    ix_result_init(&out);
    static const ix_unit_table tables[] = {IX_TU_FUNCTIONS, IX_TU_CALLS, IX_TU_CALLBACKS, IX_TU_RANGE_SITES,
                                           IX_TU_SYMBOLS, IX_TU_DEPS};
    static const size_t counts[] = {2, 3, 2, 1, 2, 3};
    static const int files_asked[] = {1, 2, 1, 1, 0, 0};  // one per row that names a file, in row order
    for (size_t k = 0; k < 6; k++) {
        size_t rows;
        int asked = 0;
        tb_buf b = pack(&in, tables[k], &rows, &asked);
        TB_CHECK(ix_rows_packed(tables[k]), "table %zu is packed", k);
        TB_CHECK(rows == counts[k] && b.len > 0, "table %zu: %zu rows packed in %zu bytes", k, rows, b.len);
        TB_CHECK(asked == files_asked[k], "table %zu: %d files asked for", k, asked);
        TB_CHECK(ix_rows_unpack(b.s, b.len, tables[k], &out, path_of, NULL) == 0, "table %zu unpacks", k);
        tb_buf_free(&b);
    }
    TB_REQUIRE(out.funcs.len == 2 && out.calls.len == 3 && out.callbacks.len == 2 && out.ranges.len == 1 &&
                   out.syms.len == 2 && out.deps.len == 3,
               "rows back: %zu functions, %zu calls, %zu callbacks, %zu ranges, %zu symbols, %zu inputs", out.funcs.len,
               out.calls.len, out.callbacks.len, out.ranges.len, out.syms.len, out.deps.len);
    for (size_t i = 0; i < 3; i++) {  // (paths are texts: not every input has a files row)
        const ix_dep *a = &TB_VEC_AT(&in.deps, ix_dep, i), *d = &TB_VEC_AT(&out.deps, ix_dep, i);
        TB_CHECK(same(a->path, d->path) && same(a->hash ? a->hash : "-", d->hash), "input %zu differs: %s %s", i,
                 d->path ? d->path : "NULL", d->hash ? d->hash : "NULL");
    }
    for (size_t i = 0; i < 2; i++) {
        const ix_func *a = &TB_VEC_AT(&in.funcs, ix_func, i), *f = &TB_VEC_AT(&out.funcs, ix_func, i);
        TB_CHECK(same(a->usr, f->usr) && same(a->name, f->name) && same(a->file, f->file) && a->line == f->line &&
                     a->col == f->col && a->end_line == f->end_line && a->end_col == f->end_col &&
                     a->is_static == f->is_static && a->is_def == f->is_def && a->main_like == f->main_like,
                 "function %zu differs: %s line %u end %u", i, f->usr ? f->usr : "NULL", f->line, f->end_line);
    }
    for (size_t i = 0; i < 3; i++) {
        const ix_call *a = &TB_VEC_AT(&in.calls, ix_call, i), *c = &TB_VEC_AT(&out.calls, ix_call, i);
        TB_CHECK(a->caller == c->caller && same(a->callee_usr, c->callee_usr) &&
                     same(a->callee_name, c->callee_name) && same(a->field, c->field) && same(a->file, c->file) &&
                     a->line == c->line && a->col == c->col && same(a->in_macro, c->in_macro) &&
                     same(a->resolution, c->resolution) && same(a->candidates, c->candidates),
                 "call %zu differs: caller %d, usr %s, name '%s', line %u", i, c->caller,
                 c->callee_usr ? c->callee_usr : "NULL", c->callee_name ? c->callee_name : "NULL", c->line);
    }
    TB_CHECK(TB_VEC_AT(&out.calls, ix_call, 1).callee_name && !TB_VEC_AT(&out.calls, ix_call, 1).callee_usr,
             "an empty text stays empty and a NULL stays NULL");
    for (size_t i = 0; i < 2; i++) {
        const ix_callback *a = &TB_VEC_AT(&in.callbacks, ix_callback, i);
        const ix_callback *b = &TB_VEC_AT(&out.callbacks, ix_callback, i);
        TB_CHECK(a->caller == b->caller && same(a->target_usr, b->target_usr) && same(a->passed_to, b->passed_to) &&
                     same(a->file, b->file) && a->line == b->line && a->col == b->col,
                 "callback %zu differs", i);
        const ix_sym *x = &TB_VEC_AT(&in.syms, ix_sym, i), *y = &TB_VEC_AT(&out.syms, ix_sym, i);
        TB_CHECK(same(x->usr, y->usr) && same(x->name, y->name) && x->kind == y->kind && x->defines == y->defines,
                 "symbol %zu differs: %s kind %c defines %d", i, y->usr ? y->usr : "NULL", y->kind, y->defines);
    }
    const ix_range *a = &TB_VEC_AT(&in.ranges, ix_range, 0), *g = &TB_VEC_AT(&out.ranges, ix_range, 0);
    TB_CHECK(a->caller == g->caller && same(a->kind, g->kind) && same(a->name, g->name) && same(a->file, g->file) &&
                 a->line == g->line && a->col == g->col,
             "range site differs");
    in.calls.len = in.syms.len = 0;  // (the vectors only: their texts are literals)
    size_t rows;
    int asked = 0;
    tb_buf none = pack(&in, IX_TU_CALLS, &rows, &asked);
    TB_CHECK(rows == 0 && none.len == 0, "a unit without calls packs nothing: %zu rows, %zu bytes", rows, none.len);
    TB_CHECK(!ix_rows_packed(IX_TU_INPUTS) && !ix_rows_packed(IX_TU_FIELD_TARGETS),
             "a unit's inputs row and field targets stay rows");
    tb_buf_free(&none);
    ix_result_free(&in);
    ix_result_free(&out);
}

// Whether unpacking bytes as table t is refused (and leaves no more than what it had read).
static int refused(const void *bytes, size_t n, ix_unit_table t) {
    ix_result r;
    ix_result_init(&r);
    int rc = ix_rows_unpack(bytes, n, t, &r, path_of, NULL);
    ix_result_free(&r);
    return rc == -1;
}

TB_TEST(a_record_cut_short_or_out_of_range_is_refused) {
    ix_result in;
    fill(&in);
    static const ix_unit_table tables[] = {IX_TU_FUNCTIONS, IX_TU_CALLS, IX_TU_CALLBACKS, IX_TU_RANGE_SITES,
                                           IX_TU_SYMBOLS, IX_TU_DEPS};
    for (size_t k = 0; k < 6; k++) {
        size_t rows;
        int asked = 0;
        tb_buf b = pack(&in, tables[k], &rows, &asked);
        size_t cut = 0;
        for (size_t n = 0; n < b.len; n++) cut += refused(b.s, n, tables[k]);
        TB_CHECK(cut == b.len, "table %zu: %zu of the %zu shorter records refused", k, cut, b.len);
        tb_buf_add(&b, "\x00", 1);
        TB_CHECK(refused(b.s, b.len, tables[k]), "table %zu: a byte left over is refused", k);
        tb_buf_free(&b);
    }
    // One call whose caller is past INT_MAX (2^31: 80 80 80 80 08).
    const char big_caller[] = "\x01\x80\x80\x80\x80\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00";
    TB_CHECK(refused(big_caller, sizeof big_caller - 1, IX_TU_CALLS), "a caller past INT_MAX is refused");
    // The same call with caller 0 unpacks (the bytes are otherwise a valid record).
    const char ok_call[] = "\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";
    ix_result r;
    ix_result_init(&r);
    TB_CHECK(ix_rows_unpack(ok_call, sizeof ok_call - 1, IX_TU_CALLS, &r, path_of, NULL) == 0 && r.calls.len == 1,
             "a call of NULLs and zeros unpacks");
    ix_result_free(&r);
    const char count_past_end[] = "\x7f\x00";
    TB_CHECK(refused(count_past_end, 2, IX_TU_CALLS), "a row count past the record's end is refused");
    TB_CHECK(refused(NULL, 0, IX_TU_CALLS), "no record (an empty BLOB) is refused");
    const char text_past_end[] = "\x01\x05\x10" "abc";  // one symbol whose usr says 15 bytes, 3 there
    TB_CHECK(refused(text_past_end, sizeof text_past_end - 1, IX_TU_SYMBOLS), "a text past the end is refused");
    const char bad_kind[] = "\x01\x02u\x02n\x78\x00";  // kind 'x'
    TB_CHECK(refused(bad_kind, sizeof bad_kind - 1, IX_TU_SYMBOLS), "a symbol kind other than f or v is refused");
    const char good_kind[] = "\x01\x02u\x02n\x76\x01";  // kind 'v', defines 1
    ix_result_init(&r);
    TB_CHECK(ix_rows_unpack(good_kind, sizeof good_kind - 1, IX_TU_SYMBOLS, &r, path_of, NULL) == 0 &&
                 r.syms.len == 1 && TB_VEC_AT(&r.syms, ix_sym, 0).kind == 'v',
             "the same symbol with kind v unpacks");
    ix_result_free(&r);
    const char overlong[] = "\x01\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01";
    TB_CHECK(refused(overlong, sizeof overlong - 1, IX_TU_CALLS), "a varint longer than 64 bits is refused");
    TB_CHECK(refused(ok_call, sizeof ok_call - 1, IX_TU_FIELD_TARGETS), "a table that is not packed is refused");
    const char no_hash[] = "\x01\x02p\x00";  // one input whose hash is NULL
    TB_CHECK(refused(no_hash, sizeof no_hash - 1, IX_TU_DEPS), "an input without a hash is refused");
    const char flag_two[] = "\x01\x02u\x02n\x00\x00\x00\x00\x00\x02\x00\x00";  // is_static 2
    TB_CHECK(refused(flag_two, sizeof flag_two - 1, IX_TU_FUNCTIONS), "a flag other than 0 or 1 is refused");
    const char no_usr[] = "\x01\x00\x02n\x00\x00\x00\x00\x00\x00\x00\x00";
    TB_CHECK(refused(no_usr, sizeof no_usr - 1, IX_TU_FUNCTIONS), "a function without a USR is refused");
    ix_result_free(&in);
}

// A file's units: ascending ids back as they went in; a record cut short, with a byte left over,
// no unit, an id 0, or an id not above the one before it is refused.
TB_TEST(a_files_units_come_back_ascending_and_anything_else_is_refused) {
    const long long ids[] = {1, 2, 300, LLONG_MAX};
    tb_buf b = {0};
    ix_units_pack(&b, ids, 4);
    tb_vec out;
    tb_vec_init(&out, sizeof(long long), "units");
    TB_CHECK(ix_units_unpack(b.s, b.len, &out) == 0 && out.len == 4 && TB_VEC_AT(&out, long long, 2) == 300 &&
                 TB_VEC_AT(&out, long long, 3) == LLONG_MAX,
             "4 units back: %zu", out.len);
    size_t cut = 0;
    for (size_t n = 0; n < b.len; n++) {
        out.len = 0;
        cut += ix_units_unpack(b.s, n, &out) == -1;
    }
    TB_CHECK(cut == b.len, "%zu of the %zu shorter records refused", cut, b.len);
    tb_buf_add(&b, "\x01", 1);
    out.len = 0;
    TB_CHECK(ix_units_unpack(b.s, b.len, &out) == -1, "a byte left over is refused");
    static const struct { const char *bytes; size_t n; const char *what; } bad[] = {
        {"\x00", 1, "no unit"}, {"\x01\x00", 2, "unit 0"}, {"\x02\x05\x05", 3, "a unit twice"},
        {"\x02\x05\x04", 3, "units descending"}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        out.len = 0;
        TB_CHECK(ix_units_unpack(bad[k].bytes, bad[k].n, &out) == -1, "%s is refused", bad[k].what);
    }
    tb_vec_free(&out);
    tb_buf_free(&b);
}

// A unit's command line: directory, CUDA mode, every argument (an empty one too) and the
// fallback's back as they went in, NULL-terminated; a record cut short, with a byte left over, a
// CUDA mode other than 0 or 1 or no directory is refused.
TB_TEST(a_units_command_line_comes_back_word_for_word) {
    const char *args[] = {"-DX=\"a b\"", "", "-I/src/include", "-working-directory=/src", NULL};
    const char *fallback[] = {"-DX=\"a b\"", "-I/src/include", NULL};
    ix_tu in = {.file = "/src/a.c", .directory = "/src", .args = args, .nargs = 4, .fallback = fallback,
                .nfallback = 2, .cuda = 1};
    tb_buf b = {0};
    ix_command_pack(&b, &in);
    tb_pool pool = {0};
    ix_tu out = {.file = "/src/a.c"};
    TB_REQUIRE(ix_command_unpack(b.s, b.len, &pool, &out) == 0, "the record does not unpack");
    TB_CHECK(!strcmp(out.directory, "/src") && out.cuda == 1 && out.nargs == 4 && out.nfallback == 2 &&
                 !out.args[4] && !out.fallback[2],
             "directory %s, cuda %d, %d arguments, %d fallback", out.directory, out.cuda, out.nargs, out.nfallback);
    for (int i = 0; i < 4 && out.nargs == 4; i++)
        TB_CHECK(!strcmp(out.args[i], args[i]), "argument %d: %s", i, out.args[i]);
    for (int i = 0; i < 2 && out.nfallback == 2; i++)
        TB_CHECK(!strcmp(out.fallback[i], fallback[i]), "fallback %d: %s", i, out.fallback[i]);
    size_t cut = 0;
    for (size_t n = 0; n < b.len; n++) cut += ix_command_unpack(b.s, n, &pool, &out) == -1;
    TB_CHECK(cut == b.len, "%zu of the %zu shorter records refused", cut, b.len);
    tb_buf_add(&b, "\x00", 1);
    TB_CHECK(ix_command_unpack(b.s, b.len, &pool, &out) == -1, "a byte left over is refused");
    static const struct { const char *bytes; size_t n; const char *what; } bad[] = {
        {"\x02/\x02\x00\x00", 5, "CUDA mode 2"}, {"\x00\x00\x00\x00", 4, "no directory"},
        {"\x02/\x00\x01\x00\x00", 6, "a NULL argument"}, {"\x02/\x00\x7f\x01", 5, "more arguments than bytes"}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        TB_CHECK(ix_command_unpack(bad[k].bytes, bad[k].n, &pool, &out) == -1, "%s is refused", bad[k].what);
    // the well-formed minimum: a directory, not CUDA, no argument, no fallback
    TB_CHECK(ix_command_unpack("\x02/\x00\x00\x00", 5, &pool, &out) == 0 && out.nargs == 0 && !out.args[0],
             "an empty command line is a command line");
    tb_pool_free(&pool);
    tb_buf_free(&b);
}

int main(void) {
    TB_RUN(every_column_comes_back_as_it_went_in);
    TB_RUN(a_record_cut_short_or_out_of_range_is_refused);
    TB_RUN(a_files_units_come_back_ascending_and_anything_else_is_refused);
    TB_RUN(a_units_command_line_comes_back_word_for_word);
    return tb_test_summary();
}
