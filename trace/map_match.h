// map_match.h — runtime range names ↔ push sites: a site's literal name or printf pattern
// (TB_RANGE_PUSH("layer.%d.mlp")) matched against the names the traces show.
#ifndef TB_TRACE_MAP_MATCH_H
#define TB_TRACE_MAP_MATCH_H

#include "graph.h"
#include "map_events.h"

// 1 when the runtime name matches the whole site pattern: %d %i → an integer, %u %x %o →
// digits, %s → any text, %c → one character, %% → %, flags/width/length modifiers allowed.
int tb_range_pattern_match(const char *pattern, const char *name);

// How many characters of a site pattern are literal text ("layer.%d.mlp" 10, "%s" 0).
int tb_range_pattern_literals(const char *pattern);

// Per runtime name of rt: the push sites (indices in g->ranges) in scope whose pattern
// matches it, the most specific first (more literal characters: "layer.%d.mlp.fc2" before a
// helper's "%s"), index order among equals. Both arrays are malloc'd (nnames entries, each freed too).
void tb_match_sites(const tb_graph *g, int scope, const tb_rt *rt, int ***sites, int **nsites);

#endif
