// source.h — reading the indexed source files back: lines (for walkthroughs) and the brace
// structure of C code (for where a range opened by a push ends).
//
// The index stores call sites and range sites as points (line, column). Which calls fall
// inside a range depends on the blocks around the push and the pop: a pop in an `if` that
// returns early does not end the range for the code after the `if`. This module gives the
// blocks ({ ... } pairs, comments and literals skipped) so the range logic can tell. A file
// that cannot be read gives NULL, and callers fall back to line order alone.
#ifndef TB_TRACE_SOURCE_H
#define TB_TRACE_SOURCE_H

#include <stddef.h>

#include "strmap.h"
#include "vec.h"

// A point in a file: 1-based line and byte column, as libclang and the index give them.
typedef struct tb_pos {
    int line, col;
} tb_pos;

#define TB_POS_END ((tb_pos){1 << 30, 0})  // after everything

int tb_pos_cmp(tb_pos a, tb_pos b);

typedef struct tb_block {
    tb_pos open, close;  // the braces; close = TB_POS_END when unbalanced
    int parent;          // enclosing block, -1 at file level
} tb_block;

typedef struct tb_source {
    char *path;
    char *text;
    size_t len;
    char *code;         // per byte: 1 = code, 0 = comment or literal
    size_t *lines;      // byte offset of each line start; lines[0] is line 1
    int nlines;
    tb_block *blocks;   // in order of their opening brace
    int nblocks;
} tb_source;

// A cache of files read so far (read once, kept until tb_sources_free).
typedef struct tb_sources {
    tb_vec files;        // of tb_source *, a miss kept as a source without text
    tb_strmap by_path;   // path -> index in files
} tb_sources;

void tb_sources_init(tb_sources *c);

const tb_source *tb_sources_get(tb_sources *c, const char *path);  // NULL: unreadable
void tb_sources_free(tb_sources *c);

// Line text without its newline (len set), or NULL past the end.
const char *tb_source_line(const tb_source *s, int line, size_t *len);
// Innermost block containing p (strictly between its braces), -1: none.
int tb_source_block_at(const tb_source *s, tb_pos p);
// The body of the function declared at p: the first file-level block opening after p; -1: none.
int tb_source_body_after(const tb_source *s, tb_pos p);
// 1 when block `inner` is `outer` or nested in it.
int tb_source_block_within(const tb_source *s, int inner, int outer);
// Where the if/else chain that block `b` is the first branch of ends: the close of the last
// `else` / `else if` alternative after it, or b's own close when no `else` follows.
tb_pos tb_source_else_end(const tb_source *s, int b);
// Byte offset of p in the text (clamped).
size_t tb_source_offset(const tb_source *s, tb_pos p);
// The end of the statement starting at p: its ';' outside parentheses (or p when not found).
tb_pos tb_source_statement_end(const tb_source *s, tb_pos p);

#endif
