// hang_analysis.h — whom a hang is waiting for, root cause first (the analysis of PyTorch's
// flight-recorder analyzer, fr_trace, and of NVIDIA's resiliency tools): from every rank
// stuck in a call, follow the members of that call that are not in it with it —
//   a collective waits for every member of its group to enter the same sequence number;
//   a send or recv waits for its peer —
// to the ranks that wait for nothing. Each such rank is a root cause:
//   "absent":   it is in no call at all (computing, stalled or gone), so it never entered
//               the call the others wait in;
//   "mismatch": it is in the same group's call at another sequence number, or in the same
//               call with another op or element count (the collectives can never match).
// A stuck rank waiting for another stuck rank is a victim, not a cause. The verdict depends
// only on what every rank is doing, not on which rank's watchdog fired first.
#ifndef TB_COMM_HANG_ANALYSIS_H
#define TB_COMM_HANG_ANALYSIS_H

#include <jansson.h>
#include <stddef.h>

#include "comm/flight_recorder.h"

struct tb_world;

// pending[r] / completed[r]: rank r's open call and newest finished one (NULL: none);
// known[r]: whether rank r was seen (it runs in this process). Returns the root causes as a
// JSON array of {"rank", "rank_label", "kind", "reason", "waited_for_by" [ranks],
// "group", "group_members", "last_completed", "step", "microbatch", "phase"}, ordered by
// rank, and appends one line per cause to text ("    rank 3 (...): never entered ...").
json_t *tb_hang_root_cause(struct tb_world *w, const tb_flight_entry *const *pending,
                           const tb_flight_entry *const *completed, const int *known, char *text, size_t len);

#endif
