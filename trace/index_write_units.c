// index_write_units.c — the per-unit tables of the index (the tu_* tables of index_db.h): each
// parsed unit's own facts, unmerged, and its input files with their hashes, written so that
// the next re-index can reuse a unit without parsing it (index_reuse.c) and update the merged
// tables by the difference of a unit's rows (index_update.c).
#include <string.h>

#include "index_db.h"
#include "index_unit_keys.h"
#include "index_write_internal.h"

const char *const ix_unit_table_names[IX_TU_TABLES] = {"tu_inputs",    "tu_deps",          "tu_functions",
                                                      "tu_calls",     "tu_field_targets", "tu_callbacks",
                                                      "tu_range_sites", "tu_symbols"};

static int write_inputs(writer *w, long long tu_id, const ix_result *r) {
    sqlite3_bind_int64(w->u_inputs, 1, tu_id);
    ixw_bind_text(w->u_inputs, 2, r->inputs ? r->inputs : "");
    sqlite3_bind_int(w->u_inputs, 3, r->reduced);
    int kept = r->deps.len > 0;
    for (size_t i = 0; i < r->deps.len && kept; i++) {
        const char *h = TB_VEC_AT(&r->deps, ix_dep, i).hash;
        kept = h && strlen(h) == 64;
    }
    sqlite3_bind_int(w->u_inputs, 4, kept);
    return ixw_step(w, w->u_inputs, "inserting a unit's inputs");
}

int ixw_write_unit_dep(writer *w, long long tu_id, const ix_dep *d) {
    sqlite3_bind_int64(w->u_dep, 1, tu_id);
    ixw_bind_text(w->u_dep, 2, d->path);
    ixw_bind_text(w->u_dep, 3, d->hash ? d->hash : "-");
    return ixw_step(w, w->u_dep, "inserting a unit's input file");
}

