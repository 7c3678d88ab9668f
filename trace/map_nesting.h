// map_nesting.h — the runtime nesting checked against the static model: each distinct
// parent → child pair of range names the traces show (child directly inside parent, same
// rank and thread) is explained when the child's push site is inside the parent's span
// (or where the parent's range continues in a caller), or the child's site function is
// reachable from the calls inside the span.
#ifndef TB_TRACE_MAP_NESTING_H
#define TB_TRACE_MAP_NESTING_H

#include <jansson.h>

#include "map.h"

// [{parent, child, count, explained, how | why}] in order of first appearance;
// *unexplained set to how many are not explained.
json_t *tb_map_nestings(tb_map *m, int *unexplained);

#endif
