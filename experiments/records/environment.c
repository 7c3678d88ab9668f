// environment.c — what a manifest records of the environment: an allow-list of names, a
// deny-list that wins, and every value that carries credentials replaced by a marker. The
// contract is provenance.h ("Environment and host").
#define _GNU_SOURCE  // FNM_CASEFOLD

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "records/provenance.h"

// ---------------------------------------------------------------------------------------
// Environment

const char *const tb_default_env_allow[] = {
    "OMP_*",          "GOMP_*",         "OPENBLAS_*",     "CUDA_*",          "NCCL_*",
    "TB_*",           "LANG",           "LC_*",           "PATH",            "LD_LIBRARY_PATH",
    "LD_PRELOAD",     "LIBRARY_PATH",   "CPATH",          "C_INCLUDE_PATH",  "CPLUS_INCLUDE_PATH",
    "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH", "LUA_PATH",   "LUA_CPATH",       "LUA_PATH_5_4",
    "LUA_CPATH_5_4",  NULL};
const char *const tb_default_env_deny[] = {"*PASS*",       "*PWD*", "*AUTH*",   "*SECRET*",  "*TOKEN*", "*KEY*",
                                           "*CREDENTIAL*", "*DSN*", "*COOKIE*", "*SESSION*", NULL};

static int is_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// 2 when some "scheme://user:password@host" in s has a non-empty password, 1 when some URL
// has a userinfo without one ("scheme://user@host": a Sentry DSN's key, a token used as the
// user name), 0 when none has. The authority ends at the first '/', '?', '#', whitespace or
// list separator (',' ';'), so a value that lists several URLs is read URL by URL; its
// userinfo is what precedes its last '@'.
static int url_userinfo(const char *s) {
    int found = 0;
    for (const char *p = strstr(s, "://"); p; p = strstr(p + 1, "://")) {
        const char *auth = p + 3, *end = auth + strcspn(auth, "/?#,; \t\n");
        const char *at = NULL;
        for (const char *q = auth; q < end; q++)
            if (*q == '@') at = q;
        if (!at || at == auth) continue;
        const char *colon = memchr(auth, ':', (size_t)(at - auth));
        if (colon && colon + 1 < at) return 2;
        found = 1;
    }
    return found;
}

static int is_base64url(char c) { return is_alnum(c) || c == '-' || c == '_'; }

// Whether a JSON Web Token starts at p: "eyJ" (the base64url of '{"'), then three base64url
// segments of at least 8 characters separated by '.' (header, payload, signature).
static int jwt_at(const char *p) {
    if (strncmp(p, "eyJ", 3)) return 0;
    for (int seg = 0; seg < 3; seg++) {
        int len = 0;
        while (is_base64url(p[len])) len++;
        if (len < 8) return 0;
        p += len;
        if (seg < 2 && *p++ != '.') return 0;
    }
    return 1;
}

// A family of tokens: its prefix ('?' matches one lower-case letter), the characters of its
// body beyond letters and digits, the body's shortest length (exact: no longer either), and
// how many of {upper, lower, digit} the body must mix (random base62 mixes them; words and
// paths seldom do).
typedef struct token_family {
    const char *prefix, *extra_chars;
    int min_len, exact, classes;
    const char *marker;
} token_family;

static const token_family token_families[] = {
    {"github_pat_", "_", 22, 0, 2, "<redacted: token (github_pat_...)>"},
    {"ghp_", "", 30, 0, 2, "<redacted: token (ghp_...)>"},
    {"gho_", "", 30, 0, 2, "<redacted: token (gho_...)>"},
    {"ghu_", "", 30, 0, 2, "<redacted: token (ghu_...)>"},
    {"ghs_", "", 30, 0, 2, "<redacted: token (ghs_...)>"},
    {"ghr_", "", 30, 0, 2, "<redacted: token (ghr_...)>"},
    {"glpat-", "_-", 20, 0, 2, "<redacted: token (glpat-...)>"},
    {"hf_", "", 30, 0, 2, "<redacted: token (hf_...)>"},
    {"npm_", "", 30, 0, 2, "<redacted: token (npm_...)>"},
    {"xox?-", "-", 20, 0, 1, "<redacted: Slack token (xoxb-, xoxp-, ...)>"},
    {"sk-", "_-", 20, 0, 3, "<redacted: API key (sk-...)>"},
    {"AKIA", "", 16, 1, 1, "<redacted: AWS access key id (AKIA...)>"},
    {"ASIA", "", 16, 1, 1, "<redacted: AWS access key id (ASIA...)>"},
};

