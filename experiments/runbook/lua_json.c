// lua_json.c — JSON values to and from Lua (lua_json.h).
#include "runbook/lua_json.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

void tb_lua_push_json(lua_State *L, const json_t *j) {
    if (json_is_object(j)) {
        lua_newtable(L);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            tb_lua_push_json(L, v);
            lua_setfield(L, -2, k);
        }
    } else if (json_is_array(j)) {
        lua_newtable(L);
        for (size_t i = 0; i < json_array_size(j); i++) {
            tb_lua_push_json(L, json_array_get(j, i));
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
    } else if (json_is_integer(j)) lua_pushinteger(L, (lua_Integer)json_integer_value(j));
    else if (json_is_real(j)) lua_pushnumber(L, json_real_value(j));
    else if (json_is_string(j)) lua_pushstring(L, json_string_value(j));
    else if (json_is_boolean(j)) lua_pushboolean(L, json_is_true(j));
    else lua_pushnil(L);
}

json_t *tb_lua_to_json(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    luaL_checkstack(L, 4, "a nested table");
    switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: return json_boolean(lua_toboolean(L, idx));
    case LUA_TNUMBER:
        return lua_isinteger(L, idx) ? json_integer((json_int_t)lua_tointeger(L, idx)) : json_real(lua_tonumber(L, idx));
    case LUA_TSTRING: return json_string(lua_tostring(L, idx));
    case LUA_TTABLE: {
        lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
        if (n > 0) {
            json_t *a = json_array();
            for (lua_Integer i = 1; i <= n; i++) {
                lua_rawgeti(L, idx, i);
                json_array_append_new(a, tb_lua_to_json(L, -1));
                lua_pop(L, 1);
            }
            return a;
        }
        json_t *o = json_object();
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            if (lua_type(L, -2) == LUA_TSTRING) json_object_set_new(o, lua_tostring(L, -2), tb_lua_to_json(L, -1));
            lua_pop(L, 1);
        }
        return o;
    }
    default: return json_null();
    }
}

static int cmp_key(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

const char **tb_json_sorted_keys(json_t *obj, size_t *n) {
    *n = json_object_size(obj);
    const char **keys = tb_xcalloc(*n ? *n : 1, sizeof *keys, "JSON object keys");
    size_t i = 0;
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) keys[i++] = key;
    qsort(keys, *n, sizeof *keys, cmp_key);
    return keys;
}
