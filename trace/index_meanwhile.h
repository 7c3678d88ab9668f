// index_meanwhile.h — what the thread that started the parse workers (index_workers.h) does
// while they parse (index.c): a new index written unit by unit as the units come, or an update
// in place begun (index_update.h).
#ifndef TB_TRACE_INDEX_MEANWHILE_H
#define TB_TRACE_INDEX_MEANWHILE_H

#include "core/error.h"
#include "index_compdb.h"
#include "index_options.h"
#include "index_reuse.h"
#include "index_targets.h"
#include "index_update.h"
#include "index_workers.h"
#include "index_write.h"
#include "strmap.h"

// The link units of a new index, when nothing needs them before the parse (no --targets
// FILE, whose errors stop the run before it): CMake's file API reply is read while the first
// units parse (ix_link_units_load; it cannot fail, a reply it cannot read is warned about).
typedef struct ix_targets_later {
    ix_targets *targets;
    const ix_compdb *db;
    const char *build_dir;
    int *trc;
    const char **source;
    int loaded;  // set once read
} ix_targets_later;

// A new index written while the units are parsed: this thread takes each unit in database order
// as soon as it is parsed, hashes its input files and writes its facts, so that only what needs
// every unit (inferred link units and their rows, collective sites, the libraries rows a later
// unit's definition takes back, those an archive answers) is left after the last parse; the
// targets rows of known link units go in first, each unit's libraries rows with it, the
// secondary indexes once every unit is being parsed. Every unit is parsed (todo is the whole
// database).
typedef struct ix_streamed {
    ix_writer *writer;  // NULL: it could not be made (the error is reported; units are not written)
    ix_hashes *hashes;
    tb_strmap *counted;
    long *nfiles, *nlines;
    const char **inputs;
    ix_targets_later *targets;  // NULL: read before the parse
    const ix_targets *rows;     // then, when from CMake's reply or --targets (not inferred): them
    ix_indexer *indexer;        // its key (the executable's hash) computed meanwhile, for the meta rows
    double busy;  // seconds spent hashing and writing (not waiting for a unit): --verbose
} ix_streamed;
void ix_parse_and_write(ix_work *w, void *streamed);

// Reads the link units now unless done (t NULL: nothing to read).
void ix_targets_later_load(ix_targets_later *t);

// An update in place: what it needs before the parsed facts, done while they are parsed.
typedef struct ix_update_start {
    const char *path;
    const ix_compdb *db;
    const size_t *todo;
    size_t ntodo;
    ix_prev *prev;
    ix_targets *targets;
    int *targets_loaded;
    const char *build_dir;
    const ix_options *opt;
    tb_error *err;
    ix_update *update;
} ix_update_start;
void ix_begin_update(ix_work *w, void *update_start);

#endif
