// index_visit_roles.c — what a function reference in a C body is to the call around it, read
// from the order the walk meets the cursors instead of walking each call's children again:
// a call's first child is its callee and the others its arguments, in source order, and an
// implicit cast, parentheses, an explicit cast, & or * hands its role to the expression it
// wraps (ixv_wraps: what ixv_strip looks through). So in qsort(v, n, sizeof *v, cmp) the reference to cmp, under
// its implicit function-to-pointer cast, is an argument of qsort (a callback passed to it),
// and in f(x) the reference to f is the callee (no callback). C++ bodies (operator calls,
// member calls, overloads) keep call_refs' walk of the call's children.
#include <stdint.h>

#include "index_visit_internal.h"

typedef struct role {
    int kind;               // IXV_CALL: a call (next: its next child's number); else the role
    int next;
    const char *passed_to;  // the call's callee name (IXV_CALL, IXV_ARG)
} role;

// An expression cursor's identity: its Stmt (libclang keeps it in data[1]).
static uint64_t expr_key(CXCursor cur) {
    return clang_isExpression(clang_getCursorKind(cur)) ? (uint64_t)(uintptr_t)cur.data[1] : 0;
}

void ixv_roles_clear(ixv_roles *r) {
    tb_u64map_clear(&r->of);
    r->items.len = 0;
}

void ixv_roles_free(ixv_roles *r) {
    tb_u64map_free(&r->of);
    tb_vec_free(&r->items);
}

static void put(ixv_roles *r, CXCursor cur, role x) {
    uint64_t key = expr_key(cur);
    if (!key) return;
    if (!r->items.size) tb_vec_init(&r->items, sizeof(role), "expression roles");
    *(role *)tb_vec_push(&r->items) = x;
    tb_u64map_put(&r->of, key, (int)r->items.len - 1);
}

void ixv_roles_call(ixv_roles *r, CXCursor call, const char *passed_to) {
    put(r, call, (role){IXV_CALL, 0, passed_to});
}

int ixv_roles_of(ixv_roles *r, CXCursor cur, enum CXCursorKind k, CXCursor parent, const char **passed_to) {
    int *slot = tb_u64map_get(&r->of, expr_key(parent));
    if (!slot || !clang_isExpression(k)) return IXV_NONE;  // a cast's type is not what it wraps
    role *p = &TB_VEC_AT(&r->items, role, *slot);
    role mine = {p->kind, 0, p->passed_to};
    if (p->kind == IXV_CALL) mine.kind = p->next++ ? IXV_ARG : IXV_CALLEE;
    if (ixv_wraps(cur, k)) put(r, cur, mine);
    *passed_to = mine.passed_to;
    return mine.kind;
}
