// runbook_check.c — what the runbook API checks of every value it is given (runbook_host.h):
// a table's keys against the ones its call takes, each value's type, numbers finite, integers
// exact, ranges. Every refusal is a Lua error at the runbook's line naming the call, the key
// and the value, so nothing a runbook writes is dropped or replaced by a default silently.
#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runbook/runbook_host.h"

int tb_rb_error(lua_State *L, const char *fmt, ...) {
    // lua_pushfstring knows only %% %s %f %I %p %d %c %U (no width, precision or length): a
    // "%.17g" or "%lld" there raises "invalid option" instead of the message. Formatting with
    // vsnprintf first lets every message use printf's conversions, checked by the compiler.
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    luaL_where(L, 1);  // the caller of the API's C function: the runbook's file:line
    lua_pushstring(L, msg);
    lua_concat(L, 2);
    return lua_error(L);
}

const char *tb_rb_lua_where(lua_State *L, char *buf, size_t len) {
    buf[0] = '\0';
    lua_Debug ar;
    for (int level = 1; lua_getstack(L, level, &ar); level++)
        if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0) {
            snprintf(buf, len, "%s:%d: ", ar.short_src, ar.currentline);
            break;
        }
    return buf;
}

const char *tb_rb_describe(lua_State *L, int idx, char *buf, size_t len) {
    switch (lua_type(L, idx)) {
    case LUA_TNONE:
    case LUA_TNIL: snprintf(buf, len, "nil"); break;
    case LUA_TBOOLEAN: snprintf(buf, len, "%s", lua_toboolean(L, idx) ? "true" : "false"); break;
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) snprintf(buf, len, "%lld", (long long)lua_tointeger(L, idx));
        else if (isnan(lua_tonumber(L, idx))) snprintf(buf, len, "nan");  // printf may say "-nan" for 0/0
        else snprintf(buf, len, "%.17g", (double)lua_tonumber(L, idx));
        break;
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        snprintf(buf, len, n > 60 ? "'%.60s...'" : "'%s'", s);
        break;
    }
    case LUA_TTABLE: {
        const int t = lua_absindex(L, idx);
        lua_pushnil(L);
        if (lua_next(L, t)) {
            lua_pop(L, 2);
            snprintf(buf, len, "a table");
        } else {
            snprintf(buf, len, "an empty table");
        }
        break;
    }
    default: snprintf(buf, len, "a %s", luaL_typename(L, idx)); break;
    }
    return buf;
}

void tb_rb_check_keys(lua_State *L, int idx, const char *what, const char *const *allowed) {
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        char v[96];
        if (lua_type(L, -2) != LUA_TSTRING) {
            char k[96];
            tb_rb_error(L, "%s: a value without a name ([%s] = %s): give key = value", what,
                        tb_rb_describe(L, -2, k, sizeof k), tb_rb_describe(L, -1, v, sizeof v));
        }
        const char *key = lua_tostring(L, -2);
        int known = 0;
        for (int i = 0; allowed[i] && !known; i++) known = !strcmp(key, allowed[i]);
        if (!known) {
            char list[512] = "";
            size_t used = 0;
            for (int i = 0; allowed[i] && used < sizeof list; i++)
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", allowed[i]);
            tb_rb_error(L, "%s: unknown key '%s' (it takes %s)", what, key, list);
        }
        lua_pop(L, 1);
    }
}

int tb_rb_integer(lua_State *L, int idx, lua_Integer *out) {
    // a float with an integral value (2.0, 1e3: what Lua arithmetic and tb.param may give) is
    // that integer; 1.5 is not truncated, and a string is not a number here
    int exact = 0;
    if (lua_type(L, idx) == LUA_TNUMBER) *out = lua_tointegerx(L, idx, &exact);
    return exact;
}

// Pushes t[key] of the table at idx: 0 (nothing pushed) when it is absent and not required.
static int get_field(lua_State *L, int idx, const char *what, const char *key, int required) {
    if (lua_getfield(L, idx, key) != LUA_TNIL) return 1;
    lua_pop(L, 1);
    if (required) tb_rb_error(L, "%s: %s is required", what, key);
    return 0;
}

int tb_rb_get_string(lua_State *L, int idx, const char *what, const char *key, int required, const char **out) {
    if (!get_field(L, idx, what, key, required)) return 0;
    char v[96];
    if (lua_type(L, -1) != LUA_TSTRING || lua_rawlen(L, -1) == 0)
        tb_rb_error(L, "%s: %s must be a non-empty string (got %s)", what, key, tb_rb_describe(L, -1, v, sizeof v));
    *out = lua_tostring(L, -1);  // the table holds the string: it outlives the pop
    lua_pop(L, 1);
    return 1;
}

