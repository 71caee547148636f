//! What build this binary is: the crate version, the git commit and the
//! build date that `build.rs` embeds. Printed by `tenure --version`, logged
//! in `tenure serve`'s start line and exported as the
//! `tenure_build_info{version,commit,build_date} 1` metric.

/// The crate version, `0.1.0`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The short commit hash the binary was built from, `-dirty` when tracked
/// files differed from it, or `unknown` when it was built outside a git
/// checkout (`build.rs`).
pub const COMMIT: &str = env!("TENURE_BUILD_COMMIT");

/// The UTC date of the build, `YYYY-MM-DD` (of `SOURCE_DATE_EPOCH` when it
/// was set, for reproducible builds).
pub const BUILD_DATE: &str = env!("TENURE_BUILD_DATE");

/// What `tenure --version` prints after the name:
/// `0.1.0 (commit abc1234, built 2026-12-02)`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TENURE_BUILD_COMMIT"),
    ", built ",
    env!("TENURE_BUILD_DATE"),
    ")"
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The pieces are what build.rs promises, and the long form joins them.
    #[test]
    fn shapes() {
        assert_eq!(
            LONG_VERSION,
            format!("{VERSION} (commit {COMMIT}, built {BUILD_DATE})")
        );
        let hash = COMMIT.strip_suffix("-dirty").unwrap_or(COMMIT);
        assert!(
            hash == "unknown" || (hash.len() >= 7 && hash.bytes().all(|b| b.is_ascii_hexdigit())),
            "{COMMIT}"
        );
        let d: Vec<&str> = BUILD_DATE.split('-').collect();
        assert_eq!(
            d.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [4, 2, 2],
            "{BUILD_DATE}"
        );
    }
}
