//! The documentation is checked like code (no servers, so this is fast):
//!
//! - every relative link in README.md and docs/*.md reaches a file or folder
//!   that exists, and a `#anchor` into a markdown file names one of its
//!   headings (GitHub's anchors);
//! - every `tenure ...` command of those pages, in a `sh`, `bash`, `shell` or
//!   `console` block or in inline code, names a real subcommand, and every
//!   flag it uses is one that subcommand's `--help` lists.
//!
//! The grpcurl walkthroughs are run for real by `walkthrough.rs`, and the
//! error table is checked against the proto by `contract.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md, relative to the repository, in order.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("read docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Whether `line` opens or closes a fenced code block; its info string.
fn fence(line: &str) -> Option<&str> {
    let t = line.trim_start();
    (t.starts_with("```") || t.starts_with("~~~")).then(|| t[3..].trim_matches(['`', '~', ' ']))
}

/// The page outside fenced code blocks, with inline code spans blanked
/// (newlines kept), so that only real links and headings are left; and the
/// inline code spans, each with its line number and its text (whitespace
/// collapsed).
fn split_code(text: &str) -> (String, Vec<(usize, String)>) {
    let mut out = String::new();
    let mut in_fence = false;
    for line in text.lines() {
        if fence(line).is_some() {
            in_fence = !in_fence;
        } else if !in_fence {
            out.push_str(line);
        }
        out.push('\n');
    }
    // Inline code: a run of n backticks up to the next run of exactly n.
    let chars: Vec<char> = out.chars().collect();
    let run = |i: usize| chars[i..].iter().take_while(|&&c| c == '`').count();
    let mut prose = String::with_capacity(out.len());
    let mut spans = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            line += usize::from(chars[i] == '\n');
            prose.push(chars[i]);
            i += 1;
            continue;
        }
        let n = run(i);
        let mut j = i + n;
        let close = loop {
            if j >= chars.len() {
                break None;
            }
            if chars[j] == '`' {
                let m = run(j);
                if m == n {
                    break Some(j);
                }
                j += m;
            } else {
                j += 1;
            }
        };
        let end = close.map_or(i + n, |j| j + n);
        if let Some(j) = close {
            let code: String = chars[i + n..j].iter().collect();
            spans.push((line, code.split_whitespace().collect::<Vec<_>>().join(" ")));
        }
        for &c in &chars[i..end] {
            line += usize::from(c == '\n');
            prose.push(if close.is_some() && c != '\n' { ' ' } else { c });
        }
        i = end;
    }
    (prose, spans)
}

fn prose(text: &str) -> String {
    split_code(text).0
}

/// GitHub's anchor for a heading: lowercased, markup and punctuation
/// dropped (letters, digits, `-`, `_` and spaces kept), spaces made `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .trim_end_matches('#')
        .trim()
        .to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || c == '-' || c == '_' || c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown page's headings (outside code blocks); a
