// walk_origin.h — for `tracebook walk`: where a collective hop's group comes from (the group
// argument at the call, the record field it is read from, where that record is filled and
// where the parallel_state group kind is looked up), the coordinates the group spans at
// runtime, and the stream or device the chain's backend runs on.
#ifndef TB_TRACE_WALK_ORIGIN_H
#define TB_TRACE_WALK_ORIGIN_H

#include "map.h"

// The runtime group name ("tp") of the communicator events inside runtime range `name` that
// chain cc's collective records, NULL when the traces have none (or name < 0).
const char *tb_walk_rt_group(const tb_map *m, int name, const tb_coll_chain *cc);

// "Group:" paragraph for chain cc: static origin from the source, then (rt_group set) the
// group ids, members and the coordinates they span from the trace args.
void tb_walk_group(tb_map *m, int name, const tb_coll_chain *cc, const char *rt_group);

// "Stream/device:" line for chain cc (NCCL: the stream argument of the library call and
// where the stream is created; local and MPI backends: the host).
void tb_walk_stream(tb_map *m, const tb_coll_chain *cc);

#endif
