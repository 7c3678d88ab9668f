// prove_records.h — what `tracebook prove` knows of each record it reads (prove.c): the
// record verified against its manifest once, however many claims name it — its files'
// sha256, a missing or unreadable manifest, files it does not list, a run that did not finish.
#ifndef TB_EXPERIMENTS_PROVE_RECORDS_H
#define TB_EXPERIMENTS_PROVE_RECORDS_H

#include <jansson.h>
#include <stddef.h>

#define PROVE_PATH_MAX 4096

// A growable string (NULL s: empty).
typedef struct strbuf {
    char *s;
    size_t len, cap;
} strbuf;

__attribute__((format(printf, 2, 3))) void sb_printf(strbuf *b, const char *fmt, ...);

typedef struct record_check {
    char *dir;
    json_t *manifest;   // NULL when missing or unreadable
    strbuf failures;    // one line each: missing / altered files, an incomplete record
    strbuf warnings;    // files the manifest does not list, a run that did not finish
    int files_verified;
} record_check;

// The verified records, by directory (open addressing; each record is verified once).
typedef struct check_table {
    record_check *slots;
    size_t cap, n;
} check_table;

// The record at dir, verified the first time it is asked for; the entry stays valid until
// the next record is verified.
record_check *verify_record(check_table *t, const char *dir);
void check_table_free(check_table *t);

#endif
