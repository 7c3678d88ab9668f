// signing.c — Ed25519 signatures over ledger heads through OpenSSL (signing.h).
#include "records/signing.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "records/anchor.h"
#include "records/catalog.h"
#include "core/fileio.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "records/provenance.h"
#include "records/recorder.h"

#define MESSAGE_PREFIX "tracebook ledger head v1\n"

struct tb_public_key {
    EVP_PKEY *pkey;
    char id[TB_KEY_ID_MAX];
    char hex[65];  // the raw 32-byte public key
};

static void to_hex(const unsigned char *b, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static int from_hex(const char *s, unsigned char *out, size_t n) {
    if (!s || strlen(s) != 2 * n) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        out[i] = (unsigned char)v;
    }
    return 0;
}

static const char *ssl_error(void) {
    static char buf[256];
    unsigned long e = ERR_get_error();
    if (!e) return "no reason given";
    ERR_error_string_n(e, buf, sizeof buf);
    return buf;
}

// The key's id and raw hex, from its public half.
static int describe(tb_public_key *k, const char *path, tb_error *err) {
    if (EVP_PKEY_get_id(k->pkey) != EVP_PKEY_ED25519)
        return tb_fail(err, "%s: not an Ed25519 key (only Ed25519 is supported: openssl genpkey -algorithm ed25519)",
                       path);
    unsigned char raw[32];
    size_t len = sizeof raw;
    if (EVP_PKEY_get_raw_public_key(k->pkey, raw, &len) != 1 || len != 32)
        return tb_fail(err, "%s: cannot read the public key: %s", path, ssl_error());
    to_hex(raw, 32, k->hex);
    char digest[65];
    tb_sha256_hex(raw, 32, digest);
    snprintf(k->id, sizeof k->id, "ed25519:%.16s", digest);
    return 0;
}

// A PEM passphrase callback that gives none: an encrypted key fails to load.
static int no_passphrase(char *buf, int size, int rwflag, void *u) {
    (void)buf, (void)size, (void)rwflag, (void)u;
    return 0;
}

static FILE *open_key(const char *path, tb_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) {
        tb_fail(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        tb_fail(err, "%s: not a regular file (a PEM key file is expected)", path);
        return NULL;
    }
    FILE *f = fopen(path, "r");
    if (!f) tb_fail(err, "%s: %s", path, strerror(errno));
    return f;
}

tb_public_key *tb_public_key_load(const char *pem_path, tb_error *err) {
    FILE *f = open_key(pem_path, err);
    if (!f) return NULL;
    tb_public_key *k = tb_xcalloc(1, sizeof *k, "public key");
    k->pkey = PEM_read_PUBKEY(f, NULL, no_passphrase, NULL);
    if (!k->pkey) {  // a private key's file gives its public half too
        ERR_clear_error();
        rewind(f);
        k->pkey = PEM_read_PrivateKey(f, NULL, no_passphrase, NULL);
    }
    fclose(f);
    if (!k->pkey) {
        tb_fail(err, "%s: not a PEM public or private key (%s)", pem_path, ssl_error());
        tb_public_key_free(k);
        return NULL;
    }
    if (describe(k, pem_path, err) != 0) {
        tb_public_key_free(k);
        return NULL;
    }
    return k;
}

void tb_public_key_free(tb_public_key *k) {
    if (!k) return;
    EVP_PKEY_free(k->pkey);
    free(k);
}

const char *tb_public_key_id(const tb_public_key *k) { return k->id; }

static char *head_message(const char *version_key, long long seq, const char *link, size_t *len) {
    char *m = NULL;
    FILE *f = open_memstream(&m, len);
    fprintf(f, MESSAGE_PREFIX "%s\n%lld\n%s", version_key, seq, link);
    fclose(f);
    return m;
}

