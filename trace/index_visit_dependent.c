// index_visit_dependent.c — the callees of calls the compiler leaves unresolved until a
// template is instantiated (index_visit_walk.c's handle_call asks): by name when the lookup
// has one candidate, as clangd's heuristic resolver does, and a dependent member call through
// the enclosing class and its bases.
#include <clang-c/Index.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "index_visit_internal.h"
#include "strmap.h"

// --- calls the compiler leaves unresolved until instantiation ----------------------------
// A call in a template whose arguments depend on a template parameter names its callee by an
// unresolved lookup (the declarations the name found, the choice made per instantiation); a
// member call on a dependent type names only the member. As clangd's heuristic resolver
// does, the indexer takes the name: one candidate function is the callee ("name"), several
// are kept as candidates ("candidates": their USRs, one per line), the callee unresolved.

// The USRs of the candidate functions, one per line, into the pool; *n their count.
static const char *candidate_list(ctx *c, const CXCursor *fns, unsigned n) {
    size_t len = 0;
    const char *usrs[64];
    unsigned k = 0;
    for (unsigned i = 0; i < n && k < 64; i++)
        if ((usrs[k] = ixv_note_function(c, fns[i]))) len += strlen(usrs[k++]) + 1;
    if (!k) return NULL;
    char *out = tb_pool_alloc(&c->r->pool, len);
    char *p = out;
    for (unsigned i = 0; i < k; i++) p += sprintf(p, "%s%s", i ? "\n" : "", usrs[i]);
    return out;
}

static void take_candidates(ctx *c, const CXCursor *fns, unsigned n, const char **usr, const char **resolution,
                            const char **candidates) {
    if (n == 1) {
        *usr = ixv_note_function(c, fns[0]);
        *resolution = TB_CALL_RESOLVED_BY_NAME;
    } else if (n > 1) {
        *candidates = candidate_list(c, fns, n);
        *resolution = TB_CALL_CANDIDATES;
    }
}

void ixv_resolve_by_name(ctx *c, CXCursor overloaded, const char **name, const char **usr,
                         const char **resolution, const char **candidates) {
    CXCursor fns[64];
    unsigned n = 0, all = clang_getNumOverloadedDecls(overloaded);
    for (unsigned i = 0; i < all && n < 64; i++) {
        CXCursor d = clang_getOverloadedDecl(overloaded, i);
        if (!*name) *name = ixv_cxstr(c, clang_getCursorSpelling(d));
        if (ixv_is_function_kind(clang_getCursorKind(d))) fns[n++] = d;
    }
    take_candidates(c, fns, n, usr, resolution, candidates);
}

typedef struct member_search {
    const char *name;
    CXCursor found[64];
    unsigned n;
    CXCursor bases[16];
    unsigned nbases;
} member_search;

static enum CXChildVisitResult member_child(CXCursor ch, CXCursor parent, CXClientData d) {
    (void)parent;
    member_search *m = d;
    enum CXCursorKind k = clang_getCursorKind(ch);
    if ((k == CXCursor_CXXMethod || k == CXCursor_FunctionTemplate) && m->n < 64) {
        CXString sp = clang_getCursorSpelling(ch);
        if (!strcmp(clang_getCString(sp), m->name)) m->found[m->n++] = ch;
        clang_disposeString(sp);
    } else if (k == CXCursor_CXXBaseSpecifier && m->nbases < 16) {
        m->bases[m->nbases++] = ch;
    }
    return CXChildVisit_Continue;
}

// The class or class template a cursor of a base specifier or a type names (a dependent
// Base<T> names the primary template), or a null cursor.
static CXCursor class_of_type(CXType t) {
    t = clang_getCanonicalType(t);
    if (t.kind == CXType_Pointer || t.kind == CXType_LValueReference || t.kind == CXType_RValueReference)
        t = clang_getPointeeType(t);
    CXCursor d = clang_getTypeDeclaration(t);
    if (clang_Cursor_isNull(d) || clang_getCursorKind(d) == CXCursor_NoDeclFound) {
        // a dependent specialization: its template
        CXCursor tmpl = clang_getTypeDeclaration(clang_Type_getNamedType(t));
        return clang_Cursor_isNull(tmpl) ? clang_getNullCursor() : tmpl;
    }
    CXCursor general = clang_getSpecializedCursorTemplate(d);
    return clang_Cursor_isNull(general) ? d : general;
}

// The methods named m->name of cls and its bases (depth-first, a base at most 8 deep); the
// first class that declares any ends the search, as name lookup does.
static void find_member(CXCursor cls, member_search *m, int depth) {
    if (clang_Cursor_isNull(cls) || depth > 8) return;
    member_search here = {.name = m->name};
    clang_visitChildren(cls, member_child, &here);
    if (here.n) {
        for (unsigned i = 0; i < here.n && m->n < 64; i++) m->found[m->n++] = here.found[i];
        return;
    }
    for (unsigned b = 0; b < here.nbases && !m->n; b++) {
        CXCursor base = clang_getCursorReferenced(here.bases[b]);
        if (clang_Cursor_isNull(base) || !clang_isDeclaration(clang_getCursorKind(base)))
            base = class_of_type(clang_getCursorType(here.bases[b]));
        else if (!clang_Cursor_isNull(clang_getSpecializedCursorTemplate(base)))
            base = clang_getSpecializedCursorTemplate(base);
        find_member(base, m, depth + 1);
    }
}

// The member a member expression names, from its tokens (the last identifier: flush in
// this->flush), into the pool; NULL when there is none.
const char *ixv_member_name(ctx *c, CXCursor member_ref) {
    CXToken *toks = NULL;
    unsigned n = 0;
    clang_tokenize(c->tu, clang_getCursorExtent(member_ref), &toks, &n);
    const char *name = NULL;
    for (unsigned i = n; i-- > 0 && !name;)
        if (clang_getTokenKind(toks[i]) == CXToken_Identifier) name = ixv_cxstr(c, clang_getTokenSpelling(c->tu, toks[i]));
    if (toks) clang_disposeTokens(c->tu, toks, n);
    return name;
}

void ixv_resolve_dependent_member(ctx *c, CXCursor member_ref, const char *name, const char **usr,
                                  const char **resolution, const char **candidates) {
    kids ch = ixv_children(member_ref);
    CXCursor base = ch.n ? ixv_strip(ch.items[0]) : clang_getNullCursor(), cls = clang_getNullCursor();
    if (clang_Cursor_isNull(base) || clang_getCursorKind(base) == CXCursor_CXXThisExpr)
        cls = clang_getCursorSemanticParent(c->function);  // this->f(), or f() of a dependent base
    else
        cls = class_of_type(clang_getCursorType(base));
    enum CXCursorKind k = clang_getCursorKind(cls);
    if (k != CXCursor_ClassTemplate && k != CXCursor_StructDecl && k != CXCursor_ClassDecl &&
        k != CXCursor_ClassTemplatePartialSpecialization)
        return;
    member_search m = {.name = name};
    find_member(cls, &m, 0);
    take_candidates(c, m.found, m.n, usr, resolution, candidates);
}
