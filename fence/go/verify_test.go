package fence_test

// The verifier beyond the shared vectors: the bounds and order of
// docs/fencing.md's verification steps, the strict text form, and strict
// Ed25519 where the standard library alone is lenient.

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"math/big"
	"math/rand"
	"strings"
	"testing"

	fence "github.com/tenure-dev/tenure/fence/go"
)

// testKeyset pins the vectors' "active" and "older" keys.
func testKeyset(t *testing.T) (*fence.Keyset, *vectors) {
	t.Helper()
	v := loadVectors(t)
	ks, err := fence.ParseKeyset(v.Keyset)
	if err != nil {
		t.Fatal(err)
	}
	return ks, v
}

// wantKind fails unless err is a refusal of kind.
func wantKind(t *testing.T, err error, kind string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want %s", kind)
	}
	if got := fence.KindOf(err); got != kind {
		t.Fatalf("refused as %q (%v); want %q", got, err, kind)
	}
}

// b64 is the text form of b.
func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func TestLengthBounds(t *testing.T) {
	ks, v := testKeyset(t)
	s := vectorSigner(t, v, "active")

	// The shortest proof: one-byte bucket and name, empty holder.
	short := fence.Fence{Bucket: "t", Name: "n", Token: 1}
	p := s.sign(short)
	if len(p) != fence.MinProofBytes || fence.MinProofBytes != 103 {
		t.Fatalf("shortest proof is %d bytes, MinProofBytes %d; want 103", len(p), fence.MinProofBytes)
	}
	if got, err := ks.Verify(p); err != nil || got.Fence != short {
		t.Fatalf("shortest proof: %+v, %v", got, err)
	}
	wantKind(t, mustErr(ks.Verify(p[:102])), fence.KindMalformed)

	// The longest proof the format allows: 255-byte bucket and name,
	// 1024-byte holder.
	long := fence.Fence{Bucket: strings.Repeat("b", 255), Name: strings.Repeat("n", 255), Holder: strings.Repeat("h", 1024), Token: 2}
	p = s.sign(long)
	if len(p) != 1635 {
		t.Fatalf("longest proof is %d bytes, want 1635", len(p))
	}
	if got, err := ks.Verify(p); err != nil || got.Fence != long {
		t.Fatalf("longest proof: %v", err)
	}

	// Length is checked before the version: 2,049 bytes are malformed
	// whatever they hold; 2,048 bytes are read, and version 0 is refused.
	wantKind(t, mustErr(ks.Verify(make([]byte, fence.MaxProofBytes+1))), fence.KindMalformed)
	wantKind(t, mustErr(ks.Verify(make([]byte, fence.MaxProofBytes))), fence.KindUnsupportedVersion)
	// Text: 2,731 characters decode to 2,048 bytes; 2,732 to 2,049 bytes,
	// refused as too long; longer text is refused before decoding, whatever
	// the characters.
	if fence.MaxTextLen != 2732 {
		t.Fatalf("MaxTextLen = %d, want 2732", fence.MaxTextLen)
	}
	wantKind(t, mustErr(ks.VerifyText(strings.Repeat("A", fence.MaxTextLen-1))), fence.KindUnsupportedVersion)
	for _, text := range []string{strings.Repeat("A", fence.MaxTextLen), strings.Repeat("A", fence.MaxTextLen+1), strings.Repeat("=", 1<<20)} {
		_, err := ks.VerifyText(text)
		var m *fence.MalformedError
		if !errors.As(err, &m) || m.Reason != "longer than any proof" {
			t.Fatalf("%d characters: %v; want malformed, longer than any proof", len(text), err)
		}
	}
}

// mustErr is the error of a call returning (value, error).
func mustErr(_ *fence.Verified, err error) error { return err }

func TestTextFormIsStrict(t *testing.T) {
	ks, v := testKeyset(t)
	text := vectorSigner(t, v, "active").signText(grant("orders", 42)) // 121 bytes: 162 characters
	if _, err := ks.VerifyText(text); err != nil {
		t.Fatal(err)
	}
	if len(text)%4 != 2 {
		t.Fatalf("want a text whose last character carries 4 unused bits, got length %d", len(text))
	}
	last := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", text[len(text)-1])
	for name, bad := range map[string]string{
		"a line break":          text[:80] + "\n" + text[80:],
		"a carriage return":     text[:80] + "\r" + text[80:],
		"a space":               text[:80] + " " + text[80:],
		"padding":               text + "==",
		"unused bits set":       text[:len(text)-1] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[last|1]),
		"a dangling character":  text + "A",
		"the standard alphabet": base64.RawStdEncoding.EncodeToString([]byte{0xfb, 0xff}) + text[3:],
		"leading space":         " " + text,
		"not a proof":           "hello",
		"one character":         "A",
	} {
		t.Run(name, func(t *testing.T) {
			if bad == text {
				t.Fatal("the case did not change the text")
			}
			wantKind(t, mustErr(ks.VerifyText(bad)), fence.KindMalformed)
		})
	}
}