// The Ed25519 private key at path into k (its id and public half described): 0, or -1.
static int load_private(const char *path, tb_public_key *k, tb_error *err) {
    FILE *f = open_key(path, err);
    if (!f) return -1;
    k->pkey = PEM_read_PrivateKey(f, NULL, no_passphrase, NULL);
    fclose(f);
    if (!k->pkey)
        return tb_fail(err, "%s: not an unencrypted PEM private key (%s; an encrypted key is not supported yet)", path,
                       ssl_error());
    if (describe(k, path, err) != 0) {
        EVP_PKEY_free(k->pkey);
        k->pkey = NULL;
        return -1;
    }
    return 0;
}

int tb_sign_key_check(const char *key_path, char key_id[TB_KEY_ID_MAX], tb_error *err) {
    tb_public_key k = {0};
    if (load_private(key_path, &k, err) != 0) return -1;
    snprintf(key_id, TB_KEY_ID_MAX, "%s", k.id);
    EVP_PKEY_free(k.pkey);
    return 0;
}

int tb_sign_version(const char *artifacts, const char *version_dir, const char *key_path, long long *seq,
                    char key_id[TB_KEY_ID_MAX], tb_error *err) {
    tb_public_key k = {0};
    if (load_private(key_path, &k, err) != 0) return -1;
    // the head, only from a ledger that agrees with the catalogue
    sqlite3 *db = NULL;
    char key[PATH_MAX], link[65];
    if (tb_catalog_open(&db, artifacts, err) != 0) {
        EVP_PKEY_free(k.pkey);
        return -1;
    }
    tb_anchor_verifier *v = tb_anchor_verifier_new(db);
    char *problems = NULL;
    int rc = tb_anchor_ledger_head(v, version_dir, key, sizeof key, seq, link, &problems);
    tb_anchor_verifier_free(v);
    sqlite3_close(db);
    if (rc != 0) {
        tb_fail(err, "%s: not signed: %s", version_dir, problems ? problems : "no ledger");
        free(problems);
        EVP_PKEY_free(k.pkey);
        return -1;
    }
    size_t len;
    char *msg = head_message(key, *seq, link, &len);
    unsigned char sig[64];
    size_t siglen = sizeof sig;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    rc = ctx && EVP_DigestSignInit(ctx, NULL, NULL, NULL, k.pkey) == 1 &&
                 EVP_DigestSign(ctx, sig, &siglen, (const unsigned char *)msg, len) == 1
             ? 0
             : tb_fail(err, "%s: signing failed: %s", key_path, ssl_error());
    EVP_MD_CTX_free(ctx);
    free(msg);
    EVP_PKEY_free(k.pkey);
    if (rc != 0) return -1;
    char sig_hex[129], at[32], path[PATH_MAX + 32];
    to_hex(sig, siglen, sig_hex);
    tb_iso_now(at, sizeof at);
    if (tb_path_format(path, sizeof path, err, "%s/" TB_EXPERIMENT_SIGNATURES, version_dir) != 0) return -1;
    json_t *doc = json_load_file(path, 0, NULL);
    if (!json_is_object(doc)) {
        if (doc || access(path, F_OK) == 0) {
            json_decref(doc);
            return tb_fail(err, "%s: exists but is not a signatures file; not overwritten", path);
        }
        doc = json_pack("{s:[]}", "signatures");
    }
    json_array_append_new(json_object_get(doc, "signatures"),
                          json_pack("{s:s, s:I, s:s, s:s, s:s, s:s, s:s}", "version", key, "seq", (json_int_t)*seq,
                                    "link", link, "key_id", k.id, "public_key", k.hex, "signature", sig_hex,
                                    "signed_at", at));
    rc = tb_write_json_atomic(path, doc, err);
    json_decref(doc);
    snprintf(key_id, TB_KEY_ID_MAX, "%s", k.id);
    return rc;
}

