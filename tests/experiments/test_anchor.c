// test_anchor.c — records and claims files anchored when written (experiments/records/anchor.h) and
// ledger heads signed (experiments/records/signing.h): the
// adversarial drill's forgeries that once proved — a manifest's fields edited, claims.json or
// experiment.json deleted, the whole version deleted — are each named by `tracebook prove`;
// a ledger rewritten with its chain recomputed is caught by the catalogue's head; only a
// forger who rewrites the catalogue too gets past the anchors, and a signature catches that.
#include <jansson.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include "prove/prove.h"
#include "records/anchor.h"
#include "records/catalog.h"
#include "records/signing.h"
#include "fixtures/record_fixture.h"
#include "records/provenance.h"
#include "reports/report.h"
#include "tb_run_dir.h"
#include "tb_test.h"

// One record with an exact claim on its loss, and an experiment.json, all anchored as a
// runbook writes them; the version directory in version_dir.
static const char *anchored_fixture(const char *name, char *version_dir, size_t len) {
    static char root[FX_PATH];
    snprintf(root, sizeof root, "%s", fx_fresh_dir(name));
    fx_numbers n = {.world = 1, .nsteps = 3, .gbs = 4, .seq = 16, .step_ms = {{30, 10, 10}},
                    .loss = {{5, 4.5, 4.25}}, .act = {{50, 60, 70}}, .comm = {{1, 1, 1}}, .params = {100},
                    .flops = {1e6}, .bubble = 0, .imbalance = 1};
    char rec[FX_PATH], path[FX_PATH];
    fx_path(rec, sizeof rec, "%s/an/v1/r0", root);
    fx_write_run(rec, &n);
    fx_write_manifest(rec, "an", 1, "r0", NULL);
    fx_path(version_dir, len, "%s/an/v1", root);
    json_t *claims = json_pack("{s:s, s:i, s:[{s:s, s:s, s:f, s:s, s:{}, s:[s], s:f}]}", "experiment", "an",
                               "version", 1, "claims", "id", "loss", "text", "the loss at step 3 is {value}", "value",
                               4.25, "parser", "loss_at_step", "args", "runs", "r0", "relative_tolerance", 1e-9);
    fx_write_claims(fx_path(path, sizeof path, "%s/" TB_EXPERIMENT_CLAIMS, version_dir), claims);
    json_decref(claims);
    fx_write_text(fx_path(path, sizeof path, "%s/" TB_EXPERIMENT_STATUS, version_dir),
                  "{\"status\": \"finished\", \"error\": null}\n");
    fx_anchor_version_file(version_dir, TB_EXPERIMENT_STATUS);
    return root;
}

static int prove(const char *root, char **out) {
    return fx_capture(tracebook_prove_main, out, "prove", "--all", "--quiet", "--artifacts", root, NULL);
}

static void set_manifest_field(const char *version_dir, const char *key, json_t *value) {
    char path[FX_PATH];
    fx_path(path, sizeof path, "%s/r0/" TB_RECORD_MANIFEST, version_dir);
    json_t *m = json_load_file(path, 0, NULL);
    json_object_set_new(m, key, value);
    tb_write_json_atomic(path, m, NULL);
    json_decref(m);
}