/// repeated heading gets `-1`, `-2`, ... as on GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut in_fence = false;
    for line in text.lines() {
        if fence(line).is_some() {
            in_fence = !in_fence;
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if in_fence || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = anchor(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 { base } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// The targets of the inline links (`[text](target)`, images too) and of
/// the reference definitions (`[label]: target`) of a page's prose.
fn links(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = prose.as_bytes();
    let mut i = 0;
    while let Some(off) = prose[i..].find("](") {
        let start = i + off + 2;
        let mut depth = 0;
        let mut end = start;
        while end < b.len() {
            match b[end] {
                b'(' => depth += 1,
                b')' if depth == 0 => break,
                b')' => depth -= 1,
                _ => {}
            }
            end += 1;
        }
        // The target is the destination without an optional "title".
        let target = prose[start..end].split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(['<', '>']).to_string());
        i = end.max(start);
    }
    for line in prose.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix('[') {
            if let Some((_, def)) = rest.split_once("]:") {
                if let Some(target) = def.split_whitespace().next() {
                    out.push(target.to_string());
                }
            }
        }
    }
    out
}

/// What is wrong with each relative link of `page` (empty: nothing).
fn broken_links(page: &Path) -> (usize, Vec<String>) {
    let text = read(&root().join(page));
    let dir = page.parent().unwrap_or(Path::new(""));
    let mut checked = 0;
    let mut broken = Vec::new();
    for target in links(&prose(&text)) {
        if target.is_empty()
            || target.contains("://")
            || target.starts_with("mailto:")
            || target.starts_with("tel:")
        {
            continue;
        }
        checked += 1;
        let (path, frag) = match target.split_once('#') {
            Some((p, f)) => (p, Some(f)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() {
            page.to_path_buf()
        } else if let Some(abs) = path.strip_prefix('/') {
            PathBuf::from(abs)
        } else {
            dir.join(path)
        };
        // `docs/../README.md` is `README.md`.
        let file = file.components().fold(PathBuf::new(), |mut acc, c| {
            match c {
                std::path::Component::ParentDir if acc.file_name().is_some() => {
                    acc.pop();
                }
                c => acc.push(c),
            }
            acc
        });
        let full = root().join(&file);
        if !full.exists() {
            broken.push(format!(
                "{}: link {target:?}: {} does not exist",
                page.display(),
                file.display()
            ));
            continue;
        }
        if let Some(frag) = frag {
            if full.extension().is_some_and(|e| e == "md") && !anchors(&read(&full)).contains(frag)
            {
                broken.push(format!(
                    "{}: link {target:?}: {} has no heading with the anchor #{frag}",
                    page.display(),
                    file.display()
                ));
            }
        }
    }
    (checked, broken)
}

#[test]
fn github_anchors_of_headings() {
    let cases = [
        (
            "## `tenure lock`: run a command under a lease",
            "tenure-lock-run-a-command-under-a-lease",
        ),
        (
            "## `get`, `list`, `watch`, `acquire`, `renew`, `release`, `revoke`",
            "get-list-watch-acquire-renew-release-revoke",
        ),
        ("## 21. Groups", "21-groups"),
        ("### Lock-delay", "lock-delay"),
        (
            "## Admin: listing and revoking",
            "admin-listing-and-revoking",
        ),
    ];
    for (heading, want) in cases {
        assert!(anchors(heading).contains(want), "{heading} → {want}");
    }
    assert_eq!(
        anchors("# A\n```sh\n# not a heading\n```\n## A\n"),
        BTreeSet::from(["a".to_string(), "a-1".to_string()])
    );
}

#[test]
fn relative_links_reach_files_and_headings() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for page in pages() {
        let (n, b) = broken_links(&page);
        checked += n;
        broken.extend(b);
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    // The pages link to each other: a parser that finds nothing is broken.
    assert!(checked >= 50, "only {checked} relative links found");
}

/// A shell line split into words, up to the first unquoted operator
/// (`|`, `>`, `&&`, `;`, ...) or comment; quotes removed.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        _ => word.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '|' | '>' | '<' | ';' | '&' => {
                // The `2` of a redirect such as `2>` is not a word.
                if in_word && !(matches!(c, '>' | '<') && word.bytes().all(|b| b.is_ascii_digit()))
                {
                    words.push(std::mem::take(&mut word));
                }
                return words;
            }
            '#' if !in_word => return words,
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// Every `tenure ...` command of a page, with its line number: the lines of
/// its shell blocks (continuation lines joined, a `$ ` prompt dropped) and
/// its inline code spans that start with `tenure `.
fn tenure_commands(page: &Path) -> Vec<(usize, String)> {
    let text = read(&root().join(page));
    let mut out = Vec::new();
    let mut block: Option<bool> = None; // Some(is a shell block) inside a fence
    let mut pending: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        if let Some(info) = fence(line) {
            block = match block {
                Some(_) => None,
                None => Some(matches!(
                    info.split_whitespace().next(),
                    Some("sh" | "bash" | "shell" | "console")
                )),
            };
            continue;
        }
        if block != Some(true) {
            continue;
        }
        let (start, mut cmd) = match pending.take() {
            Some((start, cmd)) => (start, cmd + " " + line.trim()),
            None => (n + 1, line.trim().to_string()),
        };
        if cmd.ends_with('\\') {
            cmd.pop();
            pending = Some((start, cmd));
            continue;
        }
        let cmd = cmd.strip_prefix("$ ").unwrap_or(&cmd);
        if cmd.starts_with("tenure ") {
            out.push((start, cmd.to_string()));
        }
    }
    let (_, spans) = split_code(&text);
    out.extend(
        spans
            .into_iter()
            .filter(|(_, code)| code.starts_with("tenure ")),
    );
    out.sort();
    out
}

/// Whether `flag` appears in `help` as a whole flag (not as the start of a
/// longer one: `--limit` is not found in `--limit-foo`).
fn lists_flag(help: &str, flag: &str) -> bool {
    let part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_');
    help.match_indices(flag).any(|(i, _)| {
        !part(help[..i].chars().next_back()) && !part(help[i + flag.len()..].chars().next())
    })
}

#[test]
fn tenure_commands_in_the_docs_parse() {
    let mut help: BTreeMap<String, Result<String, String>> = BTreeMap::new();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for page in pages() {
        for (line, cmd) in tenure_commands(&page) {
            checked += 1;
            let at = format!("{}:{line}: {cmd}", page.display());
            let words = shell_words(&cmd);
            // Up to `--`: what follows is the command `tenure lock` runs.
            let args: Vec<&str> = words[1..]
                .iter()
                .map(String::as_str)
                .take_while(|w| *w != "--")
                .collect();
            let Some(sub) = args.first().filter(|s| !s.starts_with('-')) else {
                wrong.push(format!("{at}\n  no subcommand"));
                continue;
            };
            let text = help.entry(sub.to_string()).or_insert_with(|| {
                let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
                    .args([*sub, "--help"])
                    .output()
                    .expect("run tenure");
                if out.status.success() {
                    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
                } else {
                    Err(String::from_utf8_lossy(&out.stderr).into_owned())
                }
            });
            let text = match text {
                Ok(text) => text,
                Err(e) => {
                    wrong.push(format!("{at}\n  `tenure {sub} --help` fails: {}", e.trim()));
                    continue;
                }
            };
            for arg in &args[1..] {
                let flag = match arg.split_once('=') {
                    Some((flag, _)) => flag,
                    None => arg,
                };
                let is_flag = flag.len() > 1
                    && flag.starts_with('-')
                    && !flag[1..].starts_with(|c: char| c.is_ascii_digit());
                if is_flag && !lists_flag(text, flag) {
                    wrong.push(format!("{at}\n  `tenure {sub}` has no flag {flag}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "commands in the docs that the CLI does not take:\n{}",
        wrong.join("\n")
    );
    // The pages name about fifty: a parser that finds few is broken.
    assert!(checked >= 30, "only {checked} tenure commands found");
}
