//! The shared test vectors (`fence/vectors/v1.json`): built here from fixed
//! seeds, compared with the committed file, and every case checked against
//! this crate's verifier. Every other language's tests read the same file.
//! `TENURE_FENCE_WRITE_VECTORS=1 cargo test -p tenure-fence` rewrites it
//! after a deliberate change of the format.

use serde::Serialize;
use tenure_fence::{Fence, Keyset, Proof, Signer};

/// The committed vectors file.
const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../vectors/v1.json");

#[derive(Serialize)]
struct Vectors {
    /// What the file is and how to use it.
    about: Vec<&'static str>,
    /// The keyset text a verifier pins (keys "active" and "older").
    keyset: String,
    /// Every key: name, seed (hex, private: test use only), public key
    /// (keyset form), key id, pinned or not.
    keys: Vec<Key>,
    /// Proofs that verify, with what they state.
    valid: Vec<Valid>,
    /// Texts that must be refused, with the error kind.
    invalid: Vec<Invalid>,
}

#[derive(Serialize)]
struct Key {
    name: &'static str,
    seed_hex: String,
    public_key: String,
    key_id: String,
    pinned: bool,
}

#[derive(Serialize)]
struct Valid {
    about: &'static str,
    proof_text: String,
    proof_hex: String,
    key_id: String,
    fence: FenceJson,
}

#[derive(Serialize)]
struct FenceJson {
    bucket: String,
    name: String,
    slot: u32,
    /// Decimal string: a u64 does not fit every language's JSON number.
    token: String,
    granted_at_ms: String,
    ttl_s: u32,
    holder: String,
}

#[derive(Serialize)]
struct Invalid {
    about: &'static str,
    proof_text: String,
    error: &'static str,
}

fn signer(byte: u8) -> Signer {
    Signer::from_seed(&[byte; 32])
}

