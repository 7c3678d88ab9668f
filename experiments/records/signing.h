// signing.h — Ed25519 signatures over ledger heads (docs/ARCHITECTURE.md, "Anchors"), for
// records shared with someone else.
//
// The anchors (anchor.h) name an edit unless the ledger and the catalogue are rewritten
// together; whoever holds the artifacts can do that. A signature by a key the forger does not
// hold closes the gap, as in-toto and Sigstore attestations sign a digest of what they vouch
// for (here offline, no transparency service): `tracebook sign --key KEY.pem` (or `tracebook
// run --sign KEY.pem`) signs each version's ledger head — the message
// "tracebook ledger head v1\n<experiment>/v<N>\n<seq>\n<link>" — and appends the signature to
// the version's ledger.sig.json; `tracebook prove --require-signature PUBKEY.pem` then proves
// a claim only when every item it reads was anchored at or before a head that key signed,
// the ledger's link at that seq being the signed one. A private key is read, never written:
// no record, manifest or log holds it or its path (the signature file holds the public key
// and its id).
//
// Keys are OpenSSL's PEM files: `openssl genpkey -algorithm ed25519 -out key.pem` and
// `openssl pkey -in key.pem -pubout -out key.pub.pem`; an encrypted private key is refused
// (not supported yet).
#ifndef TB_EXPERIMENTS_SIGNING_H
#define TB_EXPERIMENTS_SIGNING_H

#include <stddef.h>

#include "records/anchor.h"
#include "core/error.h"

#define TB_KEY_ID_MAX 32  // "ed25519:" + 16 hex digits of the public key's sha256

// A public key to require, loaded from a PEM file (a private key's file also gives one).
typedef struct tb_public_key tb_public_key;
tb_public_key *tb_public_key_load(const char *pem_path, tb_error *err);
void tb_public_key_free(tb_public_key *k);
const char *tb_public_key_id(const tb_public_key *k);

// Signs version_dir's ledger head with the private key at key_path, after checking the ledger
// against the catalogue under artifacts (a broken chain or a head the catalogue does not have
// is refused: a signature must not vouch for a forgery). Appends to ledger.sig.json; *seq gets
// the signed seq, key_id the key's id. 0, or -1 with err naming the file and the reason.
int tb_sign_version(const char *artifacts, const char *version_dir, const char *key_path, long long *seq,
                    char key_id[TB_KEY_ID_MAX], tb_error *err);

// The private key at key_path can sign (an unencrypted Ed25519 PEM key): 0 with its id, or -1
// with err (checked before a runbook runs, so --sign fails at once, not after the runs).
int tb_sign_key_check(const char *key_path, char key_id[TB_KEY_ID_MAX], tb_error *err);

// The highest seq of version_dir's ledger that key signed (a signature that verifies over the
// head seq and link, the ledger's link at that seq being that link): 0 and why (one line in
// why) when none. chain_link(seq) gives the ledger's link at seq (NULL when it has none).
long long tb_signed_seq(const tb_public_key *key, const char *version_dir, const char *version_key,
                        const char *(*chain_link)(void *ctx, long long seq), void *ctx, char *why, size_t why_len);

// k as the anchors' required signer (anchor.h), k not owned: its signed_seq is
// tb_signed_seq, its id tb_public_key_id.
tb_anchor_signer tb_public_key_signer(const tb_public_key *k);

// tracebook sign [--experiment NAME] --key KEY.pem [--artifacts DIR]
int tracebook_sign_main(int argc, char **argv);

#endif
