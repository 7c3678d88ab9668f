// provenance.h — what a run record says about where a run came from (docs/ARCHITECTURE.md,
// "Experiments"; the manifest fields in record.h): the git state of the source tree, the
// environment, the host, and the SHA-256 of files. The run recorder calls these; replay
// calls tb_git_worktree_at and tb_git_apply_patch to rebuild the tree a run saw.
//
// Git goes through libgit2 (no git CLI), hashing through OpenSSL's EVP API, JSON through
// jansson. Functions that can fail return 0 / -1 and fill a tb_error (core/error.h) that
// names what failed, the path or commit, and libgit2's or the OS's reason. Host memory comes
// from core/xalloc.h: running out ends the process (docs/ARCHITECTURE.md, "Memory and errors").
//
// Git state, as the manifest's "git" object records it:
//   commit     the 40-hex HEAD commit. A repository whose HEAD has no commit yet (an
//              unborn branch, right after `git init`) is an ERROR: a run with no commit
//              cannot be replayed. Commit first.
//   branch     the shorthand of HEAD's branch ("main"), or "HEAD" when HEAD is detached.
//   changed    tracked paths that differ from HEAD in the index or the work tree: modified,
//              added to the index, deleted, type changes and conflicts. No rename
//              detection: a staged rename lists the old path (deleted) and the new one
//              (added); a rename not yet staged lists the old path here and the new one in
//              `untracked`. Repo-relative, '/'-separated, sorted (strcmp).
//   untracked  files in the work tree that are neither tracked nor ignored (.gitignore,
//              .git/info/exclude and core.excludesFile are honoured). Untracked
//              directories are listed file by file. Sorted.
//   patch      `git diff HEAD` with binary content (`--binary`): the diff of HEAD's tree
//              against the work tree through the index. Untracked files are NOT in it —
//              they are listed by name only, so replay cannot bring back their content (a
//              staged new file is in it). Replay refuses a record whose untracked files
//              include a build source (tb_git_is_build_source): CMakeLists.txt globs the
//              sources, so the run's engine may have compiled it.
//   dirty      1 when `changed` is non-empty or the patch is non-empty; untracked files
//              alone leave the tree clean (as `git describe --dirty` counts it).
//   When clean, patch is NULL, patch_len 0 and patch_sha256 "".
//
// Replay: tb_git_worktree_at(repo, commit, dest) makes dest a repository of its own whose
// object store borrows the source repository's (an alternates file, as `git clone
// --shared` does — dest needs the source repository to stay where it is), with the
// commit's tree checked out and HEAD detached at it. tb_git_apply_patch(dest, patch) then
// applies the saved patch to dest's work tree AND index, so tb_git_describe(dest) gives
// back the same patch and patch_sha256 that were recorded: a replay can prove it rebuilt
// the very tree the run saw.
#ifndef TB_EXPERIMENTS_PROVENANCE_H
#define TB_EXPERIMENTS_PROVENANCE_H

#include <jansson.h>
#include <stddef.h>

#include "core/error.h"

// ---------------------------------------------------------------------------------------
// Git

typedef struct tb_git_state {
    char *root;             // the work tree's absolute path, no trailing '/' (malloc'd)
    char commit[41];        // HEAD's commit, 40 lowercase hex
    char *branch;           // "main", or "HEAD" when detached (malloc'd)
    int dirty;              // see above
    json_t *changed;        // array of repo-relative paths (owned)
    json_t *untracked;      // array of repo-relative paths (owned)
    char *patch;            // unified patch text, NUL-terminated; NULL when clean (malloc'd)
    size_t patch_len;       // its length in bytes, without the NUL
    char patch_sha256[65];  // SHA-256 hex of the patch's patch_len bytes; "" when clean
} tb_git_state;

// Describes the repository that contains `path` (a directory anywhere inside the work
// tree; the search walks up, not across filesystems). Fills *out (the caller frees it with
// tb_git_state_free, also after a failure). Errors: not inside a repository (names the
// path), a bare repository, no commit yet, or a libgit2 failure.
int tb_git_describe(const char *path, tb_git_state *out, tb_error *err);
void tb_git_state_free(tb_git_state *g);  // frees the members and zeroes *g; NULL is fine

