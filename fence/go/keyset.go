package fence

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Keyset is the set of Tenure public keys a store accepts proofs from: the
// active signing key and older ones still accepted during a rotation. It is
// immutable once parsed and safe for concurrent use.
type Keyset struct {
	keys []pinnedKey
}

// pinnedKey is one public key and its id.
type pinnedKey struct {
	id  [keyIDBytes]byte
	key ed25519.PublicKey
}

// Verified is a proof whose signature verified against a pinned key.
type Verified struct {
	// Fence is what the proof states.
	Fence Fence
	// KeyID is the id of the key that signed it, 16 lower-case hex digits.
	KeyID string
}

// KeyID returns the id proofs name a public key by: the first 8 bytes of
// SHA-256 of its 32 bytes, as 16 lower-case hex digits.
func KeyID(publicKey ed25519.PublicKey) string {
	id := keyID(publicKey)
	return hex.EncodeToString(id[:])
}

// keyID is KeyID as bytes.
func keyID(publicKey []byte) [keyIDBytes]byte {
	sum := sha256.Sum256(publicKey)
	var id [keyIDBytes]byte
	copy(id[:], sum[:keyIDBytes])
	return id
}

// ParseKeyset reads a keyset's text form, what `tenure fence-keys` prints
// and the GetFenceKeys RPC returns as keyset: one public key per line, its
// 32 bytes in base64url without padding; `#` starts a comment; blank lines
// are skipped. It fails on a line that is not an Ed25519 public key, or when
// there is no key at all.
func ParseKeyset(text string) (*Keyset, error) {
	ks := &Keyset{}
	for i, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		raw, err := decodeKey(line)
		if err != nil {
			return nil, fmt.Errorf("keyset line %d: %w", i+1, err)
		}
		ks.add(raw)
	}
	if len(ks.keys) == 0 {
		return nil, fmt.Errorf("the keyset has no key: give the output of `tenure fence-keys`")
	}
	return ks, nil
}

// decodeKey reads one public key line.
func decodeKey(line string) ([]byte, error) {
	if len(line) != 43 { // base64url of 32 bytes
		return nil, fmt.Errorf("an Ed25519 public key is 32 bytes (43 base64url characters), got %d characters", len(line))
	}
	raw, err := decodeText(line)
	if err != nil {
		return nil, fmt.Errorf("not base64url without padding")
	}
	if !onCurve(raw) {
		return nil, fmt.Errorf("not a valid Ed25519 public key")
	}
	return raw, nil
}

// add pins one public key (once, however often it is listed).
func (ks *Keyset) add(raw []byte) {
	id := keyID(raw)
	for _, k := range ks.keys {
		if k.id == id {
			return
		}
	}
	ks.keys = append(ks.keys, pinnedKey{id: id, key: ed25519.PublicKey(raw)})
}

// KeyIDs are the ids of the pinned keys, in keyset order.
func (ks *Keyset) KeyIDs() []string {
	ids := make([]string, len(ks.keys))
	for i, k := range ks.keys {
		ids[i] = hex.EncodeToString(k.id[:])
	}
	return ids
}

// Verify checks a proof's bytes, in the order of docs/fencing.md, stopping
// at the first failure: its length (MinProofBytes to MaxProofBytes), its
// version, its fields, that a pinned key signed it, and the signature
// (strict Ed25519). A refusal is an Error: *MalformedError,
// *UnsupportedVersionError, *UnknownKeyError or *BadSignatureError.
//
// A verified proof says Tenure granted this token for Fence.Name; the
// caller still checks that Name is the lease name guarding its resource
// before comparing tokens.
func (ks *Keyset) Verify(proof []byte) (*Verified, error) {
	p, err := parse(proof)
	if err != nil {
		return nil, err
	}
	var key ed25519.PublicKey
	for _, k := range ks.keys {
		if k.id == p.keyID {
			key = k.key
			break
		}
	}
	if key == nil {
		return nil, &UnknownKeyError{KeyID: hex.EncodeToString(p.keyID[:])}
	}
	if smallOrder(key) || smallOrder(p.signature[:32]) {
		return nil, &BadSignatureError{}
	}
	msg := make([]byte, 0, len(SigningContext)+len(p.signed))
	msg = append(append(msg, SigningContext...), p.signed...)
	if !ed25519.Verify(key, msg, p.signature) {
		return nil, &BadSignatureError{}
	}
	return &Verified{Fence: p.fence, KeyID: hex.EncodeToString(p.keyID[:])}, nil
}

// VerifyText checks a proof's text form (the Tenure-Fence header: base64url
// without padding), refusing text longer than MaxTextLen before decoding,
// then as Verify.
func (ks *Keyset) VerifyText(text string) (*Verified, error) {
	b, err := decodeText(text)
	if err != nil {
		return nil, err
	}
	return ks.Verify(b)
}