long long tb_signed_seq(const tb_public_key *key, const char *version_dir, const char *version_key,
                        const char *(*chain_link)(void *ctx, long long seq), void *ctx, char *why, size_t why_len) {
    char path[PATH_MAX + 32];
    snprintf(why, why_len, "not signed by %s: %s/" TB_EXPERIMENT_SIGNATURES " is missing", key->id, version_dir);
    if (snprintf(path, sizeof path, "%s/" TB_EXPERIMENT_SIGNATURES, version_dir) >= (int)sizeof path) return 0;
    struct stat st;
    if (lstat(path, &st) != 0) return 0;  // why: missing
    tb_error err;
    const int fd = tb_open_regular(path, "a signatures file is expected", NULL, &err);  // a FIFO would block
    if (fd < 0) {
        snprintf(why, why_len, "%s", err.msg);
        return 0;
    }
    json_error_t jerr;
    FILE *f = fdopen(fd, "r");
    json_t *doc = f ? json_loadf(f, 0, &jerr) : NULL;
    if (f) fclose(f);
    else close(fd);
    if (!doc) {
        snprintf(why, why_len, "%s: line %d: %s", path, f ? jerr.line : 0, f ? jerr.text : strerror(errno));
        return 0;
    }
    long long best = 0;
    int by_key = 0;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(doc, "signatures"), i, s) {
        if (strcmp(json_string_value(json_object_get(s, "key_id")) ?: "", key->id)) continue;
        by_key++;
        const char *link = json_string_value(json_object_get(s, "link"));
        const char *version = json_string_value(json_object_get(s, "version"));
        json_t *jseq = json_object_get(s, "seq");
        unsigned char sig[64];
        if (!link || !version || !json_is_integer(jseq) ||
            from_hex(json_string_value(json_object_get(s, "signature")), sig, sizeof sig) != 0) {
            snprintf(why, why_len, "%s: signature %zu by %s is malformed", path, i + 1, key->id);
            continue;
        }
        const long long seq = json_integer_value(jseq);
        size_t len;
        char *msg = head_message(version_key, seq, link, &len);
        EVP_MD_CTX *mctx = EVP_MD_CTX_new();
        const int ok = mctx && EVP_DigestVerifyInit(mctx, NULL, NULL, NULL, key->pkey) == 1 &&
                       EVP_DigestVerify(mctx, sig, sizeof sig, (const unsigned char *)msg, len) == 1;
        EVP_MD_CTX_free(mctx);
        free(msg);
        ERR_clear_error();
        const char *have = chain_link(ctx, seq);
        if (!ok) snprintf(why, why_len, "%s: signature %zu by %s does not verify (seq %lld of %s)", path, i + 1, key->id,
                          seq, version_key);
        else if (!have || strcmp(have, link))
            snprintf(why, why_len,
                     "%s: %s signed seq %lld with link %.12s..., but the ledger's link there is %.12s...: the ledger "
                     "was rewritten after it was signed",
                     path, key->id, seq, link, have ? have : "(none)");
        else if (seq > best) best = seq;
    }
    json_decref(doc);
    if (!by_key) snprintf(why, why_len, "not signed by %s: %s holds no signature by that key", key->id, path);
    return best;
}

static long long signer_signed_seq(const void *key, const char *version_dir, const char *version_key,
                                const char *(*chain_link)(void *ctx, long long seq), void *ctx, char *why,
                                size_t why_len) {
    return tb_signed_seq(key, version_dir, version_key, chain_link, ctx, why, why_len);
}

static const char *signer_id(const void *key) { return tb_public_key_id(key); }

tb_anchor_signer tb_public_key_signer(const tb_public_key *k) {
    return (tb_anchor_signer){ .signed_seq = signer_signed_seq, .id = signer_id, .key = k };
}

// ---------------------------------------------------------------------------------------
// tracebook sign

typedef struct sign_opts {
    const char *artifacts, *experiment, *key;
    int json;
} sign_opts;

static const tb_option sign_options[] = {
    TB_OPTION("--key", sign_opts, key, TB_OPT_STRING, NULL, "KEY.pem", "the Ed25519 private key (PEM, unencrypted)"),
    TB_OPTION("--experiment", sign_opts, experiment, TB_OPT_STRING, NULL, "NAME", "only this experiment's versions"),
    TB_ARTIFACTS_OPTION(sign_opts, artifacts),
    TB_OPTION("--json", sign_opts, json, TB_OPT_BOOL, NULL, NULL,
              "what was signed as one JSON document: each version, its ledger seq, the key id"),
    TB_OPTIONS_END};