// The manifest's "git" object: commit, branch, dirty, changed, untracked, and — only when
// g->patch is not NULL — "patch": patch_file (the name the caller saved g->patch under in
// the record, e.g. "git.patch"; JSON null when patch_file is NULL) and "patch_sha256".
// The arrays are copies. Returns NULL only when out of memory.
json_t *tb_git_state_json(const tb_git_state *g, const char *patch_file);

// Whether a repo-relative path is a file a build may read as source: C, C++ and CUDA
// sources and headers (.c .h .cc .cpp .cxx .hpp .hh .cu .cuh .inc) and CMake's own files
// (CMakeLists.txt, *.cmake), by name alone, anywhere in the tree: whether the build read an
// untracked file cannot be asked, so one outside every glob counts too (the refusal errs on
// the safe side). A source git ignores (.gitignore, info/exclude) is not untracked and not
// seen here; the globs would still compile it.
int tb_git_is_build_source(const char *path);

// Of an "untracked" array (tb_git_state.untracked, or a manifest's git object's), the build
// sources: how many, and their paths written to buf (", "-separated; the first few, then
// "and N more", always NUL-terminated). The message of whoever refuses them: `tracebook run
// --require-clean` and `tracebook replay`.
size_t tb_git_untracked_sources(const json_t *untracked, char *buf, size_t len);

// Applies a patch saved from tb_git_state.patch to the work tree and index of the
// repository whose work tree root is exactly repo_dir (no search upwards, so a directory
// that is not a repository is an error, never its enclosing repository). Nothing is
// written unless the whole patch applies. Errors: text that is not a git patch, a patch
// that no longer applies (content differs, file missing or already present) — the message
// says "does not apply" and names repo_dir.
int tb_git_apply_patch(const char *repo_dir, const char *patch_text, size_t len, tb_error *err);

// Materialises `commit` (40 hex, an abbreviation, or any revision libgit2 parses, e.g. a
// branch name) of the repository containing repo_path into dest_dir, which must not exist
// or be an empty directory (created with its parents). See "Replay" above for what dest
// becomes. Errors: the commit is not in the repository (names it), dest_dir not empty,
// libgit2 failures. A failure after dest_dir was created leaves it for the caller to
// inspect or remove.
int tb_git_worktree_at(const char *repo_path, const char *commit, const char *dest_dir, tb_error *err);

// ---------------------------------------------------------------------------------------
// Hashing (SHA-256, lowercase hex)

// Always succeeds in practice; if libcrypto fails, hex is "".
void tb_sha256_hex(const void *data, size_t len, char hex[65]);
// Streams the file (64 KiB at a time). Errors name the path and the OS's reason.
int tb_sha256_file(const char *path, char hex[65], tb_error *err);
// The same over an open descriptor, read to its end (path names it in the errors).
int tb_sha256_fd(int fd, const char *path, char hex[65], tb_error *err);

// {"relative/path": "hex", ...} for every regular file under dir, recursively, in sorted
// (strcmp) order of their '/'-separated relative paths. Symbolic links and other
// non-regular files are not followed and not listed. A regular file named skip_name
// directly in dir (not in subdirectories) is left out — e.g. "manifest.json", which holds
// this very object; skip_name NULL skips nothing. On success *files is a new object; on
// failure *files is NULL and the error names the file or directory.
int tb_hash_tree(const char *dir, const char *skip_name, json_t **files, tb_error *err);

// ---------------------------------------------------------------------------------------
// Environment and host

// What a manifest records of the environment: only the names an allow-list admits, never
// the names a deny-list names, and no value that carries credentials. The environment of a
// shell holds whatever the user's tools put there (DATABASE_URL=postgres://u:pw@..., GH_PAT,
// SENTRY_DSN, proxies with passwords): a deny-list of name patterns misses most of it, so
// what is recorded is chosen, not filtered.
//
// The default allow-list (fnmatch globs, case-sensitive as environment names are; NULL-
// terminated): what changes how the engine computes or where its libraries and the runbook's
// modules come from —
//   threads and BLAS   OMP_*  GOMP_*  OPENBLAS_*
//   GPUs               CUDA_*  NCCL_*
//   tracebook itself   TB_*
//   locale             LANG  LC_*
//   search paths       PATH  LD_LIBRARY_PATH  LD_PRELOAD  LIBRARY_PATH  CPATH
//                      C_INCLUDE_PATH  CPLUS_INCLUDE_PATH  PKG_CONFIG_PATH  CMAKE_PREFIX_PATH
//                      LUA_PATH  LUA_CPATH  LUA_PATH_5_4  LUA_CPATH_5_4
extern const char *const tb_default_env_allow[];
// Names never recorded even when an allow glob admits them (the deny-list wins; fnmatch,
// case-insensitive): *PASS* *PWD* *AUTH* *SECRET* *TOKEN* *KEY* *CREDENTIAL* *DSN* *COOKIE*
// *SESSION*. A value under such a name is never recorded, however it looks.
extern const char *const tb_default_env_deny[];