func TestFieldsFillTheStatementExactly(t *testing.T) {
	ks, v := testKeyset(t)
	s := vectorSigner(t, v, "active")
	base := grant("orders", 42)
	stmt := statement(base, s.id)
	holderAt := len(stmt) - len(base.Holder) - 2

	cases := map[string][]byte{
		"a byte after the holder": append(append([]byte(nil), stmt...), 0),
		"holder cut short":        stmt[:len(stmt)-1],
		"holder length 1025":      withHolder(stmt[:holderAt], strings.Repeat("h", 1025)),
		"holder not UTF-8":        withHolder(stmt[:holderAt], "\xff\xfe"),
		"bucket not UTF-8":        statement(fence.Fence{Bucket: "\xc3(", Name: "orders", Token: 1}, s.id),
		"name a lone surrogate":   statement(fence.Fence{Bucket: "tenure", Name: "\xed\xa0\x80", Token: 1}, s.id),
		"empty bucket":            statement(fence.Fence{Bucket: "", Name: "orders", Token: 1}, s.id),
		"empty name":              statement(fence.Fence{Bucket: "tenure", Name: "", Token: 1}, s.id),
		"name runs past the end":  append(statement(fence.Fence{Bucket: "tenure", Name: "o", Token: 1}, s.id)[:39], 0xff),
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			// Signed by a pinned key: only the format is wrong.
			wantKind(t, mustErr(ks.Verify(s.signBytes(bad))), fence.KindMalformed)
		})
	}
	// The holder's bound is the format's, not the proof's length: 1024
	// bytes verify.
	if _, err := ks.Verify(s.signBytes(withHolder(stmt[:holderAt], strings.Repeat("h", 1024)))); err != nil {
		t.Fatalf("1024-byte holder: %v", err)
	}
}

// withHolder appends a holder (its length, then its bytes) to the statement
// bytes before the holder.
func withHolder(prefix []byte, holder string) []byte {
	b := append([]byte(nil), prefix...)
	b = append(b, byte(len(holder)>>8), byte(len(holder)))
	return append(b, holder...)
}

func TestVerificationOrder(t *testing.T) {
	ks, v := testKeyset(t)
	active, stranger := vectorSigner(t, v, "active"), vectorSigner(t, v, "stranger")

	// Version before fields: a version 2 with fields this verifier cannot
	// read is unsupported, not malformed.
	p := active.sign(grant("orders", 1))
	p[0] = 2
	p[40] = 0xff
	wantKind(t, mustErr(ks.Verify(p)), fence.KindUnsupportedVersion)
	// Fields before the key: a stranger's malformed proof is malformed.
	wantKind(t, mustErr(ks.Verify(stranger.signBytes(statement(fence.Fence{Bucket: "tenure", Token: 1}, stranger.id)))), fence.KindMalformed)
	// Key before the signature: a stranger's proof is unknown_key, naming
	// the key.
	_, err := ks.Verify(stranger.sign(grant("orders", 1)))
	var uk *fence.UnknownKeyError
	if !errors.As(err, &uk) || uk.KeyID != fence.KeyID(stranger.priv.Public().(ed25519.PublicKey)) {
		t.Fatalf("stranger's proof: %v; want unknown_key naming its key", err)
	}
	// The signature covers the context: one made over the statement alone
	// does not verify.
	stmt := statement(grant("orders", 1), active.id)
	wantKind(t, mustErr(ks.Verify(append(stmt, ed25519.Sign(active.priv, stmt)...))), fence.KindBadSignature)
}

