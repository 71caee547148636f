package fence

import (
	"encoding/base64"
	"encoding/binary"
	"unicode/utf8"
)

// The proof format, version 1 (docs/fencing.md). Every integer is unsigned
// big-endian:
//
//	offset  bytes  field
//	0       1      version: 1
//	1       8      key id: the first 8 bytes of SHA-256 of the signer's public key
//	9       8      fencing token
//	17      4      slot (0 for a plain lease, a group member, an election term)
//	21      8      granted at: Unix milliseconds, Tenure's clock
//	29      4      TTL granted, whole seconds
//	33      1 + n  bucket (1 to 255 UTF-8 bytes)
//	        1 + n  lease name (1 to 255 UTF-8 bytes)
//	        2 + n  holder (0 to 1024 UTF-8 bytes)
//	end-64  64     Ed25519 signature over SigningContext and every byte before it
const (
	// Version is the format version this package reads.
	Version = 1
	// MinProofBytes is the length of the shortest proof (one-byte bucket
	// and name, empty holder); shorter input is malformed whatever it holds.
	MinProofBytes = fixedBytes + 1 + 1 + 1 + 1 + 2 + signatureBytes
	// MaxProofBytes is the longest input read as a proof (the longest valid
	// proof is 1,635 bytes); longer input is refused before parsing.
	MaxProofBytes = 2048
	// MaxTextLen bounds the text form: longer text is refused before
	// decoding (4 characters per started 3 bytes of MaxProofBytes, as in
	// the reference verifier); text within it still decodes to at most
	// MaxProofBytes or is refused.
	MaxTextLen = (MaxProofBytes + 2) / 3 * 4
	// MaxHolderBytes is the longest holder a proof carries.
	MaxHolderBytes = 1024

	// fixedBytes are the bytes before the variable-length fields.
	fixedBytes = 33
	// signatureBytes is the Ed25519 signature length.
	signatureBytes = 64
	// keyIDBytes is the length of a key id.
	keyIDBytes = 8
)

// SigningContext is signed before the proof bytes, so that a signature made
// with the same key for anything else can never pass as a proof.
const SigningContext = "tenure-fence/v1"

// Fence is what a proof states: one grant of one lease name.
type Fence struct {
	// Bucket is the Tenure bucket (deployment) that granted the holding.
	Bucket string
	// Name is the lease name.
	Name string
	// Slot is the semaphore slot; 0 for a plain lease, a group member or an
	// election term.
	Slot uint32
	// Token is the fencing token: strictly greater for every later holder
	// of the name.
	Token uint64
	// GrantedAtMs is when the holding was granted, Unix milliseconds on
	// Tenure's clock.
	GrantedAtMs uint64
	// TTLSeconds is the TTL granted, whole seconds.
	TTLSeconds uint32
	// Holder is who the holding was granted to (the holder the client named).
	Holder string
}

// parsed is a proof split into its parts, before its signature is checked.
type parsed struct {
	keyID     [keyIDBytes]byte
	fence     Fence
	signed    []byte // the statement: every byte before the signature
	signature []byte
}

// decodeText turns the text form (base64url without padding) into bytes,
// bounding its length first and accepting nothing but the 64 characters of
// the alphabet (the standard decoder would skip line breaks).
func decodeText(text string) ([]byte, error) {
	if len(text) > MaxTextLen {
		return nil, malformed("longer than any proof")
	}
	for i := 0; i < len(text); i++ {
		c := text[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return nil, malformed("not base64url without padding")
		}
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(text)
	if err != nil {
		return nil, malformed("not base64url without padding")
	}
	return b, nil
}

// parse splits a proof: it checks the length bounds, the version, that the
// fields fill the bytes before the signature exactly, UTF-8 and the string
// bounds, in that order; not the key or the signature.
func parse(b []byte) (*parsed, error) {
	if len(b) > MaxProofBytes {
		return nil, malformed("longer than any proof")
	}
	if len(b) < MinProofBytes {
		return nil, malformed("shorter than any proof")
	}
	if b[0] != Version {
		return nil, &UnsupportedVersionError{Version: b[0]}
	}
	signed, sig := b[:len(b)-signatureBytes], b[len(b)-signatureBytes:]
	r := reader{b: signed, at: 1}
	p := &parsed{signed: signed, signature: sig}
	copy(p.keyID[:], r.take(keyIDBytes))
	p.fence.Token = binary.BigEndian.Uint64(r.take(8))
	p.fence.Slot = binary.BigEndian.Uint32(r.take(4))
	p.fence.GrantedAtMs = binary.BigEndian.Uint64(r.take(8))
	p.fence.TTLSeconds = binary.BigEndian.Uint32(r.take(4))
	// MinProofBytes guarantees the fixed fields; from here on every read is
	// checked.
	p.fence.Bucket = r.text(r.u8())
	p.fence.Name = r.text(r.u8())
	n := r.u16()
	if r.err == nil && n > MaxHolderBytes {
		return nil, malformed("holder longer than 1024 bytes")
	}
	p.fence.Holder = r.text(n)
	if r.err != nil {
		return nil, r.err
	}
	if r.at != len(signed) {
		return nil, malformed("bytes after the holder")
	}
	if p.fence.Bucket == "" || p.fence.Name == "" {
		return nil, malformed("empty bucket or name")
	}
	return p, nil
}

// reader is a cursor over the statement bytes that records its first error
// (a field running past the signature, or text that is not UTF-8); reads
// after an error return zero values.
type reader struct {
	b   []byte
	at  int
	err error
}

// take returns the next n bytes, or nil once they run past the end.
func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b)-r.at {
		r.err = malformed("a field runs past the signature")
		return nil
	}
	out := r.b[r.at : r.at+n]
	r.at += n
	return out
}

// u8 reads a one-byte length.
func (r *reader) u8() int {
	if b := r.take(1); b != nil {
		return int(b[0])
	}
	return 0
}

// u16 reads a two-byte big-endian length.
func (r *reader) u16() int {
	if b := r.take(2); b != nil {
		return int(binary.BigEndian.Uint16(b))
	}
	return 0
}

// text reads n bytes of UTF-8.
func (r *reader) text(n int) string {
	b := r.take(n)
	if r.err != nil {
		return ""
	}
	if !utf8.Valid(b) {
		r.err = malformed("a text field is not UTF-8")
		return ""
	}
	return string(b)
}
