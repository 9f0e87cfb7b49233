//! `cargo xtask package --check`: installs the .deb on this host with `dpkg -i` and holds the
//! result to the package's own listing: every file in place, root's, with its mode, known to
//! dpkg; the config a conffile; the unit enabled and verified; `gateway-observer check` ready;
//! the man page found. Then `dpkg --purge`, after a failure too, and nothing may be left.

use std::{
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::Path,
    process::Command,
};

use anyhow::{Context as _, bail, ensure};

use super::{
    control::PACKAGE,
    layout,
    listing::{self, Entry},
    stage::path_str,
};
use crate::util;

pub fn run(deb: &Path) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    ensure!(unsafe { libc::geteuid() } == 0, "the package check installs a package: run it as root");
    if let Some(status) = dpkg_status() {
        bail!(
            "{PACKAGE} is already on this host ({status}); the check installs and purges it: `dpkg --purge {PACKAGE}` first"
        );
    }
    let contents = util::output("dpkg-deb", &["--contents", path_str(deb)?])
        .with_context(|| format!("dpkg-deb cannot list {}", deb.display()))?;
    let entries = listing::parse(&contents).with_context(|| format!("cannot read the listing of {}", deb.display()))?;
    listing::check(&entries).with_context(|| format!("in {}", deb.display()))?;
    let files: Vec<&Entry> = entries.iter().filter(|e| !e.is_dir).collect();

    let installed = install(deb, &files);
    let purged = purge(&files);
    match (installed, purged) {
        (Ok(()), purged) => purged,
        (Err(err), Ok(())) => Err(err),
        (Err(err), Err(purge_err)) => Err(err.context(format!("and cleaning up failed too: {purge_err:#}"))),
    }
}

fn install(deb: &Path, files: &[&Entry]) -> anyhow::Result<()> {
    util::run("dpkg", &["-i", path_str(deb)?]).with_context(|| format!("dpkg -i {} failed", deb.display()))?;
    files_in_place(files)?;
    known_to_dpkg(files)?;
    enabled_not_started()?;
    daemon_check()?;
    man_page()?;
    unit_verifies()
}

/// Each file of the listing on disk: a regular file, root's, with the listed mode.
fn files_in_place(files: &[&Entry]) -> anyhow::Result<()> {
    for file in files {
        let path = Path::new("/").join(&file.path);
        let meta = std::fs::symlink_metadata(&path).with_context(|| format!("{} was not installed", path.display()))?;
        let mode = meta.permissions().mode() & 0o7777;
        ensure!(meta.is_file(), "{} is not a regular file", path.display());
        ensure!(mode == file.mode, "{} has mode {mode:o}, not {:o}", path.display(), file.mode);
        ensure!(
            meta.uid() == 0 && meta.gid() == 0,
            "{} is owned by {}:{}, not root",
            path.display(),
            meta.uid(),
            meta.gid()
        );
    }
    Ok(())
}

/// `dpkg -L` names every file, and the config is a conffile.
fn known_to_dpkg(files: &[&Entry]) -> anyhow::Result<()> {
    let listed = util::output("dpkg", &["-L", PACKAGE]).context("dpkg -L failed")?;
    for file in files {
        let path = format!("/{}", file.path);
        ensure!(listed.lines().any(|l| l == path), "dpkg -L {PACKAGE} does not list {path}:\n{listed}");
    }
    let conffiles = util::output("dpkg-query", &["-W", "-f=${Conffiles}", PACKAGE]).context("dpkg-query failed")?;
    let config = format!("/{}", layout::CONFIG);
    ensure!(conffiles.split_whitespace().any(|w| w == config), "{config} is not a conffile: {conffiles:?}");
    Ok(())
}

