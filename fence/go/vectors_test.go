package fence_test

// Every case of the shared vectors (fence/vectors/v1.json), which every
// language's verifier must pass.

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"

	fence "github.com/tenure-dev/tenure/fence/go"
)

func TestVectorsValidProofsVerifyAndStateTheirFence(t *testing.T) {
	v := loadVectors(t)
	ks, err := fence.ParseKeyset(v.Keyset)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range v.Valid {
		t.Run(c.About, func(t *testing.T) {
			want := fence.Fence{
				Bucket:      c.Fence.Bucket,
				Name:        c.Fence.Name,
				Slot:        c.Fence.Slot,
				Token:       mustUint64(t, c.Fence.Token),
				GrantedAtMs: mustUint64(t, c.Fence.GrantedAtMs),
				TTLSeconds:  c.Fence.TTLSeconds,
				Holder:      c.Fence.Holder,
			}
			got, err := ks.VerifyText(c.ProofText)
			if err != nil {
				t.Fatalf("VerifyText: %v", err)
			}
			if got.Fence != want || got.KeyID != c.KeyID {
				t.Fatalf("VerifyText = %+v, key %s; want %+v, key %s", got.Fence, got.KeyID, want, c.KeyID)
			}
			raw, err := hex.DecodeString(c.ProofHex)
			if err != nil {
				t.Fatal(err)
			}
			got, err = ks.Verify(raw)
			if err != nil || got.Fence != want {
				t.Fatalf("Verify(proof_hex) = %+v, %v; want %+v", got, err, want)
			}
			// The test signer (used by the other tests) makes the same
			// bytes: signatures are deterministic.
			for _, k := range v.Keys {
				if k.KeyID == c.KeyID {
					if again := newSigner(t, k.SeedHex).signText(want); again != c.ProofText {
						t.Fatalf("the test signer made %s, the vector is %s", again, c.ProofText)
					}
				}
			}
		})
	}
}

func TestVectorsInvalidTextsAreRefusedWithTheirKind(t *testing.T) {
	v := loadVectors(t)
	ks, err := fence.ParseKeyset(v.Keyset)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range v.Invalid {
		t.Run(c.About, func(t *testing.T) {
			got, err := ks.VerifyText(c.ProofText)
			if err == nil {
				t.Fatalf("VerifyText accepted it: %+v", got)
			}
			if kind := fence.KindOf(err); kind != c.Error {
				t.Fatalf("kind %q (%v), want %q", kind, err, c.Error)
			}
			// The concrete type matches the kind, for errors.As.
			var ok bool
			switch c.Error {
			case fence.KindMalformed:
				var e *fence.MalformedError
				ok = errors.As(err, &e)
			case fence.KindUnsupportedVersion:
				var e *fence.UnsupportedVersionError
				ok = errors.As(err, &e)
			case fence.KindUnknownKey:
				var e *fence.UnknownKeyError
				ok = errors.As(err, &e)
			case fence.KindBadSignature:
				var e *fence.BadSignatureError
				ok = errors.As(err, &e)
			default:
				t.Fatalf("unknown kind %q in the vectors", c.Error)
			}
			if !ok {
				t.Fatalf("%T is not the type of kind %q", err, c.Error)
			}
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
		})
	}
}

func TestVectorsKeysAndKeyset(t *testing.T) {
	v := loadVectors(t)
	ks, err := fence.ParseKeyset(v.Keyset)
	if err != nil {
		t.Fatal(err)
	}
	var pinned []string
	for _, k := range v.Keys {
		pub, err := base64.RawURLEncoding.DecodeString(k.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		if id := fence.KeyID(ed25519.PublicKey(pub)); id != k.KeyID {
			t.Errorf("KeyID(%s) = %s, want %s", k.Name, id, k.KeyID)
		}
		if s := newSigner(t, k.SeedHex); s.publicText() != k.PublicKey {
			t.Errorf("seed of %s gives public key %s, want %s", k.Name, s.publicText(), k.PublicKey)
		}
		if k.Pinned {
			pinned = append(pinned, k.KeyID)
		}
	}
	if got := ks.KeyIDs(); !reflect.DeepEqual(got, pinned) {
		t.Fatalf("KeyIDs = %v, want %v", got, pinned)
	}
}
