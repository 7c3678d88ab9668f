// index_visit_roles.c — what a function reference in a C body is to the call around it, read
// from the order the walk meets the cursors instead of walking each call's children again:
// a call's first child is its callee and the others its arguments, in source order, and an
// implicit cast, parentheses, an explicit cast, & or * hands its role to the expression it
// wraps (ixv_strip's kinds). So in qsort(v, n, sizeof *v, cmp) the reference to cmp, under
// its implicit function-to-pointer cast, is an argument of qsort (a callback passed to it),
// and in f(x) the reference to f is the callee (no callback). C++ bodies (operator calls,
// member calls, overloads) keep call_refs' walk of the call's children.
#include <stdint.h>
#include <stdlib.h>

#include "core/xalloc.h"
#include "index_visit_internal.h"

static size_t phash(const void *p, size_t cap) { return (size_t)(((uintptr_t)p >> 4) * 11400714819323198485ull) & (cap - 1); }

int *ixv_ptrmap_get(const ixv_ptrmap *m, const void *key) {
    if (!m->cap || !key) return NULL;
    for (size_t i = phash(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) return &m->vals[i];
        if (!m->keys[i]) return NULL;
    }
}

void ixv_ptrmap_put(ixv_ptrmap *m, const void *key, int val) {
    if (!key) return;
    if (2 * (m->len + 1) > m->cap) {
        ixv_ptrmap old = *m;
        m->cap = old.cap ? 2 * old.cap : 64;
        m->keys = tb_xcalloc(m->cap, sizeof *m->keys, "pointer map");
        m->vals = tb_xcalloc(m->cap, sizeof *m->vals, "pointer map");
        m->len = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.keys[i]) ixv_ptrmap_put(m, old.keys[i], old.vals[i]);
        free(old.keys);
        free(old.vals);
    }
    size_t i = phash(key, m->cap);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) m->len++;
    m->keys[i] = key;
    m->vals[i] = val;
}

void ixv_ptrmap_clear(ixv_ptrmap *m) {
    if (m->len)
        for (size_t i = 0; i < m->cap; i++) m->keys[i] = NULL;
    m->len = 0;
}

void ixv_ptrmap_free(ixv_ptrmap *m) {
    free(m->keys);
    free(m->vals);
    *m = (ixv_ptrmap){0};
}

// ---------------------------------------------------------------------------------------
// Roles

typedef struct role {
    int kind;               // IXV_CALL: a call (next: its next child's number); else the role
    int next;
    const char *passed_to;  // the call's callee name (IXV_CALL, IXV_ARG)
} role;

// An expression cursor's identity: its Stmt (libclang keeps it in data[1]).
static const void *expr_key(CXCursor cur) { return clang_isExpression(clang_getCursorKind(cur)) ? cur.data[1] : NULL; }

// ixv_strip's kinds: they hand their role to the expression they wrap.
static int wraps(CXCursor cur, enum CXCursorKind k) {
    if (k == CXCursor_UnaryOperator) {
        enum CXUnaryOperatorKind op = clang_getCursorUnaryOperatorKind(cur);
        return op == CXUnaryOperator_AddrOf || op == CXUnaryOperator_Deref;
    }
    return k == CXCursor_UnexposedExpr || k == CXCursor_ParenExpr || k == CXCursor_CStyleCastExpr ||
           k == CXCursor_CXXStaticCastExpr || k == CXCursor_CXXReinterpretCastExpr || k == CXCursor_CXXFunctionalCastExpr;
}

void ixv_roles_clear(ixv_roles *r) {
    ixv_ptrmap_clear(&r->of);
    r->items.len = 0;
}

void ixv_roles_free(ixv_roles *r) {
    ixv_ptrmap_free(&r->of);
    tb_vec_free(&r->items);
}

static void put(ixv_roles *r, CXCursor cur, role x) {
    const void *key = expr_key(cur);
    if (!key) return;
    if (!r->items.size) tb_vec_init(&r->items, sizeof(role), "expression roles");
    *(role *)tb_vec_push(&r->items) = x;
    ixv_ptrmap_put(&r->of, key, (int)r->items.len - 1);
}

void ixv_roles_call(ixv_roles *r, CXCursor call, const char *passed_to) {
    put(r, call, (role){IXV_CALL, 0, passed_to});
}

int ixv_roles_of(ixv_roles *r, CXCursor cur, enum CXCursorKind k, CXCursor parent, const char **passed_to) {
    int *slot = ixv_ptrmap_get(&r->of, expr_key(parent));
    if (!slot || !clang_isExpression(k)) return IXV_NONE;  // a cast's type is not what it wraps
    role *p = &TB_VEC_AT(&r->items, role, *slot);
    role mine = {p->kind, 0, p->passed_to};
    if (p->kind == IXV_CALL) mine.kind = p->next++ ? IXV_ARG : IXV_CALLEE;
    if (wraps(cur, k)) put(r, cur, mine);
    *passed_to = mine.passed_to;
    return mine.kind;
}