/// postinst enables the unit; a first install must not start it.
fn enabled_not_started() -> anyhow::Result<()> {
    let target = std::fs::read_link(layout::ENABLED_LINK)
        .with_context(|| format!("the unit is not enabled: no link {}", layout::ENABLED_LINK))?;
    let unit = Path::new("/").join(layout::UNIT);
    ensure!(target == unit, "{} points at {}, not {}", layout::ENABLED_LINK, target.display(), unit.display());
    if Path::new("/run/systemd/system").exists() {
        let state = Command::new("systemctl").args(["is-active", "gateway-observer.service"]).output();
        let state = state.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()).unwrap_or_default();
        ensure!(state != "active", "a first install started gateway-observer.service");
    } else {
        eprintln!("package check: systemd is not running here; the unit's start state is not checked");
    }
    Ok(())
}

/// The installed daemon's own verdict on this host; it exits 0 only when it can run.
fn daemon_check() -> anyhow::Result<()> {
    let binary = Path::new("/").join(layout::BINARY);
    let out =
        Command::new(&binary).arg("check").output().with_context(|| format!("cannot run {}", binary.display()))?;
    let printed = String::from_utf8_lossy(&out.stdout);
    println!("{printed}");
    let verdict = printed.lines().last().unwrap_or_default();
    ensure!(
        out.status.success() && verdict.starts_with("verdict: ready"),
        "{} check: {} ({}); stderr: {}",
        binary.display(),
        verdict,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// man finds the page where the package put it, and it is a page of this CLI.
fn man_page() -> anyhow::Result<()> {
    let found = util::output("man", &["-w", PACKAGE]).context("man -w gateway-observer found no page")?;
    let page = Path::new("/").join(layout::MAN_PAGE);
    ensure!(Path::new(found.trim()) == page, "man -w {PACKAGE} found {}, not {}", found.trim(), page.display());
    let text = util::output("zcat", &[path_str(&page)?]).with_context(|| format!("zcat {} failed", page.display()))?;
    for wanted in [".TH gateway-observer 1", "gateway\\-observer\\-run(1)", "gateway\\-observer\\-check(1)"] {
        ensure!(text.contains(wanted), "{} lacks {wanted:?}:\n{text}", page.display());
    }
    Ok(())
}

/// `systemd-analyze verify` on the installed unit, which prints (and exits 0 on) bad keys.
fn unit_verifies() -> anyhow::Result<()> {
    let unit = Path::new("/").join(layout::UNIT);
    let out = match Command::new("systemd-analyze").arg("verify").arg(&unit).output() {
        Ok(out) => out,
        Err(err) => {
            eprintln!("package check: SKIPPED systemd-analyze verify: {err}");
            return Ok(());
        }
    };
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    ensure!(
        out.status.success() && printed.trim().is_empty(),
        "systemd-analyze verify {} ({}):\n{printed}",
        unit.display(),
        out.status
    );
    Ok(())
}

/// `dpkg --purge` whatever state the install left, then nothing of the package may remain.
fn purge(files: &[&Entry]) -> anyhow::Result<()> {
    if dpkg_status().is_some() {
        util::run("dpkg", &["--purge", PACKAGE]).context("dpkg --purge failed")?;
    }
    if let Some(status) = dpkg_status() {
        bail!("{PACKAGE} is still known to dpkg after the purge: {status}");
    }
    let mut left: Vec<String> = files.iter().map(|f| format!("/{}", f.path)).collect();
    left.extend([layout::CONFIG_DIR.to_owned(), layout::ENABLED_LINK.to_owned()]);
    left.retain(|path| std::fs::symlink_metadata(path).is_ok());
    ensure!(left.is_empty(), "the purge left {}", left.join(", "));
    Ok(())
}

/// dpkg's status of the package, None when dpkg knows nothing of it (never installed, or purged).
fn dpkg_status() -> Option<String> {
    let status = util::output("dpkg-query", &["-W", "-f=${db:Status-Abbrev}", PACKAGE])?;
    // Desired action, then state: `pn` or `un` is not installed (what a purge leaves behind).
    let state = status.chars().nth(1)?;
    (state != 'n').then(|| status.trim().to_owned())
}
