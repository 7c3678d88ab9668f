// index_openmp.h — how a unit compiled with -fopenmp is parsed (index_visit.c).
//
// libclang's visitor does not enter the statement an OpenMP directive applies to, so the
// calls there come from a parse without -fopenmp (the pragmas ignored, _OPENMP defined as
// -fopenmp defines it). A C unit is parsed that way once, and only that way, when that parse
// shows every call the unit makes: when no directive in its input files could hold a call in
// a clause, which only the parse with -fopenmp shows. This scan reads
// the text of every input file (system headers too) and decides conservatively (a doubt is a
// "no"). A directive is any word omp after a word ending in "pragma" (#pragma omp; in a
// comment too), after a quote (_Pragma("omp ..."), a string a macro makes a pragma of) or as
// __pragma(omp ...). Doubts: a clause with a call in it (`num_threads(f())`, `(*f)(x)`,
// `t[0](x)`), an identifier any input file or the command line defines as a macro (a
// directive's tokens are macro-expanded), a comment, string, escape, character literal or
// unbalanced parenthesis inside a directive, a comment before its omp, a line splice inside a
// word, `declare` other than `declare simd` / `declare target` (a variant replaces calls, a
// reduction or mapper has code), `begin`, `metadirective`, and omp as a macro's argument
// (DO_PRAGMA(omp ...): a _Pragma(#x) macro makes a directive of it). Otherwise (and for C++, where
// a clause's operators and conversions are calls no text shows) the unit is parsed with
// -fopenmp for everything outside the directives' statements and without it for what is
// inside them. Not seen by the scan: an `omp` that is itself a macro's expansion, handed on
// through another macro into a _Pragma(#x) (`#define O omp`, `DO2(O parallel ...)`); such a
// directive's clause calls would be missed (the calls inside its statement never are).
#ifndef TB_TRACE_INDEX_OPENMP_H
#define TB_TRACE_INDEX_OPENMP_H

#include <stddef.h>

#include "pool.h"
#include "strmap.h"
#include "vec.h"

// The arguments without -fopenmp* into out (of const char *, tb_vec_init'ed by the caller),
// and -D_OPENMP=<date> when clang compiles them as OpenMP (clang 19's date for
// -fopenmp-version=V, 5.1's by default): 1 then, else 0. Not OpenMP: no -fopenmp, the last
// one undone by -fno-openmp, or -fopenmp=libgomp (clang's driver then passes no -fopenmp to its
// front end: the pragmas are ignored and _OPENMP is not defined; such a unit is parsed as
// given).
int ix_openmp_plain_args(tb_pool *p, const char *const *args, int nargs, tb_vec *out);
// Whether clang compiles a command line's code as OpenMP: the last of -fopenmp,
// -fopenmp=RUNTIME and -fno-openmp decides, and the runtime (the last -fopenmp=RUNTIME's,
// libomp by default) is not libgomp; an unknown one counts (the driver rejects it; the parse
// without it goes on). -Xclang or -Xpreprocessor before -fopenmp: the front end's own flag, on.
int ix_openmp_on(const char *const *args, int nargs);

typedef struct ix_omp_scan {
    int directives;    // the OpenMP directives found
    const char *why;   // why the parse without -fopenmp may miss a call (the first reason), or NULL
    tb_strmap names;   // the identifiers in the directives
    tb_pool pool;      // why's text
} ix_omp_scan;  // zero-initialised: nothing scanned

// A file's OpenMP directives (#pragma omp, _Pragma("omp ..."), __pragma(omp ...); anything
// spelled so counts, in a comment or a string too): their identifiers noted, why set when
// one may hold a call. path names the file in why.
void ix_omp_scan_directives(ix_omp_scan *s, const char *path, const char *text, size_t n);
// Whether a file defines a macro named as an identifier of the directives: why set. Reads
// every "define NAME" as a definition.
void ix_omp_scan_macros(ix_omp_scan *s, const char *path, const char *text, size_t n);
// The same for the command line's -D NAME, -DNAME=...; -imacros, -Wp,... (the preprocessor's
// own arguments, -Wp,-DNAME=... among them) and @file set why (their macros are not read here).
void ix_omp_scan_command_line(ix_omp_scan *s, const char *const *args, int nargs);
void ix_omp_scan_free(ix_omp_scan *s);

// The input files' scans, each file read once per run (its path names it: the files do not
// change during a run) and shared by the parse workers (thread-safe).
typedef struct ix_omp_files ix_omp_files;
ix_omp_files *ix_omp_files_new(void);
void ix_omp_files_free(ix_omp_files *f);
// One of a unit's input files: its directives into s, as ix_omp_scan_directives does (a
// doubt the file raises stands for every unit that includes it). text NULL: only when the
// file was read before in this run. 1 when s has them, 0 when its text is needed (f NULL:
// always read now).
int ix_omp_files_directives(ix_omp_files *f, ix_omp_scan *s, const char *path, const char *text, size_t n);
// One of a unit's input files: whether it defines a macro named in s's directives, as
// ix_omp_scan_macros does; text and the answer as for ix_omp_files_directives.
int ix_omp_files_macros(ix_omp_files *f, ix_omp_scan *s, const char *path, const char *text, size_t n);

#endif