static const tb_command sign_command = {
    "tracebook sign", NULL,
    "Signs every experiment version's ledger head (its anchors: docs/ARCHITECTURE.md, \"Anchors\") with an\n"
    "Ed25519 key, after checking the ledger against the catalogue; `tracebook prove --require-signature\n"
    "PUBKEY.pem` then proves only what that key signed. Make a key with\n"
    "`openssl genpkey -algorithm ed25519 -out key.pem`, its public half with\n"
    "`openssl pkey -in key.pem -pubout -out key.pub.pem`. The key never enters a record.",
    sign_options, 0, 0, "tracebook sign --key key.pem --experiment tp_scaling",
    "nothing anchored to sign, or a version's ledger does not check (nothing is signed for it)"};

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int tracebook_sign_main(int argc, char **argv) {
    sign_opts o = {0};
    tb_error err;
    tb_positional pos;
    int prc = tb_command_parse(&sign_command, &o, argc, argv, &pos, &err);
    if (prc == 1) return 0;
    if (prc != 0) return tb_command_usage_error(&sign_command, &err);
    tb_positional_free(&pos);
    if (!o.key) {
        tb_fail(&err, "tracebook sign: --key KEY.pem is required");
        return tb_command_usage_error(&sign_command, &err);
    }
    DIR *d = opendir(o.artifacts);
    if (!d) {
        fprintf(stderr, "tracebook sign: %s: %s\n", o.artifacts, strerror(errno));
        return TB_EXIT_FAILURE;
    }
    char **dirs = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || (o.experiment && strcmp(e->d_name, o.experiment))) continue;
        char exp_dir[PATH_MAX];
        if (snprintf(exp_dir, sizeof exp_dir, "%s/%s", o.artifacts, e->d_name) >= (int)sizeof exp_dir) continue;
        DIR *vd = opendir(exp_dir);
        struct dirent *ve;
        while (vd && (ve = readdir(vd))) {
            char *end;
            if (ve->d_name[0] != 'v' || strtoll(ve->d_name + 1, &end, 10) < 0 || *end || end == ve->d_name + 1) continue;
            char path[2 * PATH_MAX];
            snprintf(path, sizeof path, "%s/%s/" TB_EXPERIMENT_LEDGER, exp_dir, ve->d_name);
            if (access(path, F_OK) != 0) continue;  // nothing anchored: nothing to sign
            if (n == cap) dirs = tb_xreallocarray(dirs, cap = cap ? 2 * cap : 16, sizeof *dirs, "versions");
            path[strlen(path) - strlen("/" TB_EXPERIMENT_LEDGER)] = '\0';
            dirs[n++] = tb_xstrdup(path, "version");
        }
        if (vd) closedir(vd);
    }
    closedir(d);
    if (n) qsort(dirs, n, sizeof *dirs, cmp_name);
    int rc = 0;
    if (!n) {
        fprintf(stderr, "tracebook sign: no anchored experiment version under %s%s%s\n", o.artifacts,
                o.experiment ? " named " : "", o.experiment ? o.experiment : "");
        rc = TB_EXIT_FAILURE;
    }
    json_t *signed_list = json_array();
    for (size_t i = 0; i < n; i++) {
        long long seq;
        char id[TB_KEY_ID_MAX];
        if (tb_sign_version(o.artifacts, dirs[i], o.key, &seq, id, &err) != 0) {
            fprintf(stderr, "tracebook sign: %s\n", err.msg);
            rc = TB_EXIT_FAILURE;
        } else {
            if (o.json)
                json_array_append_new(signed_list, json_pack("{s:s, s:I, s:s}", "version_dir", dirs[i], "seq",
                                                             (json_int_t)seq, "key_id", id));
            else
                printf("signed %s at seq %lld with %s\n", dirs[i], seq, id);
        }
        free(dirs[i]);
    }
    free(dirs);
    if (o.json) {
        json_t *doc = json_pack("{s:o, s:b}", "signed", signed_list, "complete", rc == 0);
        json_dumpf(doc, stdout, JSON_INDENT(1));
        fputc('\n', stdout);
        json_decref(doc);
    } else {
        json_decref(signed_list);
    }
    return rc;
}