TB_TEST(an_anchored_record_proves_and_its_ledger_chains) {
    char vdir[FX_PATH], path[FX_PATH];
    const char *root = anchored_fixture("anchor_ok", vdir, sizeof vdir);
    char *out;
    int rc = prove(root, &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  an/v1/loss\n"), "the untouched version proves (exit %d):\n%s", rc, out);
    free(out);
    // the ledger: the record, claims.json, experiment.json, in order, each linked to the last
    char *ledger = fx_read(fx_path(path, sizeof path, "%s/" TB_EXPERIMENT_LEDGER, vdir));
    TB_REQUIRE(ledger, "the ledger is written");
    TB_CHECK(strstr(ledger, "\"seq\":1,\"kind\":\"record\",\"name\":\"r0\"") &&
                 strstr(ledger, "\"seq\":2,\"kind\":\"file\",\"name\":\"claims.json\"") &&
                 strstr(ledger, "\"seq\":3,\"kind\":\"file\",\"name\":\"experiment.json\"") &&
                 strstr(ledger, "\"prev\":\"0000000000000000000000000000000000000000000000000000000000000000\""),
             "three entries, the first after the zero link:\n%s", ledger);
    free(ledger);
    // the canonical digest is of what the manifest says, not of its whitespace
    char a[65], b[65];
    tb_error err;
    fx_path(path, sizeof path, "%s/r0/" TB_RECORD_MANIFEST, vdir);
    TB_REQUIRE(tb_json_digest(path, a, &err) == 0, "%s", err.msg);
    json_t *m = json_load_file(path, 0, NULL);
    FILE *f = fopen(path, "w");
    json_dumpf(m, f, JSON_INDENT(7));  // re-indented, keys in another order
    fclose(f);
    json_decref(m);
    TB_REQUIRE(tb_json_digest(path, b, &err) == 0, "%s", err.msg);
    TB_CHECK(!strcmp(a, b), "re-indenting keeps the digest: %s vs %s", a, b);
    rc = prove(root, &out);
    TB_CHECK(rc == 0, "a re-indented manifest still proves:\n%s", out);
    free(out);
}

// The drill's forgeries of the manifest itself: its seed, argv, exit status edited.
TB_TEST(an_edited_manifest_is_named) {
    static const char *const keys[] = {"seed", "argv", "exit_status"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        char vdir[FX_PATH];
        const char *root = anchored_fixture("anchor_edit", vdir, sizeof vdir);
        set_manifest_field(vdir, keys[k], !strcmp(keys[k], "argv") ? json_pack("[s]", "forged") : json_integer(7));
        char *out;
        int rc = prove(root, &out);
        TB_CHECK(rc != 0 && strstr(out, "NOT PROVEN  an/v1/loss") &&
                     strstr(out, "the manifest of record r0 altered since it was anchored: its sha256 is ") &&
                     strstr(out, "the ledger's (seq 1)") && strstr(out, "the catalogue's (seq 1)"),
                 "%s edited: named against the ledger and the catalogue (exit %d):\n%s", keys[k], rc, out);
        free(out);
    }
}

TB_TEST(deleted_claims_experiment_files_and_versions_are_named) {
    char vdir[FX_PATH], path[FX_PATH];
    const char *root = anchored_fixture("anchor_del", vdir, sizeof vdir);
    char *out;
    unlink(fx_path(path, sizeof path, "%s/" TB_EXPERIMENT_CLAIMS, vdir));
    int rc = prove(root, &out);
    TB_CHECK(rc != 0 && strstr(out, "NOT PROVEN  an/v1 (claims.json)") &&
                 strstr(out, "claims.json is missing, but it was anchored (seq 2 of an/v1)") &&
                 strstr(out, "1 claim, 0 proven, 1 not proven"),
             "claims.json deleted: not '0 claims' (exit %d):\n%s", rc, out);
    free(out);

    root = anchored_fixture("anchor_del", vdir, sizeof vdir);
    unlink(fx_path(path, sizeof path, "%s/" TB_EXPERIMENT_STATUS, vdir));
    rc = prove(root, &out);
    TB_CHECK(rc != 0 && strstr(out, "NOT PROVEN  an/v1/loss") &&
                 strstr(out, "experiment.json is missing, but it was anchored (seq 3 of an/v1)"),
             "experiment.json deleted (exit %d):\n%s", rc, out);
    free(out);

    root = anchored_fixture("anchor_del", vdir, sizeof vdir);
    fx_rm_rf(fx_path(path, sizeof path, "%s/an", root));
    rc = prove(root, &out);
    TB_CHECK(rc != 0 && strstr(out, "NOT PROVEN  an/v1 (ledger.jsonl)") &&
                 strstr(out, "is gone, but the catalogue anchored 3 entries of it"),
             "the whole experiment deleted (exit %d):\n%s", rc, out);
    free(out);
}

// A record deleted whole, or its manifest edited: the claim does not list it, but the version
// anchored it, so the claim cannot show it rests on every run measured (the slow repetitions
// deleted, or marked failed, and the fast ones claimed proved: the selection rule reads the
// version's directory, and the manifests of unlisted records were not checked).
TB_TEST(a_record_deleted_whole_fails_the_claims_of_its_version) {
    char vdir[FX_PATH], rec[FX_PATH];
    const char *root = anchored_fixture("anchor_gone", vdir, sizeof vdir);
    fx_numbers n = {.world = 1, .nsteps = 3, .gbs = 4, .seq = 16, .step_ms = {{30, 10, 10}},
                    .loss = {{5, 4.5, 4.25}}, .act = {{50, 60, 70}}, .comm = {{1, 1, 1}}, .params = {100},
                    .flops = {1e6}, .bubble = 0, .imbalance = 1};
    fx_path(rec, sizeof rec, "%s/r1", vdir);
    fx_write_run(rec, &n);
    fx_write_manifest(rec, "an", 1, "r1", NULL);
    char *out;
    int rc = prove(root, &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  an/v1/loss\n"), "with both records there (exit %d):\n%s", rc, out);
    free(out);
    fx_rm_rf(rec);
    rc = prove(root, &out);
    TB_CHECK(rc != 0 && strstr(out, "NOT PROVEN  an/v1/loss") &&
                 strstr(out, "run r1 was anchored as a record of this version (seq ") &&
                 strstr(out, "its record is gone"),
             "r1 deleted whole (exit %d):\n%s", rc, out);
    free(out);
    // kept, with its manifest emptied or marked failed (what the selection rule reads of a
    // record no claim lists): not as anchored
    static const char *const forged[] = {"{}\n", NULL};
    for (int k = 0; k < 2; k++) {
        root = anchored_fixture("anchor_gone", vdir, sizeof vdir);
        fx_write_run(rec, &n);
        fx_write_manifest(rec, "an", 1, "r1", NULL);
        char path[FX_PATH];
        fx_path(path, sizeof path, "%s/" TB_RECORD_MANIFEST, rec);
        if (forged[k]) {
            fx_write_text(path, forged[k]);
        } else {
            json_t *m = json_load_file(path, 0, NULL);
            json_object_set_new(m, "status", json_string("failed"));
            tb_write_json_atomic(path, m, NULL);
            json_decref(m);
        }
        rc = prove(root, &out);
        TB_CHECK(rc != 0 && strstr(out, "NOT PROVEN  an/v1/loss") &&
                     strstr(out, "the manifest of record r1 altered since it was anchored"),
                 "r1's manifest %s (exit %d):\n%s", forged[k] ? "emptied" : "marked failed", rc, out);
        free(out);
    }
}

// A forger who edits the manifest and appends its new digest to the ledger, or rewrites the
// ledger with a recomputed chain: the catalogue's head and rows still hold the originals. A
// forger who rewrites the catalogue as well (re-anchors through the API) gets past the
// anchors: what a signature is for.
TB_TEST(a_rewritten_ledger_is_caught_by_the_catalogue_and_only_a_rewritten_catalogue_passes) {
    char vdir[FX_PATH], path[FX_PATH], ledger[FX_PATH];
    const char *root = anchored_fixture("anchor_ledger", vdir, sizeof vdir);
    fx_path(ledger, sizeof ledger, "%s/" TB_EXPERIMENT_LEDGER, vdir);
    set_manifest_field(vdir, "seed", json_integer(99));
    // the ledger rebuilt from scratch by the forger: the three entries with the new digest,
    // the chain recomputed (through a scratch version whose catalogue is thrown away)
    char scratch[FX_PATH], srec[FX_PATH];
    snprintf(scratch, sizeof scratch, "%s", fx_fresh_dir("anchor_ledger_scratch"));
    fx_path(srec, sizeof srec, "%s/an/v1/r0", scratch);
    char cmd[8 * FX_PATH];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/r0/" TB_RECORD_MANIFEST " %s/ && cp %s/" TB_EXPERIMENT_CLAIMS " %s/"
             TB_EXPERIMENT_STATUS " %s/an/v1/", srec, vdir, srec, vdir, vdir, scratch);
    TB_REQUIRE(system(cmd) == 0, "%s", cmd);
    tb_error err;
    TB_REQUIRE(tb_anchor_record(scratch, srec, &err) == 0 &&
                   tb_anchor_version_file(scratch, fx_path(path, sizeof path, "%s/an/v1", scratch), TB_EXPERIMENT_CLAIMS,
                                          &err) == 0 &&
                   tb_anchor_version_file(scratch, path, TB_EXPERIMENT_STATUS, &err) == 0,
               "%s", err.msg);
    snprintf(cmd, sizeof cmd, "cp %s/an/v1/" TB_EXPERIMENT_LEDGER " %s", scratch, ledger);
    TB_REQUIRE(system(cmd) == 0, "%s", cmd);
    char *out;
    int rc = prove(root, &out);
    TB_CHECK(rc != 0 && strstr(out, "the catalogue's (seq 1)") && strstr(out, "ends at seq 3") &&
                 strstr(out, "the catalogue's head is seq 3") && !strstr(out, "the ledger's (seq 1)"),
             "the rebuilt ledger agrees with the manifest, the catalogue does not (exit %d):\n%s", rc, out);
    free(out);
    // an edited ledger line breaks the chain
    char *text = fx_read(ledger);
    TB_REQUIRE(text, "ledger");
    char *seq2 = strstr(text, "\"seq\":2,");
    if (seq2) seq2[6] = '3';
    fx_write_text(ledger, text);
    free(text);
    rc = prove(root, &out);
    TB_CHECK(rc != 0 && strstr(out, "line 2: the chain breaks") && strstr(out, "the ledger was edited"),
             "an edited line (exit %d):\n%s", rc, out);
    free(out);
    // a FIFO in the ledger's place is refused by what it is, not read (prove would block)
    char *kept = fx_read(ledger);
    unlink(ledger);
    TB_REQUIRE(mkfifo(ledger, 0644) == 0, "mkfifo %s", ledger);
    rc = prove(root, &out);
    TB_CHECK(rc != 0 && strstr(out, "is a FIFO (named pipe), not a regular file"), "a FIFO ledger (exit %d):\n%s", rc,
             out);
    free(out);
    unlink(ledger);
    fx_write_text(ledger, kept ? kept : "");
    free(kept);
    // the catalogue deleted: nothing vouches for the version
    snprintf(cmd, sizeof cmd, "rm -f %s/" TB_CATALOG "*", root);
    TB_REQUIRE(system(cmd) == 0, "%s", cmd);
    rc = prove(root, &out);
    TB_CHECK(rc != 0 && strstr(out, "the catalogue has no anchors for an/v1"), "no catalogue (exit %d):\n%s", rc, out);
    free(out);
    // the forger who re-anchors through the catalogue too: the anchors pass (a signature would not)
    root = anchored_fixture("anchor_ledger", vdir, sizeof vdir);
    set_manifest_field(vdir, "seed", json_integer(99));
    TB_REQUIRE(fx_anchor_record(fx_path(path, sizeof path, "%s/r0", vdir)) == 0, "re-anchor");
    rc = prove(root, &out);
    TB_CHECK(rc == 0, "re-anchored in ledger and catalogue: the anchors cannot tell (exit %d):\n%s", rc, out);
    free(out);
}

// A record written by hand, never anchored, does not prove.
TB_TEST(an_unanchored_record_does_not_prove) {
    char vdir[FX_PATH], path[FX_PATH];
    const char *root = anchored_fixture("anchor_none", vdir, sizeof vdir);
    fx_path(path, sizeof path, "%s/r0", vdir);
    char cmd[3 * FX_PATH];
    snprintf(cmd, sizeof cmd, "cp -r %s %s/r1", path, vdir);
    TB_REQUIRE(system(cmd) == 0, "%s", cmd);
    fx_path(path, sizeof path, "%s/" TB_EXPERIMENT_CLAIMS, vdir);
    json_t *claims = json_load_file(path, 0, NULL);
    json_array_set_new(json_object_get(json_array_get(json_object_get(claims, "claims"), 0), "runs"),
                       0, json_string("r1"));
    fx_write_claims(path, claims);
    json_decref(claims);
    char *out;
    int rc = prove(root, &out);
    TB_CHECK(rc != 0 && strstr(out, "the manifest of record r1 is not anchored: neither the ledger nor the catalogue"),
             "a copied record (exit %d):\n%s", rc, out);
    free(out);
}

// An Ed25519 key pair written as PEM files <dir>/<name>.pem and <dir>/<name>.pub.pem.
static void write_key_pair(const char *dir, const char *name) {
    EVP_PKEY *k = NULL;
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, NULL);
    EVP_PKEY_keygen_init(ctx);
    EVP_PKEY_keygen(ctx, &k);
    EVP_PKEY_CTX_free(ctx);
    char path[FX_PATH];
    FILE *f = fopen(fx_path(path, sizeof path, "%s/%s.pem", dir, name), "w");
    PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL);
    fclose(f);
    f = fopen(fx_path(path, sizeof path, "%s/%s.pub.pem", dir, name), "w");
    PEM_write_PUBKEY(f, k);
    fclose(f);
    EVP_PKEY_free(k);
}

