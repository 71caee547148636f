//! `tenure man`: the manual pages, roff generated from the clap definitions
//! (clap_mangen), so they can never disagree with `--help`. Hidden from the
//! help: it is for packagers, and `scripts/release.sh` puts its pages in
//! the release archive.
//!
//! Without `--dir` it writes `tenure(1)` to stdout (`tenure man | man -l -`);
//! with `--dir DIR` it writes `tenure.1` and one page per subcommand
//! (`tenure-serve.1`, `tenure-lock.1`, ...) into DIR and prints their paths.
//! The pages are dated with the build date, so a reproducible build gives
//! the same pages.

use std::path::Path;

use clap::Command;
use clap_mangen::Man;

use super::args::ManArgs;
use super::error::CliError;
use super::output;
use crate::observe::version;

/// `tenure man [--dir DIR]`; `root` is the whole command line.
pub fn man(root: Command, a: ManArgs) -> Result<(), CliError> {
    let mut root = root.disable_help_subcommand(true);
    // Gives each subcommand its display name, `tenure-serve`.
    root.build();
    let failed = |what: &str, e: std::io::Error| CliError {
        code: super::error::EXIT_FAILED,
        reason: "IO".into(),
        message: format!("cannot write {what}: {e}"),
        hint: None,
    };
    let Some(dir) = a.dir else {
        let mut page = Vec::new();
        page_of(root)
            .render(&mut page)
            .map_err(|e| failed("the page", e))?;
        output::write_out(&String::from_utf8_lossy(&page));
        return Ok(());
    };
    std::fs::create_dir_all(&dir).map_err(|e| failed(&dir.display().to_string(), e))?;
    write_all(root, &dir, &failed)
}

/// The page of one command, dated with the build.
fn page_of(cmd: Command) -> Man {
    Man::new(cmd).date(version::BUILD_DATE)
}

/// Writes the page of `cmd` and of each of its visible subcommands into
/// `dir`, printing each path.
fn write_all(
    cmd: Command,
    dir: &Path,
    failed: &dyn Fn(&str, std::io::Error) -> CliError,
) -> Result<(), CliError> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_all(sub.clone(), dir, failed)?;
    }
    let page = page_of(cmd);
    let path = dir.join(page.get_filename());
    page.generate_to(dir)
        .map_err(|e| failed(&path.display().to_string(), e))?;
    output::write_line(&path.display().to_string());
    Ok(())
}
