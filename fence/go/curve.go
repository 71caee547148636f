package fence

import "math/big"

// Strict Ed25519 beyond crypto/ed25519. The standard library verifies
// signatures with the cofactorless equation and canonical S, as Tenure's
// reference verifier does (ed25519-dalek's verify_strict), but it accepts
// public keys and signature R points of small order, with which a
// "signature" can verify for any message (the identity key with R = the
// identity and S = 0 verifies everything). These checks close that gap, so
// that both verifiers refuse exactly the same signatures.

var (
	// fieldP is the field prime 2^255 - 19.
	fieldP = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	// curveD is the curve constant d = -121665/121666 mod p.
	curveD = func() *big.Int {
		inv := new(big.Int).ModInverse(big.NewInt(121666), fieldP)
		d := new(big.Int).Mul(big.NewInt(-121665), inv)
		return d.Mod(d, fieldP)
	}()
	// smallOrderY are the y coordinates of the eight points of small order
	// (the 8-torsion): 1 (the identity), p - 1 (order 2), 0 (order 4) and
	// the two of the four points of order 8. A point has small order
	// exactly when its y (reduced mod p) is one of them.
	smallOrderY = func() []*big.Int {
		y8 := le("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")
		return []*big.Int{
			big.NewInt(0),
			big.NewInt(1),
			new(big.Int).Sub(fieldP, big.NewInt(1)),
			y8,
			new(big.Int).Sub(fieldP, y8),
		}
	}()
)

// le reads a 32-byte little-endian hex constant.
func le(h string) *big.Int {
	b := make([]byte, len(h)/2)
	for i := range b {
		b[len(b)-1-i] = unhex(h[2*i])<<4 | unhex(h[2*i+1])
	}
	return new(big.Int).SetBytes(b)
}

// unhex is the value of one hex digit of a constant.
func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

// pointY is the y coordinate of an encoded point (its low 255 bits,
// little-endian), reduced mod p as every Ed25519 decoder does.
func pointY(enc []byte) *big.Int {
	b := make([]byte, 32)
	for i := 0; i < 32; i++ {
		b[31-i] = enc[i]
	}
	b[0] &= 0x7f
	y := new(big.Int).SetBytes(b)
	return y.Mod(y, fieldP)
}

// onCurve reports whether a 32-byte encoding decodes to a curve point: x² =
// (y² - 1) / (d·y² + 1) has a root. The sign bit is free, as in the
// decoders of the standard library and ed25519-dalek.
func onCurve(enc []byte) bool {
	y := pointY(enc)
	y2 := new(big.Int).Mul(y, y)
	u := new(big.Int).Sub(y2, big.NewInt(1))
	v := new(big.Int).Mul(curveD, y2)
	v.Add(v, big.NewInt(1)).Mod(v, fieldP)
	x2 := u.Mul(u, new(big.Int).ModInverse(v, fieldP))
	x2.Mod(x2, fieldP)
	return x2.Sign() == 0 || big.Jacobi(x2, fieldP) == 1
}

// smallOrder reports whether an encoded curve point has small order (its
// multiple by the cofactor 8 is the identity).
func smallOrder(enc []byte) bool {
	y := pointY(enc)
	for _, s := range smallOrderY {
		if y.Cmp(s) == 0 {
			return true
		}
	}
	return false
}