// The marker that replaces a value carrying credentials — "<redacted: credentials in URL>",
// "<redacted: token (ghp_...)>" — or NULL when value carries none. What counts:
//   - a URL of any scheme ("scheme://", so https, postgres, redis, git+ssh, ...) whose
//     authority has a userinfo: "scheme://user:password@host" ("credentials in URL"), and a
//     user alone too ("user name in URL": "ssh://git@host", a Sentry DSN's key, a token
//     passed as the user). scp-like "git@host:path" and e-mail addresses are not URLs.
//   - a JSON Web Token: "eyJ" and three base64url segments of 8 or more, joined by '.'.
//   - a known token prefix at the start of a word (the value's start, or after a character
//     that is not a letter or digit), followed by the token's body: at least `min` of the
//     characters that family uses, and — where the family is random base62 — a mix of at
//     least two of upper case, lower case and digits, so that "/data/hf_cache" is a path,
//     not a token:
//       ghp_ gho_ ghu_ ghs_ ghr_ (GitHub)  github_pat_  glpat- (GitLab)  hf_ (Hugging Face)
//       npm_  xox?- (Slack: xoxb-, xoxp-, ...)  sk- (API keys; upper, lower and digits)
//       AKIA / ASIA (AWS access key ids: exactly 16 upper-case letters or digits follow)
const char *tb_credential_marker(const char *value);

// A NULL-terminated list: `defaults` then the n strings of extra (not copied; free the
// array only).
const char **tb_globs_with(const char *const *defaults, const char *const *extra, int n);

// {"NAME": "VALUE", ...} for every "NAME=VALUE" string of environ_like (NULL-terminated,
// like `environ`) whose NAME matches one of allow_globs (NULL: tb_default_env_allow) and
// none of deny_globs (case-insensitive; NULL: tb_default_env_deny, {NULL} denies nothing).
// A value that tb_credential_marker flags is recorded as its marker. Strings without '='
// are skipped; when a name repeats, the first one wins (as getenv does).
// filter (when not NULL) gets what a reader needs to know the record is partial — names,
// never values:
//   {"allow": [globs], "deny": [globs], "left_out": N, "left_out_names": [sorted names],
//    "redacted": [sorted names whose value was replaced by its marker]}
// Returns NULL only when out of memory.
json_t *tb_environment_json(char **environ_like, const char *const *allow_globs, const char *const *deny_globs,
                            json_t **filter);

// JSON helpers shared by provenance.c and environment.c: a string that may not be valid
// UTF-8 (every byte >= 0x80 then becomes '?'), and an array of strings sorted in place
// (strcmp order; 0, or -1).
json_t *tb_json_string_lossy(const char *s);
int tb_json_sort_strings(json_t *array);

// The manifest's "host" object:
//   hostname, cpu_model (/proc/cpuinfo "model name", null when absent), cores (online CPUs),
//   memory_bytes (physical memory),
//   gpus        [{"model": "...", "bus": "0000:..."}] from /proc/driver/nvidia/gpus/*/information
//               ([] without the NVIDIA driver),
//   driver      the NVIDIA kernel driver version ("550.54.15"), null without it,
//   cuda        the CUDA toolkit version this build was compiled against (from CMake),
//               null when built without CUDA,
//   cuda_driver the newest CUDA version the installed driver supports (cuDriverGetVersion
//               through dlopen("libcuda.so.1"); no CUDA is linked), null without it,
//   nccl        the NCCL library the dynamic loader finds (ncclGetVersion through
//               dlopen("libnccl.so.2")), null without it,
//   compiler    "gcc 12.2.0" / "clang 19.1.7" (this translation unit's compiler),
//   build_type  "Release" when NDEBUG was defined, else "Debug",
//   notes       [strings] why each null above is null (absent when none is).
// Nothing here initialises a GPU. Returns NULL only when out of memory.
json_t *tb_host_json(void);

#endif
