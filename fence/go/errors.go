package fence

import (
	"errors"
	"fmt"
)

// The kinds of refusal, named as in docs/fencing.md, the shared test vectors
// and every language's verifier.
const (
	// KindMalformed: not a proof (bad base64url, wrong lengths, bad UTF-8,
	// an empty bucket or name).
	KindMalformed = "malformed"
	// KindUnsupportedVersion: a format version this verifier does not read.
	KindUnsupportedVersion = "unsupported_version"
	// KindUnknownKey: signed by a key the store has not pinned.
	KindUnknownKey = "unknown_key"
	// KindBadSignature: the signature does not verify.
	KindBadSignature = "bad_signature"
)

// Error is what Verify and VerifyText return when they refuse a proof: one
// of *MalformedError, *UnsupportedVersionError, *UnknownKeyError and
// *BadSignatureError. Match the kind with errors.As on an Error (or
// KindOf), or on the concrete type for its details.
type Error interface {
	error
	// Kind is KindMalformed, KindUnsupportedVersion, KindUnknownKey or
	// KindBadSignature.
	Kind() string
}

// MalformedError refuses bytes that are not a fence proof.
type MalformedError struct {
	// Reason says what is wrong, e.g. "shorter than any proof".
	Reason string
}

// Error is a one-line explanation a person can act on.
func (e *MalformedError) Error() string { return "malformed fence proof: " + e.Reason }

// Kind is KindMalformed.
func (e *MalformedError) Kind() string { return KindMalformed }

// UnsupportedVersionError refuses a proof of a format version other than 1.
type UnsupportedVersionError struct {
	// Version is the proof's first byte.
	Version byte
}

// Error is a one-line explanation a person can act on.
func (e *UnsupportedVersionError) Error() string {
	return fmt.Sprintf("fence proof version %d is not supported (this verifier reads version 1)", e.Version)
}

// Kind is KindUnsupportedVersion.
func (e *UnsupportedVersionError) Kind() string { return KindUnsupportedVersion }

// UnknownKeyError refuses a proof naming a key that is not pinned.
type UnknownKeyError struct {
	// KeyID is the id the proof names, 16 lower-case hex digits.
	KeyID string
}

// Error is a one-line explanation a person can act on.
func (e *UnknownKeyError) Error() string {
	return "fence proof signed by unknown key " + e.KeyID + ": refresh the pinned keys from `tenure fence-keys`"
}

// Kind is KindUnknownKey.
func (e *UnknownKeyError) Kind() string { return KindUnknownKey }

// BadSignatureError refuses a proof whose signature does not verify: it was
// altered (a changed token, name...) or forged.
type BadSignatureError struct{}

// Error is a one-line explanation a person can act on.
func (e *BadSignatureError) Error() string {
	return "fence proof signature does not verify: the proof was altered or forged"
}

// Kind is KindBadSignature.
func (e *BadSignatureError) Kind() string { return KindBadSignature }

// KindOf returns the kind of a refusal by Verify or VerifyText (possibly
// wrapped), or "" when err is not one.
func KindOf(err error) string {
	var fe Error
	if errors.As(err, &fe) {
		return fe.Kind()
	}
	return ""
}

// malformed is a *MalformedError with reason.
func malformed(reason string) error { return &MalformedError{Reason: reason} }
