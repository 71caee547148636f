//! The fence proof byte format, version 1, and its text form.
//!
//! Every integer is unsigned big-endian:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 1 | version, 1 |
//! | 1 | 8 | key id: the first 8 bytes of SHA-256 of the signer's 32-byte Ed25519 public key |
//! | 9 | 8 | fencing token |
//! | 17 | 4 | slot: the semaphore slot, 0 for a plain lease, group member or election |
//! | 21 | 8 | granted at: Unix time of the grant in milliseconds (Tenure's clock) |
//! | 29 | 4 | TTL granted, whole seconds |
//! | 33 | 1 + n | bucket: length, then UTF-8 bytes (1 to 255) |
//! | | 1 + n | lease name: length, then UTF-8 bytes (1 to 255) |
//! | | 2 + n | holder: length, then UTF-8 bytes (0 to 1024) |
//! | end - 64 | 64 | Ed25519 signature over `SIGNING_CONTEXT` followed by every byte before it |
//!
//! The text form (the `Tenure-Fence` HTTP header) is the bytes in base64url
//! without padding (RFC 4648 section 5). Renewals do not change a proof: it
//! states the grant.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// The format version this crate writes and reads.
pub const VERSION: u8 = 1;
/// Signed before the proof bytes, so that a signature made for anything
/// else with the same key can never pass as a proof.
pub const SIGNING_CONTEXT: &[u8] = b"tenure-fence/v1";
/// The longest proof a verifier reads (the longest valid one is 1,635 bytes);
/// longer input is refused before any parsing.
pub const MAX_PROOF_BYTES: usize = 2048;
/// The shortest proof: one-byte bucket and name, empty holder. Shorter
/// input is malformed whatever its first byte.
pub const MIN_PROOF_BYTES: usize = FIXED + 1 + 1 + 1 + 1 + 2 + SIGNATURE;
/// Bytes before the variable-length fields.
const FIXED: usize = 33;
/// Ed25519 signature length.
pub(crate) const SIGNATURE: usize = 64;
/// The longest holder a proof carries.
const MAX_HOLDER: usize = 1024;

/// What a proof states: one grant of one lease name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The Tenure bucket (deployment) that granted the holding.
    pub bucket: String,
    /// The lease name.
    pub name: String,
    /// The semaphore slot, 0 for a plain lease, group member or election.
    pub slot: u32,
    /// The fencing token: strictly greater for every later holder of the name.
    pub token: u64,
    /// When the holding was granted, Unix milliseconds on Tenure's clock.
    pub granted_at_ms: u64,
    /// The TTL granted, whole seconds.
    pub ttl_s: u32,
    /// Who the holding was granted to (the holder the client named).
    pub holder: String,
}

/// Why a proof was refused. The same five kinds, with the same names, are
/// what every language's verifier reports (docs/fencing.md).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    /// Not a proof: bad base64url, wrong lengths, bad UTF-8, an empty name.
    #[error("malformed fence proof: {0}")]
    Malformed(&'static str),
    /// A version this verifier does not read.
    #[error("fence proof version {0} is not supported (this verifier reads version 1)")]
    UnsupportedVersion(u8),
    /// Signed by a key the store has not pinned.
    #[error(
        "fence proof signed by unknown key {0}: refresh the pinned keys from `tenure fence-keys`"
    )]
    UnknownKey(String),
    /// The signature does not match the statement.
    #[error("fence proof signature does not verify: the proof was altered or forged")]
    BadSignature,
}

impl FenceError {
    /// The kind as the shared test vectors and HTTP bodies name it.
    pub fn kind(&self) -> &'static str {
        match self {
            FenceError::Malformed(_) => "malformed",
            FenceError::UnsupportedVersion(_) => "unsupported_version",
            FenceError::UnknownKey(_) => "unknown_key",
            FenceError::BadSignature => "bad_signature",
        }
    }
}

/// A signed proof as bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof(pub Vec<u8>);

impl Proof {
    /// The text form: base64url without padding.
    pub fn to_text(&self) -> String {
        URL_SAFE_NO_PAD.encode(&self.0)
    }

