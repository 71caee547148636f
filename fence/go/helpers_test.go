package fence_test

// Test helpers: the shared vectors file, and a signer (proof signing is not
// part of the package: Tenure signs, stores only verify).

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	fence "github.com/tenure-dev/tenure/fence/go"
)

// vectorsPath is the shared vectors file, relative to this package.
var vectorsPath = filepath.Join("..", "vectors", "v1.json")

// vectors is fence/vectors/v1.json.
type vectors struct {
	Keyset string `json:"keyset"`
	Keys   []struct {
		Name      string `json:"name"`
		SeedHex   string `json:"seed_hex"`
		PublicKey string `json:"public_key"`
		KeyID     string `json:"key_id"`
		Pinned    bool   `json:"pinned"`
	} `json:"keys"`
	Valid []struct {
		About     string `json:"about"`
		ProofText string `json:"proof_text"`
		ProofHex  string `json:"proof_hex"`
		KeyID     string `json:"key_id"`
		Fence     struct {
			Bucket      string `json:"bucket"`
			Name        string `json:"name"`
			Slot        uint32 `json:"slot"`
			Token       string `json:"token"`
			GrantedAtMs string `json:"granted_at_ms"`
			TTLSeconds  uint32 `json:"ttl_s"`
			Holder      string `json:"holder"`
		} `json:"fence"`
	} `json:"valid"`
	Invalid []struct {
		About     string `json:"about"`
		ProofText string `json:"proof_text"`
		Error     string `json:"error"`
	} `json:"invalid"`
}

// loadVectors reads the shared vectors; a missing or unreadable file fails
// the test.
func loadVectors(t *testing.T) *vectors {
	t.Helper()
	b, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatalf("the shared test vectors are required: %v", err)
	}
	var v vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", vectorsPath, err)
	}
	if len(v.Valid) == 0 || len(v.Invalid) == 0 || len(v.Keys) == 0 {
		t.Fatalf("%s: no valid or invalid cases, or no keys", vectorsPath)
	}
	return &v
}

// mustUint64 parses a decimal string of the vectors.
func mustUint64(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("vector number %q: %v", s, err)
	}
	return n
}

// signer signs proofs as Tenure does, with a test key.
type signer struct {
	priv ed25519.PrivateKey
	id   [8]byte
}

// newSigner is the signer of a 32-byte seed given in hex.
func newSigner(t *testing.T, seedHex string) *signer {
	t.Helper()
	seed, err := hex.DecodeString(seedHex)
	if err != nil || len(seed) != ed25519.SeedSize {
		t.Fatalf("seed %q: %v", seedHex, err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	sum := sha256.Sum256(priv.Public().(ed25519.PublicKey))
	s := &signer{priv: priv}
	copy(s.id[:], sum[:8])
	return s
}

// vectorSigner is the signer of the vectors' key named name.
func vectorSigner(t *testing.T, v *vectors, name string) *signer {
	t.Helper()
	for _, k := range v.Keys {
		if k.Name == name {
			return newSigner(t, k.SeedHex)
		}
	}
	t.Fatalf("the vectors have no key %q", name)
	return nil
}

// publicText is the signer's public key as a keyset line.
func (s *signer) publicText() string {
	return base64.RawURLEncoding.EncodeToString(s.priv.Public().(ed25519.PublicKey))
}

// statement is the proof bytes before the signature, format version 1.
func statement(f fence.Fence, keyID [8]byte) []byte {
	b := []byte{fence.Version}
	b = append(b, keyID[:]...)
	b = binary.BigEndian.AppendUint64(b, f.Token)
	b = binary.BigEndian.AppendUint32(b, f.Slot)
	b = binary.BigEndian.AppendUint64(b, f.GrantedAtMs)
	b = binary.BigEndian.AppendUint32(b, f.TTLSeconds)
	b = append(b, byte(len(f.Bucket)))
	b = append(b, f.Bucket...)
	b = append(b, byte(len(f.Name)))
	b = append(b, f.Name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(f.Holder)))
	return append(b, f.Holder...)
}

// signBytes signs statement bytes as they are (possibly not a valid
// statement) and appends the signature.
func (s *signer) signBytes(stmt []byte) []byte {
	msg := append([]byte(fence.SigningContext), stmt...)
	return append(append([]byte(nil), stmt...), ed25519.Sign(s.priv, msg)...)
}

// sign is the proof of f.
func (s *signer) sign(f fence.Fence) []byte { return s.signBytes(statement(f, s.id)) }

// signText is the text form of the proof of f.
func (s *signer) signText(f fence.Fence) string {
	return base64.RawURLEncoding.EncodeToString(s.sign(f))
}

// grant is a fence of lease name with token, as Tenure would state it.
func grant(name string, token uint64) fence.Fence {
	return fence.Fence{
		Bucket: "tenure", Name: name, Token: token,
		GrantedAtMs: 1_767_225_600_123, TTLSeconds: 10, Holder: "worker-1",
	}
}