// Whether a token of family f starts at p.
static int token_at(const char *p, const token_family *f) {
    size_t pl = strlen(f->prefix);
    for (size_t i = 0; i < pl; i++)
        if (f->prefix[i] == '?' ? !(p[i] >= 'a' && p[i] <= 'z') : p[i] != f->prefix[i]) return 0;
    const char *body = p + pl;
    int len = 0, upper = 0, lower = 0, digit = 0;
    for (; body[len] && (is_alnum(body[len]) || strchr(f->extra_chars, body[len])); len++) {
        upper |= body[len] >= 'A' && body[len] <= 'Z';
        lower |= body[len] >= 'a' && body[len] <= 'z';
        digit |= body[len] >= '0' && body[len] <= '9';
    }
    if (f->exact) {  // AWS key ids: upper case and digits only, exactly min_len of them
        return len == f->min_len && !lower;
    }
    return len >= f->min_len && upper + lower + digit >= f->classes;
}

const char *tb_credential_marker(const char *value) {
    const int userinfo = url_userinfo(value);
    if (userinfo == 2) return "<redacted: credentials in URL>";
    for (const char *p = value; *p; p++) {  // a known token names itself, in a URL's user too
        if (p > value && is_alnum(p[-1])) continue;  // a token starts a word
        if (jwt_at(p)) return "<redacted: JSON Web Token (eyJ...)>";
        for (size_t i = 0; i < sizeof token_families / sizeof *token_families; i++)
            if (token_at(p, &token_families[i])) return token_families[i].marker;
    }
    return userinfo ? "<redacted: user name in URL>" : NULL;
}

const char **tb_globs_with(const char *const *defaults, const char *const *extra, int n) {
    int nd = 0;
    while (defaults[nd]) nd++;
    const char **v = tb_xcalloc((size_t)nd + (size_t)(n > 0 ? n : 0) + 1, sizeof *v, "environment globs");
    for (int i = 0; i < nd; i++) v[i] = defaults[i];
    for (int i = 0; i < n; i++) v[nd + i] = extra[i];
    return v;
}

static int matches_any(const char *const *globs, const char *name, int flags) {
    for (const char *const *g = globs; *g; g++)
        if (fnmatch(*g, name, flags) == 0) return 1;
    return 0;
}

static json_t *string_array(const char *const *v) {
    json_t *a = json_array();
    for (; a && *v; v++)
        if (json_array_append_new(a, tb_json_string_lossy(*v))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

json_t *tb_environment_json(char **environ_like, const char *const *allow_globs, const char *const *deny_globs,
                            json_t **filter) {
    if (!allow_globs) allow_globs = tb_default_env_allow;
    if (!deny_globs) deny_globs = tb_default_env_deny;
    if (filter) *filter = NULL;
    json_t *o = json_object(), *left_out = json_array(), *redacted = json_array();
    int fail = !o || !left_out || !redacted;
    for (char **e = environ_like; !fail && e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        size_t nl = (size_t)(eq - *e);
        char *name = tb_xmalloc(nl + 1, "environment variable name");
        memcpy(name, *e, nl);
        name[nl] = '\0';
        // allow: exact case, as the names are; deny: any case, a safety net for the spellings
        // an allow glob did not foresee (TB_api_key)
        int kept = matches_any(allow_globs, name, 0) && !matches_any(deny_globs, name, FNM_CASEFOLD);
        json_t *valid = json_string(name);  // jansson keys must be UTF-8
        if (!valid)
            for (char *p = name; *p; p++)
                if ((unsigned char)*p >= 0x80) *p = '?';
        json_decref(valid);
        if (json_object_get(o, name)) {
            // a repeated name: the first one was recorded, the rest is not the environment
        } else if (!kept) {
            fail = json_array_append_new(left_out, json_string(name));
        } else {
            const char *marker = tb_credential_marker(eq + 1);
            fail = json_object_set_new(o, name, tb_json_string_lossy(marker ? marker : eq + 1));
            if (!fail && marker) fail = json_array_append_new(redacted, json_string(name));
        }
        free(name);
    }
    // a name left out twice is one name
    if (!fail) fail = tb_json_sort_strings(left_out) || tb_json_sort_strings(redacted);
    for (size_t i = json_array_size(left_out); !fail && i-- > 1;)
        if (!strcmp(json_string_value(json_array_get(left_out, i)), json_string_value(json_array_get(left_out, i - 1))))
            json_array_remove(left_out, i);
    if (!fail && filter) {
        json_t *allow = string_array(allow_globs), *deny = string_array(deny_globs);
        *filter = json_pack("{s:o?, s:o?, s:I, s:O, s:O}", "allow", allow, "deny", deny, "left_out",
                            (json_int_t)json_array_size(left_out), "left_out_names", left_out, "redacted", redacted);
        fail = !*filter;
    }
    json_decref(left_out);
    json_decref(redacted);
    if (fail) {
        json_decref(o);
        return NULL;
    }
    return o;
}

