// index_visit.h — one translation unit's facts (index_visit.c): its functions, calls,
// field targets, callbacks, range sites and input files, as libclang's AST gives them,
// before the merge across units (index_write.h).
#ifndef TB_TRACE_INDEX_VISIT_H
#define TB_TRACE_INDEX_VISIT_H

#include "index_compdb.h"
#include "index_openmp.h"
#include "index_options.h"
#include "pool.h"
#include "vec.h"

typedef struct ix_func {
    const char *usr, *name, *file;
    unsigned line, col;
    unsigned end_line, end_col;  // the body's closing brace (definitions), else 0
    int is_static, is_def;
    int main_like;  // external `main`: its USR is made file-qualified (every binary has one)
} ix_func;

// How a call's callee was found (calls.resolution): NULL by the compiler (or not at all: a
// call through a pointer, a field); TB_CALL_RESOLVED_BY_NAME the one function an unresolved
// lookup in a template names (a dependent call: clangd's heuristic); TB_CALL_CANDIDATES
// several, kept in `candidates` (USRs, one per line), the callee unresolved.
#define TB_CALL_RESOLVED_BY_NAME "name"
#define TB_CALL_CANDIDATES "candidates"

typedef struct ix_call {
    int caller;  // index in the TU's funcs
    const char *callee_usr, *callee_name, *field, *file, *in_macro;
    const char *resolution, *candidates;
    unsigned line, col;
} ix_call;

typedef struct ix_ftarget {
    const char *record, *field, *fn_usr, *file;
    unsigned line;
} ix_ftarget;

typedef struct ix_callback {
    int caller;  // index in the TU's funcs: the body that names the function
    const char *target_usr, *passed_to, *file;  // passed_to: the callee when an argument, else NULL
    unsigned line, col;
} ix_callback;

// An external symbol of the unit, for telling link units apart (index_units.c): a strong
// definition in the unit's own source (a function that is not inline, a template or a
// member of a class template; a variable), or a reference to an external variable. Calls,
// callbacks and field targets already say which functions the unit refers to.
typedef struct ix_sym {
    const char *usr, *name;
    int kind;     // 'f' function, 'v' variable
    int defines;  // 1: defined here; 0: referred to
} ix_sym;

typedef struct ix_range {
    int caller;
    const char *kind, *name, *file;
    unsigned line, col;
} ix_range;

// One input file of a unit: its source, or a file it included (directly or not; system
// headers too). hash: hex SHA-256 of the contents when the unit was indexed (index_reuse.c).
typedef struct ix_dep {
    const char *path, *hash;
} ix_dep;

typedef struct ix_result {
    const char *status;  // ok | partial | failed
    int errors;
    int reduced;         // parsed with the reduced command line
    int reused;          // facts taken from the previous index, not parsed this run
    char *diagnostics;   // malloc'd, "file:line:col: message" lines, or NULL
    tb_vec funcs, calls, ftargets, ranges, callbacks;
    tb_vec syms;         // of ix_sym
    tb_vec deps;         // of ix_dep: the unit's input files (hashes filled in by index.c)
    const char *inputs;  // hex SHA-256 of the unit's command line and options (ix_inputs_hash)
    const ix_tu *tu;     // that command line (tu_inputs.command), set with inputs
    tb_pool pool;
    double seconds;        // the whole unit: the parses, the visits, the inclusions
    double parse_seconds;  // libclang's parses alone (the second OpenMP one included)
    double parse_cpu;      // their thread's CPU time (--verbose)
    const char *openmp;    // how OpenMP directives were parsed (--verbose), or NULL: none seen
    // The unit's thread's CPU time (--verbose): the AST walks (both passes), the inclusions
    // listed, the translation units disposed of.
    double walk_cpu, inclusions_cpu, dispose_cpu;
} ix_result;

// Parses tu with its own flags and extracts its facts into r (which it initialises).
// Never fails: a TU that does not parse gets status "failed" and its diagnostics. omp_files:
// the run's scans of OpenMP directives in the input files, shared by the units (or NULL).
void ix_index_tu(void *cxindex, const ix_tu *tu, const ix_options *opt, ix_omp_files *omp_files, ix_result *r);
void ix_result_free(ix_result *r);
// The benchmark's reference (tracebook index --parse-only): the unit parsed with its own
// arguments, flags and in-memory stand-ins, as ix_index_tu parses it first (but a C unit
// compiled with -fopenmp, which ix_index_tu may parse without it: index_openmp.h), nothing
// visited or kept.
// 0 when libclang built the unit, -1 (said on stderr, naming the unit) when it did not.
// *parse_cpu, *dispose_cpu: the thread's CPU time in the parse and in the unit's disposal.
int ix_parse_only(void *cxindex, const ix_tu *tu, double *parse_cpu, double *dispose_cpu);

void ix_result_init(ix_result *r);

#endif
