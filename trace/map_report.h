// map_report.h — the analysis of `tracebook map` as JSON (what `map --json` writes and the
// text output shows): per runtime range name its figures (count, total, mean, per rank,
// communicator shapes), its sites with their chains from the entry point and the
// collectives below them (with how often the traces show each inside the range), the
// nestings (map_nesting.h) and the coverage.
#ifndef TB_TRACE_MAP_REPORT_H
#define TB_TRACE_MAP_REPORT_H

#include <jansson.h>
#include <stddef.h>

#include "map.h"

json_t *tb_map_report(tb_map *m);

// A chain's hops as JSON ({function, file, line, via, passed_to, callback} each), the last at
// last_file:last_line.
json_t *tb_map_chain_json(const tb_graph *g, const tb_chain *c, int last_file, int last_line);
// A range site as JSON: {pattern, function, file, line, end_line, continues_in_callers, chain
// (its hops from the entry point, null when none reaches it)}; *has_chain says which.
json_t *tb_map_site_json(tb_map *m, int r, int *has_chain);
// Hop list of a collective chain as JSON / text.
json_t *tb_map_coll_json(tb_map *m, const tb_coll_chain *c);
void tb_map_coll_text(tb_map *m, const tb_coll_chain *c, char *buf, size_t len);
// "f (file:line) → g (file:line, via record.field) → ..." from a JSON hop list, into buf
// (cut with "..." when it does not fit).
void tb_map_hops_text(json_t *hops, char *buf, size_t len);

// Durations for people: "12.3 us", "1.234 ms", "2.345 s".
void tb_format_ns(double ns, char *buf, size_t len);

#endif
