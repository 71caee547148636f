// Package fence verifies Tenure fence proofs and guards HTTP handlers with
// them, so that a downstream store only ever records fencing tokens Tenure
// granted for the lease name it guards.
//
// A fence proof is an Ed25519-signed statement of one grant (bucket, lease
// name, slot, fencing token, holder, grant time, TTL), format version 1 of
// docs/fencing.md. A store pins Tenure's public keys (ParseKeyset, from the
// text `tenure fence-keys` prints or the GetFenceKeys RPC returns), verifies
// each proof offline (Keyset.Verify, Keyset.VerifyText), checks it is for
// the lease name it guards, and only then compares tokens: a forged, huge
// or foreign token can never become its highest.
//
// Middleware does all of that for a net/http handler. The package depends
// on the standard library only.
package fence