static int prove_signed(const char *root, const char *pub, char **out) {
    return fx_capture(tracebook_prove_main, out, "prove", "--all", "--quiet", "--require-signature", pub, "--artifacts",
                      root, NULL);
}

// What a signature adds: prove --require-signature proves only what the key signed; the
// forger who re-anchors an edited manifest through the ledger and the catalogue together
// (which the anchors alone cannot tell) is named, as is anything anchored after the signed
// head, another key's signature and a tampered one.
TB_TEST(a_signature_catches_the_forger_who_rewrites_ledger_and_catalogue) {
    char vdir[FX_PATH], path[FX_PATH], pub[FX_PATH], key[FX_PATH], other[FX_PATH];
    char keys[FX_PATH];
    snprintf(keys, sizeof keys, "%s", fx_fresh_dir("anchor_keys"));
    write_key_pair(keys, "alice");
    write_key_pair(keys, "mallory");
    fx_path(key, sizeof key, "%s/alice.pem", keys);
    fx_path(pub, sizeof pub, "%s/alice.pub.pem", keys);
    fx_path(other, sizeof other, "%s/mallory.pem", keys);
    const char *root = anchored_fixture("anchor_sign", vdir, sizeof vdir);
    char *out;
    int rc = prove_signed(root, pub, &out);
    TB_CHECK(rc != 0 && strstr(out, "not signed by ed25519:") && strstr(out, "ledger.sig.json is missing"),
             "unsigned: not proven when a signature is required (exit %d):\n%s", rc, out);
    free(out);
    rc = fx_capture(tracebook_sign_main, &out, "sign", "--key", key, "--artifacts", root, NULL);
    TB_CHECK(rc == 0 && strstr(out, "/an/v1 at seq 3 with ed25519:"), "signed at the head (exit %d):\n%s", rc, out);
    free(out);
    fx_path(path, sizeof path, "%s/" TB_EXPERIMENT_SIGNATURES, vdir);
    char *sigs = fx_read(path);
    TB_CHECK(sigs && !strstr(sigs, "PRIVATE") && strstr(sigs, "\"public_key\""), "the public key only:\n%s", sigs);
    free(sigs);
    rc = prove_signed(root, pub, &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  an/v1/loss") && strstr(out, "signatures required: ed25519:"),
             "signed: proven (exit %d):\n%s", rc, out);
    free(out);
    // the report shows who signed
    rc = fx_capture(tracebook_report_main, &out, "report", "--experiment", "an", "--artifacts", root, NULL);
    free(out);
    char *html = fx_read(fx_path(path, sizeof path, "%s/" TB_EXPERIMENT_REPORT, vdir));
    TB_CHECK(rc == 0 && html && strstr(html, "ed25519:") && strstr(html, "signed the ledger head at seq 3"),
             "the report names the signer (exit %d)", rc);
    free(html);
    // another key's signature does not stand for alice's
    char mallory_pub[FX_PATH];
    fx_path(mallory_pub, sizeof mallory_pub, "%s/mallory.pub.pem", keys);
    rc = prove_signed(root, mallory_pub, &out);
    TB_CHECK(rc != 0 && strstr(out, "holds no signature by that key"), "another key (exit %d):\n%s", rc, out);
    free(out);
    // the forger rewrites the manifest and re-anchors it in the ledger and the catalogue, and
    // signs with their own key: the anchors pass, alice's signature does not
    set_manifest_field(vdir, "seed", json_integer(99));
    TB_REQUIRE(fx_anchor_record(fx_path(path, sizeof path, "%s/r0", vdir)) == 0, "re-anchor");
    rc = fx_capture(tracebook_sign_main, &out, "sign", "--key", other, "--artifacts", root, NULL);
    free(out);
    rc = prove(root, &out);
    TB_CHECK(rc == 0, "without a signature required, the rewrite passes the anchors (exit %d):\n%s", rc, out);
    free(out);
    rc = prove_signed(root, pub, &out);
    TB_CHECK(rc != 0 && strstr(out, "the manifest of record r0 was anchored at seq 4, after the last head ") &&
                 strstr(out, "signed (seq 3 of an/v1): not signed"),
             "the re-anchored manifest is after alice's signed head (exit %d):\n%s", rc, out);
    free(out);
    // ... and one who rewrites the whole ledger from the start (seq 1 re-linked) breaks the
    // signed link itself
    root = anchored_fixture("anchor_sign", vdir, sizeof vdir);
    fx_capture(tracebook_sign_main, &out, "sign", "--key", key, "--artifacts", root, NULL);
    free(out);
    set_manifest_field(vdir, "seed", json_integer(99));
    char cmd[4 * FX_PATH];
    snprintf(cmd, sizeof cmd, "rm -f %s/" TB_EXPERIMENT_LEDGER " %s/" TB_CATALOG "*", vdir, root);
    TB_REQUIRE(system(cmd) == 0, "%s", cmd);
    TB_REQUIRE(fx_anchor_record(fx_path(path, sizeof path, "%s/r0", vdir)) == 0 &&
                   fx_anchor_version_file(vdir, TB_EXPERIMENT_CLAIMS) == 0 &&
                   fx_anchor_version_file(vdir, TB_EXPERIMENT_STATUS) == 0,
               "re-anchored from scratch");
    rc = prove(root, &out);
    TB_CHECK(rc == 0, "ledger and catalogue rebuilt: the anchors pass (exit %d):\n%s", rc, out);
    free(out);
    rc = prove_signed(root, pub, &out);
    TB_CHECK(rc != 0 && strstr(out, "signed seq 3 with link ") && strstr(out, "rewritten after it was signed"),
             "the signed link is not the ledger's (exit %d):\n%s", rc, out);
    free(out);
    // a tampered signature does not verify
    root = anchored_fixture("anchor_sign", vdir, sizeof vdir);
    fx_capture(tracebook_sign_main, &out, "sign", "--key", key, "--artifacts", root, NULL);
    free(out);
    fx_path(path, sizeof path, "%s/" TB_EXPERIMENT_SIGNATURES, vdir);
    json_t *doc = json_load_file(path, 0, NULL);
    json_t *sig = json_array_get(json_object_get(doc, "signatures"), 0);
    char forged[129];
    snprintf(forged, sizeof forged, "%s", json_string_value(json_object_get(sig, "signature")));
    forged[0] = forged[0] == '0' ? '1' : '0';
    json_object_set_new(sig, "signature", json_string(forged));
    tb_write_json_atomic(path, doc, NULL);
    json_decref(doc);
    rc = prove_signed(root, pub, &out);
    TB_CHECK(rc != 0 && strstr(out, "does not verify (seq 3 of an/v1)"), "a tampered signature (exit %d):\n%s", rc, out);
    free(out);
    // a public key cannot sign; a missing key is named
    rc = fx_capture(tracebook_sign_main, &out, "sign", "--key", pub, "--artifacts", root, NULL);
    TB_CHECK(rc != 0, "a public key does not sign");
    free(out);
}

int main(void) {
    TB_RUN(an_anchored_record_proves_and_its_ledger_chains);
    TB_RUN(an_edited_manifest_is_named);
    TB_RUN(deleted_claims_experiment_files_and_versions_are_named);
    TB_RUN(a_record_deleted_whole_fails_the_claims_of_its_version);
    TB_RUN(a_rewritten_ledger_is_caught_by_the_catalogue_and_only_a_rewritten_catalogue_passes);
    TB_RUN(an_unanchored_record_does_not_prove);
    TB_RUN(a_signature_catches_the_forger_who_rewrites_ledger_and_catalogue);
    return tb_test_summary();
}
