// index_visit_internal.h — what the parts of one unit's visit share (index_visit.c parses
// and drives, index_visit_walk.c walks the AST into facts, index_visit_dependent.c finds the
// callees of calls a template leaves unresolved): the visit's context and the helpers each
// calls in another. Not an interface beyond them.
#ifndef TB_TRACE_INDEX_VISIT_INTERNAL_H
#define TB_TRACE_INDEX_VISIT_INTERNAL_H

#include <clang-c/Index.h>

#include "index_visit.h"
#include "strmap.h"
#include "u64map.h"
#include "vec.h"

typedef struct file_ent {
    CXFile file;
    const char *path;
    const char *contents;  // clang's buffer, for macro names
    size_t size;
    int is_dep;            // already listed: one of the unit's inputs (r->deps), or a stand-in
} file_ent;

// What an expression of a C body is to the call around it (index_visit_roles.c): the calls
// met so far and the expressions that hand a role on (casts, parentheses, & and *).
enum { IXV_NONE, IXV_CALL, IXV_CALLEE, IXV_ARG };
typedef struct ixv_roles {
    tb_u64map of;  // expression (its Stmt pointer) → index in items
    tb_vec items;
} ixv_roles;  // zero-initialised: empty
// A call the walk met (its children come next): passed_to names its callee.
void ixv_roles_call(ixv_roles *r, CXCursor call, const char *passed_to);
// cur's role from its parent's: IXV_CALLEE (inside a call's callee), IXV_ARG (inside an
// argument; *passed_to the call's callee name) or IXV_NONE.
int ixv_roles_of(ixv_roles *r, CXCursor cur, enum CXCursorKind k, CXCursor parent, const char **passed_to);
void ixv_roles_clear(ixv_roles *r);
void ixv_roles_free(ixv_roles *r);

typedef struct ctx {
    CXTranslationUnit tu;
    const ix_options *opt;
    ix_result *r;
    tb_strmap funcs;       // usr -> index in r->funcs
    tb_strmap syms;        // "d"/"r" + usr of the symbols already in r->syms
    const char *source;    // the unit's source file (abs)
    file_ent *files;    // open addressing on the CXFile pointer
    size_t fcap, flen;
    // Function references already accounted for in the body being walked (callees of calls,
    // arguments recorded with their callee, values of field targets): by location.
    tb_vec seen_refs;   // of CXSourceLocation
    // OpenMP: libclang's visitor does not enter a CapturedStmt's body (it yields only the
    // captured variables), so the statement an OpenMP directive applies to is read from a
    // parse without -fopenmp (the pragmas ignored, _OPENMP still defined). A C unit whose
    // directives that parse shows whole (index_openmp.h) has no other; else the first pass,
    // over the parse with -fopenmp, records everything outside those statements (the
    // directives' clauses too), the second, over the parse without, only what is inside them.
    int captured_pass;  // 0: the parse as given; 1: the second parse, inside `captured` only
    tb_vec captured;    // of ix_extent: the statements OpenMP directives apply to
    struct ix_omp_scan *omp;  // while the inputs of a unit parsed without -fopenmp are listed
    ix_omp_files *omp_files;  // the run's scans of the input files (NULL: each read again)
    CXCursor function;  // the function whose body is being walked (a dependent member call's class)
    int c_unit;         // the unit is parsed as C (not C++, CUDA or Objective-C)
    int c_body;         // a C function's body: references are told apart by ixv_roles, not call_refs
    ixv_roles roles;    // the C body's calls and wrappers (cleared per top-level function)
    tb_u64map noted;    // canonical declaration (its Decl pointer) → index in r->funcs (ixv_note_function)
} ctx;

// A statement an OpenMP directive applies to. The first pass knows where the directive
// (its pragma line) ends: a CapturedStmt's extent is its statement's, and when that is
// another directive (`parallel` over `for simd`) it covers only that pragma. The second
// pass, where no pragma is in the AST, takes the first cursor after it: the statement.
typedef struct ix_extent {
    const char *file;
    unsigned after_line, after_col;  // the end of the outermost directive
    int found;                       // the second pass found the statement: line .. end_col
    unsigned line, col, end_line, end_col;
} ix_extent;

typedef struct kids {
    CXCursor items[8];
    unsigned n;  // may exceed 8: only the first 8 are kept
} kids;

// A libclang string copied into the result's pool (and disposed).
const char *ixv_cxstr(ctx *c, CXString s);
// The unit's entry for a file (its path and contents), made on first sight.
file_ent *ixv_file_of(ctx *c, CXFile f);
// The file location (macro body → the macro's use; macro argument → where it is written).
const char *ixv_file_loc(ctx *c, CXSourceLocation l, unsigned *line, unsigned *col);
// A function, method, constructor, destructor, conversion or function template.
int ixv_is_function_kind(enum CXCursorKind k);
// The first 8 children of a cursor (n counts them all).
kids ixv_children(CXCursor cur);
// An expression that only wraps another (an implicit cast, parentheses, a cast, & or *):
// what ixv_strip looks through, and what hands its role on (ixv_roles_of).
int ixv_wraps(CXCursor cur, enum CXCursorKind k);
// Through implicit casts, parentheses, casts and '&' to what an expression names.
CXCursor ixv_strip(CXCursor cur);
// The USR that identifies a function in the index. libclang's, except that functions with
// internal linkage (static, anonymous namespace) and `main` get the absolute path of their
// (canonical) declaration's file instead of its base name, so two files' statics with the
// same name and base name stay apart, and so does each binary's main.
const char *ixv_usr_of(ctx *c, CXCursor cur, int *main_like);
// A function the unit calls or names: its row (from its first declaration, is_definition 0,
// unless the unit defines it), made on first sight; its USR. Declarations nothing refers to
// get no row.
const char *ixv_note_function(ctx *c, CXCursor fn);
// A call whose callee is an unresolved lookup (overloaded: its candidates): the one candidate
// by name (resolution TB_CALL_RESOLVED_BY_NAME), else the candidates kept, the callee unresolved.
void ixv_resolve_by_name(ctx *c, CXCursor overloaded, const char **name, const char **usr,
                         const char **resolution, const char **candidates);
// The member a member expression names, from its tokens (the last identifier: flush in
// this->flush), into the pool; NULL when there is none.
const char *ixv_member_name(ctx *c, CXCursor member_ref);
// A dependent member call (name through member_ref) resolved through the walked function's
// class and its bases, as ixv_resolve_by_name resolves a lookup.
void ixv_resolve_dependent_member(ctx *c, CXCursor member_ref, const char *name, const char **usr,
                                  const char **resolution, const char **candidates);
// The walk of the unit's top level (d: the ctx): every non-system file's functions and their
// bodies, initialisers and assignments of function-pointer fields.
enum CXChildVisitResult ixv_top_visit(CXCursor cur, CXCursor parent, CXClientData d);

#endif