func TestEveryChangedByteIsRefused(t *testing.T) {
	ks, v := testKeyset(t)
	p := vectorSigner(t, v, "active").sign(grant("orders", 42))
	rng := rand.New(rand.NewSource(27))
	kinds := map[string]int{}
	for i := 0; i < 3000; i++ {
		b := append([]byte(nil), p...)
		switch rng.Intn(3) {
		case 0: // change one byte
			at := rng.Intn(len(b))
			b[at] ^= byte(1 + rng.Intn(255))
		case 1: // cut
			b = b[:rng.Intn(len(b))]
		default: // insert a byte
			at := rng.Intn(len(b))
			b = append(b[:at], append([]byte{byte(rng.Intn(256))}, b[at:]...)...)
		}
		got, err := ks.Verify(b)
		if err == nil {
			t.Fatalf("a changed proof verified: %x -> %+v", b, got)
		}
		kinds[fence.KindOf(err)]++
	}
	for k := range kinds {
		switch k {
		case fence.KindMalformed, fence.KindUnsupportedVersion, fence.KindUnknownKey, fence.KindBadSignature:
		default:
			t.Fatalf("refused with kind %q", k)
		}
	}
	if kinds[fence.KindBadSignature] == 0 || kinds[fence.KindMalformed] == 0 {
		t.Fatalf("kinds seen %v: want bad signatures and malformed proofs among them", kinds)
	}
}

// The strict Ed25519 cases: signatures the standard library's Verify
// accepts and Tenure's reference verifier (ed25519-dalek verify_strict)
// refuses.

// groupOrder is the order L = 2^252 + 27742317777372353535851937790883648493
// of the Ed25519 base point.
var groupOrder = func() *big.Int {
	c, _ := new(big.Int).SetString("27742317777372353535851937790883648493", 10)
	return c.Add(c, new(big.Int).Lsh(big.NewInt(1), 252))
}()

// identity is the encoding of the identity point (y = 1).
var identity = append([]byte{1}, make([]byte, 31)...)

func TestSmallOrderPublicKeyIsRefused(t *testing.T) {
	// The identity as a public key "verifies" R = identity, S = 0 for any
	// message under the cofactorless equation.
	ks, err := fence.ParseKeyset(b64(identity))
	if err != nil {
		t.Fatalf("a small-order key parses (as in the reference verifier): %v", err)
	}
	sum := sha256.Sum256(identity)
	var id [8]byte
	copy(id[:], sum[:8])
	stmt := statement(grant("orders", 1<<62), id)
	sig := append(append([]byte(nil), identity...), make([]byte, 32)...)
	msg := append([]byte(fence.SigningContext), stmt...)
	if !ed25519.Verify(ed25519.PublicKey(identity), msg, sig) {
		t.Fatal("the standard library refused the weak-key forgery: this test no longer shows the gap")
	}
	wantKind(t, mustErr(ks.Verify(append(stmt, sig...))), fence.KindBadSignature)
}

func TestSmallOrderSignatureRIsRefused(t *testing.T) {
	// With the private key, R = identity and S = k·a verifies under the
	// cofactorless equation; a strict verifier refuses a small-order R.
	ks, v := testKeyset(t)
	s := vectorSigner(t, v, "active")
	stmt := statement(grant("orders", 7), s.id)
	msg := append([]byte(fence.SigningContext), stmt...)
	pub := s.priv.Public().(ed25519.PublicKey)

	h := sha512.Sum512(s.priv.Seed())
	h[0] &= 248
	h[31] &= 127
	h[31] |= 64
	a := leInt(h[:32])
	kh := sha512.New()
	kh.Write(identity)
	kh.Write(pub)
	kh.Write(msg)
	k := leInt(kh.Sum(nil))
	S := new(big.Int).Mul(k, a)
	S.Mod(S, groupOrder)
	sig := append(append([]byte(nil), identity...), leBytes(S)...)
	if !ed25519.Verify(pub, msg, sig) {
		t.Fatal("the standard library refused R = identity: this test no longer shows the gap")
	}
	wantKind(t, mustErr(ks.Verify(append(stmt, sig...))), fence.KindBadSignature)
}

func TestNonCanonicalSIsRefused(t *testing.T) {
	ks, v := testKeyset(t)
	p := vectorSigner(t, v, "active").sign(grant("orders", 7))
	sig := p[len(p)-64:]
	S := new(big.Int).Add(leInt(sig[32:]), groupOrder)
	if S.BitLen() > 253 {
		t.Fatal("S + L of this signature does not fit 253 bits: pick another statement")
	}
	copy(sig[32:], leBytes(S))
	wantKind(t, mustErr(ks.Verify(p)), fence.KindBadSignature)
}

// leInt reads little-endian bytes.
func leInt(b []byte) *big.Int {
	r := make([]byte, len(b))
	for i := range b {
		r[len(b)-1-i] = b[i]
	}
	return new(big.Int).SetBytes(r)
}

// leBytes is n as 32 little-endian bytes.
func leBytes(n *big.Int) []byte {
	be := n.FillBytes(make([]byte, 32))
	out := make([]byte, 32)
	for i := range be {
		out[31-i] = be[i]
	}
	return out
}