int tb_rb_get_integer(lua_State *L, int idx, const char *what, const char *key, int required, lua_Integer min,
                      lua_Integer *out) {
    if (!get_field(L, idx, what, key, required)) return 0;
    char v[96];
    if (!tb_rb_integer(L, -1, out) || *out < min)
        tb_rb_error(L, "%s: %s must be an integer >= %lld (got %s)", what, key, (long long)min,
                    tb_rb_describe(L, -1, v, sizeof v));
    lua_pop(L, 1);
    return 1;
}

int tb_rb_get_number(lua_State *L, int idx, const char *what, const char *key, int required, double min,
                     double *out) {
    if (!get_field(L, idx, what, key, required)) return 0;
    char v[96];
    if (lua_type(L, -1) != LUA_TNUMBER || !isfinite(lua_tonumber(L, -1)) || lua_tonumber(L, -1) < min) {
        char bound[48] = "";
        if (isfinite(min)) snprintf(bound, sizeof bound, " >= %g", min);
        tb_rb_error(L, "%s: %s must be a finite number%s (got %s)", what, key, bound,
                    tb_rb_describe(L, -1, v, sizeof v));
    }
    *out = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return 1;
}

// A table that tb_lua_to_json turns into an array: keys exactly 1..n, n >= 1. A table with
// both (or gaps) would lose its other keys there; 0 for such a table, 1 for a list, and -1 for a
// table of string keys only (an object; also the empty table).
static int table_shape(lua_State *L, int idx) {
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx), count = 0;
    int strings = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        count++;
        strings += lua_type(L, -2) == LUA_TSTRING;
        lua_pop(L, 1);
    }
    if (n > 0 && count == n) return 1;
    return strings == count && n == 0 ? -1 : 0;
}

int tb_rb_is_list(lua_State *L, int idx) { return table_shape(L, lua_absindex(L, idx)) == 1; }

void tb_rb_check_plain_table(lua_State *L, int idx, const char *what, const char *name) {
    if (lua_getmetatable(L, idx)) {
        lua_pop(L, 1);
        tb_rb_error(L, "%s: %s has a metatable: its fields are read as they are stored, so __index or "
                       "__pairs would be ignored (not supported: pass a plain table, e.g. a copy)",
                    what, name);
    }
}

// tb_rb_check_json below the path `at` (a buffer of at least 256 bytes holding the name so far).
static void check_json(lua_State *L, int idx, const char *what, char *at, size_t len, int depth) {
    idx = lua_absindex(L, idx);
    luaL_checkstack(L, 4, "a nested table");  // each level holds a key and a value
    char v[96];
    switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN:
    case LUA_TSTRING: return;
    case LUA_TNUMBER:
        if (!isfinite(lua_tonumber(L, idx)))
            tb_rb_error(L, "%s: %s must be a finite number (got %s)", what, at, tb_rb_describe(L, idx, v, sizeof v));
        return;
    case LUA_TTABLE: break;
    default:
        tb_rb_error(L, "%s: %s must be a number, string, boolean or table (got %s)", what, at,
                    tb_rb_describe(L, idx, v, sizeof v));
    }
    if (depth > 16) tb_rb_error(L, "%s: %s is nested more than 16 tables deep (a table that holds itself?)", what, at);
    tb_rb_check_plain_table(L, idx, what, at);
    int shape = table_shape(L, idx);
    if (shape == 0)
        tb_rb_error(L, "%s: %s mixes a list with named keys (or has gaps): give a list {a, b} or a table {k = v}",
                    what, at);
    size_t end = strlen(at);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (shape == 1) snprintf(at + end, len - end, "[%lld]", (long long)lua_tointeger(L, -2));
        else snprintf(at + end, len - end, ".%s", lua_tostring(L, -2));
        check_json(L, -1, what, at, len, depth + 1);
        at[end] = '\0';
        lua_pop(L, 1);
    }
}

void tb_rb_check_json(lua_State *L, int idx, const char *what, const char *name) {
    char at[512];
    snprintf(at, sizeof at, "%s", name);
    check_json(L, idx, what, at, sizeof at, 0);
}

int tb_rb_check_scalar(lua_State *L, int idx, const char *what, const char *name) {
    char v[96];
    int t = lua_type(L, idx);
    if (t != LUA_TBOOLEAN && t != LUA_TSTRING && t != LUA_TNUMBER)
        tb_rb_error(L, "%s: %s must be a number, string or boolean (got %s)", what, name,
                    tb_rb_describe(L, idx, v, sizeof v));
    if (t == LUA_TNUMBER && !isfinite(lua_tonumber(L, idx)))
        tb_rb_error(L, "%s: %s must be a finite number (got %s)", what, name, tb_rb_describe(L, idx, v, sizeof v));
    return t;
}