    /// Bytes from the text form (checked for length before decoding).
    pub fn from_text(text: &str) -> Result<Proof, FenceError> {
        if text.len() > MAX_PROOF_BYTES.div_ceil(3) * 4 {
            return Err(FenceError::Malformed("longer than any proof"));
        }
        URL_SAFE_NO_PAD
            .decode(text.as_bytes())
            .map(Proof)
            .map_err(|_| FenceError::Malformed("not base64url without padding"))
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The statement bytes (everything but the signature) of a fence, signed
/// with `key_id`. Fails on fields the format cannot carry.
pub(crate) fn statement(fence: &Fence, key_id: [u8; 8]) -> Vec<u8> {
    let bucket = clip(&fence.bucket, 255);
    let name = clip(&fence.name, 255);
    let holder = clip(&fence.holder, MAX_HOLDER);
    let mut out =
        Vec::with_capacity(FIXED + 4 + bucket.len() + name.len() + holder.len() + SIGNATURE);
    out.push(VERSION);
    out.extend_from_slice(&key_id);
    out.extend_from_slice(&fence.token.to_be_bytes());
    out.extend_from_slice(&fence.slot.to_be_bytes());
    out.extend_from_slice(&fence.granted_at_ms.to_be_bytes());
    out.extend_from_slice(&fence.ttl_s.to_be_bytes());
    out.push(bucket.len() as u8);
    out.extend_from_slice(bucket);
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&(holder.len() as u16).to_be_bytes());
    out.extend_from_slice(holder);
    out
}

/// At most `max` bytes of `s`, cut at a character boundary. Tenure's own
/// names and holders are always within the bounds; a cut never happens for
/// them.
fn clip(s: &str, max: usize) -> &[u8] {
    if s.len() <= max {
        return s.as_bytes();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s.as_bytes()[..end]
}

/// A proof split into its parts, before its signature is checked.
pub(crate) struct Parsed<'a> {
    /// The signing key's id.
    pub key_id: [u8; 8],
    /// The statement.
    pub fence: Fence,
    /// The signed bytes (the statement bytes, without the context).
    pub signed: &'a [u8],
    /// The signature.
    pub signature: [u8; SIGNATURE],
}

/// Splits a proof; checks lengths, version and UTF-8, not the signature.
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed<'_>, FenceError> {
    if bytes.len() > MAX_PROOF_BYTES {
        return Err(FenceError::Malformed("longer than any proof"));
    }
    if bytes.len() < MIN_PROOF_BYTES {
        return Err(FenceError::Malformed("shorter than any proof"));
    }
    if bytes[0] != VERSION {
        return Err(FenceError::UnsupportedVersion(bytes[0]));
    }
    let (signed, sig) = bytes.split_at(bytes.len() - SIGNATURE);
    let mut r = Reader {
        bytes: signed,
        at: 1,
    };
    let key_id: [u8; 8] = r.take(8)?.try_into().expect("8 bytes");
    let token = u64::from_be_bytes(r.take(8)?.try_into().expect("8 bytes"));
    let slot = u32::from_be_bytes(r.take(4)?.try_into().expect("4 bytes"));
    let granted_at_ms = u64::from_be_bytes(r.take(8)?.try_into().expect("8 bytes"));
    let ttl_s = u32::from_be_bytes(r.take(4)?.try_into().expect("4 bytes"));
    let n = r.take(1)?[0] as usize;
    let bucket = r.text(n)?;
    let n = r.take(1)?[0] as usize;
    let name = r.text(n)?;
    let n = u16::from_be_bytes(r.take(2)?.try_into().expect("2 bytes")) as usize;
    if n > MAX_HOLDER {
        return Err(FenceError::Malformed("holder longer than 1024 bytes"));
    }
    let holder = r.text(n)?;
    if r.at != signed.len() {
        return Err(FenceError::Malformed("bytes after the holder"));
    }
    if bucket.is_empty() || name.is_empty() {
        return Err(FenceError::Malformed("empty bucket or name"));
    }
    Ok(Parsed {
        key_id,
        fence: Fence {
            bucket,
            name,
            slot,
            token,
            granted_at_ms,
            ttl_s,
            holder,
        },
        signed,
        signature: sig.try_into().expect("64 bytes"),
    })
}

/// A cursor over the statement bytes.
struct Reader<'a> {
    /// The statement bytes.
    bytes: &'a [u8],
    /// The next byte to read.
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FenceError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or(FenceError::Malformed("a field runs past the signature"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn text(&mut self, n: usize) -> Result<String, FenceError> {
        let raw = self.take(n)?;
        String::from_utf8(raw.to_vec())
            .map_err(|_| FenceError::Malformed("a text field is not UTF-8"))
    }
}
