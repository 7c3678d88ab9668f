// index_meanwhile.c — what the thread that started the parse workers does while they parse
// (index_meanwhile.h).
#include "index_meanwhile.h"

#include <time.h>

#include "index_units.h"

void ix_targets_later_load(ix_targets_later *t) {
    if (!t || t->loaded) return;
    tb_error err;  // without a --targets file the load does not fail (a bad reply is warned about)
    ix_link_units_load(t->targets, NULL, t->db, t->build_dir, t->trc, t->source, &err);
    t->loaded = 1;
}

void ix_parse_and_write(ix_work *w, void *arg) {
    ix_streamed *sw = arg;
    ix_targets_later_load(sw->targets);  // while the first units parse
    if (sw->indexer) (void)ix_indexer_key(sw->indexer);
    // The link units from CMake's reply or a --targets file are known now (inferred ones come
    // from every unit's symbols, after the parse): their rows go in while the units parse.
    const ix_targets *rows = sw->targets ? (*sw->targets->trc == 0 ? sw->targets->targets : NULL) : sw->rows;
    if (sw->writer && rows) (void)ix_write_link_units(sw->writer, rows);
    int indexed = 0;
    for (size_t i = 0; i < w->db->ntus; i++) {
        // Every unit is being parsed and this one is not done: the secondary indexes are built
        // now, beside the last parses, rather than after them.
        if (sw->writer && !indexed && atomic_load(&w->next) >= w->ntodo && !ix_unit_done(w, i)) {
            (void)ix_write_indexes(sw->writer);
            indexed = 1;
        }
        ix_wait_unit(w, i);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ix_hash_unit_inputs(w->db, w->results, &i, 1, sw->hashes, sw->counted, sw->nfiles, sw->nlines);
        w->results[i].inputs = sw->inputs[i];
        w->results[i].tu = &w->db->tus[i];
        if (sw->writer) ix_write_unit(sw->writer, i, &w->results[i]);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        sw->busy += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    }
}

void ix_begin_update(ix_work *w, void *arg) {
    (void)w;
    ix_update_start *us = arg;
    us->update = ix_update_begin(us->path, us->db, us->todo, us->ntodo, us->prev, us->targets, us->targets_loaded,
                                 us->build_dir, us->opt, us->err);
}
