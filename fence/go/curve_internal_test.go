package fence

// The small-order and on-curve checks against independent affine Edwards
// arithmetic: a point has small order exactly when 8·P is the identity.

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"math/big"
	"testing"
)

// affine is a curve point (x, y).
type affine struct{ x, y *big.Int }

// decode decodes a 32-byte encoding, or reports false when y has no x.
func decode(enc []byte) (affine, bool) {
	y := pointY(enc)
	y2 := new(big.Int).Mul(y, y)
	u := new(big.Int).Sub(y2, big.NewInt(1))
	v := new(big.Int).Mul(curveD, y2)
	v.Add(v, big.NewInt(1))
	x2 := u.Mul(u, new(big.Int).ModInverse(v.Mod(v, fieldP), fieldP))
	x := new(big.Int).ModSqrt(x2.Mod(x2, fieldP), fieldP)
	if x == nil {
		return affine{}, false
	}
	if enc[31]>>7 == 1 {
		x.Sub(fieldP, x).Mod(x, fieldP)
	}
	return affine{x, y}, true
}

// add is P + Q on -x² + y² = 1 + d·x²·y².
func add(p, q affine) affine {
	mod := func(n *big.Int) *big.Int { return n.Mod(n, fieldP) }
	t := mod(new(big.Int).Mul(curveD, mod(new(big.Int).Mul(mod(new(big.Int).Mul(p.x, q.x)), mod(new(big.Int).Mul(p.y, q.y))))))
	xn := mod(new(big.Int).Add(new(big.Int).Mul(p.x, q.y), new(big.Int).Mul(p.y, q.x)))
	yn := mod(new(big.Int).Add(new(big.Int).Mul(p.y, q.y), new(big.Int).Mul(p.x, q.x)))
	xd := mod(new(big.Int).Add(big.NewInt(1), t))
	yd := mod(new(big.Int).Sub(big.NewInt(1), t))
	return affine{
		mod(xn.Mul(xn, new(big.Int).ModInverse(xd, fieldP))),
		mod(yn.Mul(yn, new(big.Int).ModInverse(yd, fieldP))),
	}
}

// timesEightIsIdentity reports whether 8·P is (0, 1).
func timesEightIsIdentity(p affine) bool {
	for i := 0; i < 3; i++ {
		p = add(p, p)
	}
	return p.x.Sign() == 0 && p.y.Cmp(big.NewInt(1)) == 0
}

func TestSmallOrderMatchesTheCofactorRule(t *testing.T) {
	// The eight small-order points, and non-canonical encodings of some.
	small := []string{
		"0100000000000000000000000000000000000000000000000000000000000000",
		"0100000000000000000000000000000000000000000000000000000000000080",
		"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
		"0000000000000000000000000000000000000000000000000000000000000000",
		"0000000000000000000000000000000000000000000000000000000000000080",
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
		"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p
		"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p + 1
	}
	for _, h := range small {
		enc, _ := hex.DecodeString(h)
		p, ok := decode(enc)
		if !ok || !onCurve(enc) {
			t.Fatalf("%s: not on the curve", h)
		}
		if !timesEightIsIdentity(p) || !smallOrder(enc) {
			t.Fatalf("%s: 8P identity %v, smallOrder %v; want both", h, timesEightIsIdentity(p), smallOrder(enc))
		}
	}
	// Genuine public keys, and points found by hashing: never small order.
	seen := 0
	for i := 0; seen < 40; i++ {
		var enc []byte
		if i < 20 {
			seed := sha256.Sum256([]byte{byte(i)})
			enc = ed25519.NewKeyFromSeed(seed[:]).Public().(ed25519.PublicKey)
		} else {
			sum := sha256.Sum256([]byte{byte(i), 'y'})
			enc = sum[:]
		}
		p, ok := decode(enc)
		if ok != onCurve(enc) {
			t.Fatalf("%x: decodes %v, onCurve %v", enc, ok, onCurve(enc))
		}
		if !ok {
			continue
		}
		seen++
		if timesEightIsIdentity(p) || smallOrder(enc) {
			t.Fatalf("%x: reported small order", enc)
		}
	}
	// y = 2 is on no point.
	two := append([]byte{2}, make([]byte, 31)...)
	if onCurve(two) {
		t.Fatal("y = 2 reported on the curve")
	}
}