int ixw_write_unit_table(writer *w, long long tu_id, const ix_result *r, ix_unit_table t) {
    switch (t) {
    case IX_TU_INPUTS: return write_inputs(w, tu_id, r);
    case IX_TU_DEPS:
        for (size_t i = 0; i < r->deps.len; i++)
            if (ixw_write_unit_dep(w, tu_id, &TB_VEC_AT(&r->deps, ix_dep, i))) return -1;
        return 0;
    case IX_TU_FUNCTIONS:
        for (size_t i = 0; i < r->funcs.len; i++) {
            const ix_func *f = &TB_VEC_AT(&r->funcs, ix_func, i);
            sqlite3_bind_int64(w->u_func, 1, tu_id);
            ixw_bind_text(w->u_func, 2, f->usr);
            ixw_bind_text(w->u_func, 3, f->name);
            ixw_bind_file(w->u_func, 4, ixw_file_id(w, f->file, 0, NULL, 0, NULL));
            ixw_bind_pos(w->u_func, 5, f->line);
            ixw_bind_pos(w->u_func, 6, f->col);
            ixw_bind_pos(w->u_func, 7, f->end_line);
            ixw_bind_pos(w->u_func, 8, f->end_col);
            sqlite3_bind_int(w->u_func, 9, f->is_static);
            sqlite3_bind_int(w->u_func, 10, f->is_def);
            sqlite3_bind_int(w->u_func, 11, f->main_like);
            if (ixw_step(w, w->u_func, "inserting a unit's function")) return -1;
        }
        return 0;
    case IX_TU_CALLS:
        for (size_t i = 0; i < r->calls.len; i++) {
            const ix_call *c = &TB_VEC_AT(&r->calls, ix_call, i);
            sqlite3_bind_int64(w->u_call, 1, tu_id);
            sqlite3_bind_int(w->u_call, 2, c->caller);
            ixw_bind_text(w->u_call, 3, c->callee_usr);
            ixw_bind_text(w->u_call, 4, c->callee_name);
            ixw_bind_text(w->u_call, 5, c->field);
            ixw_bind_file(w->u_call, 6, ixw_file_id(w, c->file, 0, NULL, 0, NULL));
            ixw_bind_pos(w->u_call, 7, c->line);
            ixw_bind_pos(w->u_call, 8, c->col);
            ixw_bind_text(w->u_call, 9, c->in_macro);
            ixw_bind_text(w->u_call, 10, c->resolution);
            ixw_bind_text(w->u_call, 11, c->candidates);
            if (ixw_step(w, w->u_call, "inserting a unit's call")) return -1;
        }
        return 0;
    case IX_TU_FIELD_TARGETS:
        for (size_t i = 0; i < r->ftargets.len; i++) {
            const ix_ftarget *f = &TB_VEC_AT(&r->ftargets, ix_ftarget, i);
            sqlite3_bind_int64(w->u_ft, 1, tu_id);
            ixw_bind_text(w->u_ft, 2, f->record);
            ixw_bind_text(w->u_ft, 3, f->field);
            ixw_bind_text(w->u_ft, 4, f->fn_usr);
            ixw_bind_file(w->u_ft, 5, ixw_file_id(w, f->file, 0, NULL, 0, NULL));
            ixw_bind_pos(w->u_ft, 6, f->line);
            if (ixw_step(w, w->u_ft, "inserting a unit's field target")) return -1;
        }
        return 0;
    case IX_TU_CALLBACKS:
        for (size_t i = 0; i < r->callbacks.len; i++) {
            const ix_callback *b = &TB_VEC_AT(&r->callbacks, ix_callback, i);
            sqlite3_bind_int64(w->u_cb, 1, tu_id);
            sqlite3_bind_int(w->u_cb, 2, b->caller);
            ixw_bind_text(w->u_cb, 3, b->target_usr);
            ixw_bind_text(w->u_cb, 4, b->passed_to);
            ixw_bind_file(w->u_cb, 5, ixw_file_id(w, b->file, 0, NULL, 0, NULL));
            ixw_bind_pos(w->u_cb, 6, b->line);
            ixw_bind_pos(w->u_cb, 7, b->col);
            if (ixw_step(w, w->u_cb, "inserting a unit's callback")) return -1;
        }
        return 0;
    case IX_TU_RANGE_SITES:
        for (size_t i = 0; i < r->ranges.len; i++) {
            const ix_range *g = &TB_VEC_AT(&r->ranges, ix_range, i);
            sqlite3_bind_int64(w->u_range, 1, tu_id);
            sqlite3_bind_int(w->u_range, 2, g->caller);
            ixw_bind_text(w->u_range, 3, g->kind);
            ixw_bind_text(w->u_range, 4, g->name);
            ixw_bind_file(w->u_range, 5, ixw_file_id(w, g->file, 0, NULL, 0, NULL));
            ixw_bind_pos(w->u_range, 6, g->line);
            ixw_bind_pos(w->u_range, 7, g->col);
            if (ixw_step(w, w->u_range, "inserting a unit's range site")) return -1;
        }
        return 0;
    case IX_TU_SYMBOLS:
        for (size_t i = 0; i < r->syms.len; i++) {
            const ix_sym *y = &TB_VEC_AT(&r->syms, ix_sym, i);
            char kind[2] = {(char)y->kind, 0};
            sqlite3_bind_int64(w->u_sym, 1, tu_id);
            ixw_bind_text(w->u_sym, 2, y->usr);
            ixw_bind_text(w->u_sym, 3, y->name);
            ixw_bind_text(w->u_sym, 4, kind);
            sqlite3_bind_int(w->u_sym, 5, y->defines);
            if (ixw_step(w, w->u_sym, "inserting a unit's symbol")) return -1;
        }
        return 0;
    case IX_TU_TABLES: break;
    }
    return 0;
}

// The unit's own facts, unmerged, and its inputs (the tu_* tables), for the next re-index.
// The tables in ix_unit_table's order: the files they name are numbered in that order
// (touch_unit_files follows it).
int ixw_write_unit_facts(writer *w, long long tu_id, const ix_result *r) {
    for (int t = 0; t < IX_TU_TABLES; t++)
        if (ixw_write_unit_table(w, tu_id, r, (ix_unit_table)t)) return -1;
    return 0;
}
