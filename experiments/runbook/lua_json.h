// lua_json.h — JSON values to and from Lua, for the runbook host (runbook_host.h): configs
// and results cross between a runbook's tables and the records' JSON files.
#ifndef TB_EXPERIMENTS_LUA_JSON_H
#define TB_EXPERIMENTS_LUA_JSON_H

#include <jansson.h>
#include <lua.h>
#include <stddef.h>

// Pushes j as a Lua value: objects and arrays as tables (arrays 1-based), null as nil.
void tb_lua_push_json(lua_State *L, const json_t *j);
// The Lua value at idx as a new JSON value: a table with keys 1..n becomes an array, any other
// table an object of its string keys; functions and other values become null.
json_t *tb_lua_to_json(lua_State *L, int idx);
// The keys of a JSON object in strcmp order (jansson keeps insertion order), *n of them; the
// array is the caller's to free, the keys stay the object's.
const char **tb_json_sorted_keys(json_t *obj, size_t *n);

#endif
