// hang_cli.h — `tracebook hang RUN`: the hang report of a run, merged from every part its
// processes wrote (core/failure_report.h).
//
//   tracebook hang RUN [--json] [--write] [--artifacts DIR]
//
// RUN is a run id, a record (its run/) or a run directory (core/run_arg.h). Reads every hang.rank-NNNNN.json there
// and merges them: the ranks that reported, the ranks that wrote no part (absent: their
// process was killed first, or never timed out), each absent rank's last call as its peers
// saw it, the stuck ranks by group, the peers absent from the call that timed out. Prints
// the summary (or, with --json, the merged report); says when the hang.json on disk was
// merged from fewer parts. --write rewrites the run directory's hang.json with this merge (refused in a
// record, whose files its manifest hashes). Exit status 0; 1 when there is no part to merge
// or the directory cannot be read; 2 for a bad command line.
#ifndef TB_EXPERIMENTS_HANG_CLI_H
#define TB_EXPERIMENTS_HANG_CLI_H

int tracebook_hang_main(int argc, char **argv);

#endif