fn fence(name: &str, slot: u32, token: u64, holder: &str) -> Fence {
    Fence {
        bucket: "tenure".into(),
        name: name.into(),
        slot,
        token,
        granted_at_ms: 1_767_225_600_123,
        ttl_s: 10,
        holder: holder.into(),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn text(bytes: &[u8]) -> String {
    Proof(bytes.to_vec()).to_text()
}

fn build() -> Vectors {
    let active = signer(1);
    let older = signer(2);
    let stranger = signer(3);
    let keyset = format!(
        "# Tenure fence keys (test vectors)\n{}  # active\n{}  # older, still verifying\n",
        active.public_key_text(),
        older.public_key_text()
    );
    let key = |name, s: &Signer, byte: u8, pinned| Key {
        name,
        seed_hex: hex(&[byte; 32]),
        public_key: s.public_key_text(),
        key_id: hex(&s.key_id()),
        pinned,
    };
    let keys = vec![
        key("active", &active, 1, true),
        key("older", &older, 2, true),
        key("stranger", &stranger, 3, false),
    ];

    let long_name = format!("a{}", "b".repeat(254));
    let valid_cases: Vec<(&str, &Signer, Fence)> = vec![
        ("a plain lease", &active, fence("orders", 0, 42, "worker-1")),
        (
            "a semaphore slot, signed by the older key",
            &older,
            fence("pool.gpu", 3, 1_000_003, "trainer-7"),
        ),
        (
            "the largest token (u64 max): verifiers must not lose precision",
            &active,
            fence("big", 0, u64::MAX, "x"),
        ),
        (
            "an empty holder, a 255-byte name",
            &active,
            fence(&long_name, 0, 7, ""),
        ),
        (
            "a UTF-8 holder",
            &active,
            fence("jobs/eu-1.report", 0, 9_007_199_254_740_993, "wörker ✓"),
        ),
    ];
    let mut valid = Vec::new();
    for (about, s, f) in &valid_cases {
        let p = s.sign(f);
        valid.push(Valid {
            about,
            proof_text: p.to_text(),
            proof_hex: hex(p.as_bytes()),
            key_id: hex(&s.key_id()),
            fence: FenceJson {
                bucket: f.bucket.clone(),
                name: f.name.clone(),
                slot: f.slot,
                token: f.token.to_string(),
                granted_at_ms: f.granted_at_ms.to_string(),
                ttl_s: f.ttl_s,
                holder: f.holder.clone(),
            },
        });
    }

    let good = active.sign(&fence("orders", 0, 42, "worker-1")).0;
    let flip = |at: usize| {
        let mut b = good.clone();
        b[at] ^= 0x01;
        b
    };
    let sig_at = good.len() - 64;
    let mut forged_huge = good.clone();
    forged_huge[9..17].copy_from_slice(&(1u64 << 62).to_be_bytes());
    let mut other_id = stranger.sign(&fence("orders", 0, 42, "worker-1")).0;
    other_id[1..9].copy_from_slice(&active.key_id());
    let mut v2 = good.clone();
    v2[0] = 2;
    let mut appended = good.clone();
    appended.insert(sig_at, 0);
    let empty_name = {
        // bucket "tenure", then a zero-length name: refused before any key
        // or signature check.
        let mut b = good[..33].to_vec();
        b.push(6);
        b.extend_from_slice(b"tenure");
        b.push(0);
        b.extend_from_slice(&0u16.to_be_bytes());
        b.extend_from_slice(&[0; 64]);
        b
    };
    let good_text = text(&good);
    let invalid = vec![
        Invalid {
            about: "the token changed to 2^62 (a forged, huge token)",
            proof_text: text(&forged_huge),
            error: "bad_signature",
        },
        Invalid {
            about: "one bit of the name changed",
            proof_text: text(&flip(35)),
            error: "bad_signature",
        },
        Invalid {
            about: "one bit of the signature changed",
            proof_text: text(&flip(sig_at + 5)),
            error: "bad_signature",
        },
        Invalid {
            about: "signed by a key that is not pinned",
            proof_text: text(&stranger.sign(&fence("orders", 0, 42, "worker-1")).0),
            error: "unknown_key",
        },
        Invalid {
            about: "names a pinned key's id, signed by another key",
            proof_text: text(&other_id),
            error: "bad_signature",
        },
        Invalid {
            about: "version 2",
            proof_text: text(&v2),
            error: "unsupported_version",
        },
        Invalid {
            about: "cut short by 10 bytes",
            proof_text: text(&good[..good.len() - 10]),
            error: "malformed",
        },
        Invalid {
            about: "a byte added before the signature",
            proof_text: text(&appended),
            error: "malformed",
        },
        Invalid {
            about: "an empty lease name",
            proof_text: text(&empty_name),
            error: "malformed",
        },
        Invalid {
            about: "empty",
            proof_text: String::new(),
            error: "malformed",
        },
        Invalid {
            about: "base64 padding (the text form has none)",
            proof_text: format!("{}==", &good_text[..good_text.len() - 2]),
            error: "malformed",
        },
        Invalid {
            about: "standard base64 alphabet characters (+ and /)",
            proof_text: format!("+/{}", &good_text[2..]),
            error: "malformed",
        },
        Invalid {
            about: "a decimal token instead of a proof",
            proof_text: "4611686018427387904".into(),
            error: "malformed",
        },
        Invalid {
            about: "longer than any proof (3,000 characters)",
            proof_text: "A".repeat(3000),
            error: "malformed",
        },
    ];
    Vectors {
        about: vec![
            "Tenure fence proof test vectors, format version 1 (docs/fencing.md).",
            "Pin `keyset` (its text form), then: every `valid` proof_text verifies and states `fence`;",
            "every `invalid` proof_text is refused with `error` (malformed, unsupported_version, unknown_key, bad_signature).",
            "Tokens and times are decimal strings. Seeds are test keys: never use them.",
            "Generated by fence/rust/tests/vectors.rs.",
        ],
        keyset,
        keys,
        valid,
        invalid,
    }
}

#[test]
fn vectors_file_matches_the_format() {
    let json = serde_json::to_string_pretty(&build()).unwrap() + "\n";
    if std::env::var_os("TENURE_FENCE_WRITE_VECTORS").is_some() {
        std::fs::write(PATH, &json).unwrap();
    }
    let committed = std::fs::read_to_string(PATH).expect("fence/vectors/v1.json");
    assert_eq!(
        committed, json,
        "fence/vectors/v1.json differs from what the format produces; rewrite it with TENURE_FENCE_WRITE_VECTORS=1 only if the change is deliberate"
    );
}

#[test]
fn every_vector_verifies_as_stated() {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(PATH).unwrap()).unwrap();
    let keys = Keyset::parse(v["keyset"].as_str().unwrap()).unwrap();
    for case in v["valid"].as_array().unwrap() {
        let got = keys
            .verify_text(case["proof_text"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", case["about"]));
        let f = &case["fence"];
        assert_eq!(got.fence.name, f["name"].as_str().unwrap());
        assert_eq!(got.fence.bucket, f["bucket"].as_str().unwrap());
        assert_eq!(got.fence.holder, f["holder"].as_str().unwrap());
        assert_eq!(got.fence.token.to_string(), f["token"].as_str().unwrap());
        assert_eq!(got.fence.slot as u64, f["slot"].as_u64().unwrap());
        assert_eq!(got.fence.ttl_s as u64, f["ttl_s"].as_u64().unwrap());
        assert_eq!(
            got.fence.granted_at_ms.to_string(),
            f["granted_at_ms"].as_str().unwrap()
        );
        assert_eq!(got.key_id, case["key_id"].as_str().unwrap());
        let bytes = hex_decode(case["proof_hex"].as_str().unwrap());
        assert_eq!(keys.verify(&bytes).unwrap(), got);
    }
    for case in v["invalid"].as_array().unwrap() {
        let err = keys
            .verify_text(case["proof_text"].as_str().unwrap())
            .expect_err(case["about"].as_str().unwrap());
        assert_eq!(
            err.kind(),
            case["error"].as_str().unwrap(),
            "{}",
            case["about"]
        );
    }
}

fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn a_keyset_refuses_what_is_not_a_key() {
    assert!(Keyset::parse("").is_err());
    assert!(Keyset::parse("# only a comment\n").is_err());
    assert!(Keyset::parse("AAAA\n").unwrap_err().contains("line 1"));
    let s = signer(1);
    let text = format!("\n  {}  # spaces and a comment\n", s.public_key_text());
    assert_eq!(
        Keyset::parse(&text).unwrap().key_ids(),
        vec![hex(&s.key_id())]
    );
}

#[test]
fn signing_is_deterministic() {
    let s = signer(1);
    let f = fence("orders", 0, 42, "w");
    assert_eq!(s.sign(&f), s.sign(&f));
}
