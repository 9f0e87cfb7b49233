//! `cargo xtask package [--check]`: the Debian package of the daemon, in
//! target/debian/gateway-observer_<version>_<arch>.deb. The release binary (with the real kernel
//! programs: a stand-in build is refused), the systemd unit, the example config as a conffile,
//! man pages from the clap definition, copyright and changelog; maintainer scripts that enable
//! the unit without starting it. `--check` then installs it on this host and checks it (`check`).

mod check;
mod control;
mod docs;
mod ebpf_object;
mod layout;
mod listing;
mod stage;
mod tree;

use std::{path::PathBuf, time::Instant};

use anyhow::Context as _;
use serde_json::Value;

use crate::util::{self, cargo, target_dir};

/// The Debian package of the daemon, in target/debian/
///
/// The release binary, the systemd unit, the example config as a conffile, man pages, copyright
/// and changelog, and maintainer scripts that enable the unit without starting it.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Then install it on this host with dpkg -i, check it and purge it (as root).
    #[arg(long)]
    check: bool,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let started = Instant::now();
    let deb = build()?;
    eprintln!("package: {} in {:.0} s", deb.display(), started.elapsed().as_secs_f64());
    if options.check {
        let started = Instant::now();
        check::run(&deb)?;
        eprintln!("package: install check passed in {:.0} s", started.elapsed().as_secs_f64());
    }
    Ok(())
}

fn build() -> anyhow::Result<PathBuf> {
    // One cargo run for both, so the example links the very library the binary was built from.
    cargo(&["build", "--release", "-p", "gateway-observer", "--bin", "gateway-observer", "--example", "man_pages"])
        .context("the release build of gateway-observer failed")?;
    let release = target_dir().join("release");
    let binary = release.join("gateway-observer");

    let debian = target_dir().join("debian");
    let man_dir = debian.join("man");
    if man_dir.exists() {
        std::fs::remove_dir_all(&man_dir).with_context(|| format!("cannot empty {}", man_dir.display()))?;
    }
    std::fs::create_dir_all(&man_dir).with_context(|| format!("cannot create {}", man_dir.display()))?;
    let generator = release.join("examples/man_pages");
    util::run(stage::path_str(&generator)?, &[stage::path_str(&man_dir)?])
        .context("generating the man pages failed")?;

    let manifest = manifest()?;
    let field = |name: &str| {
        manifest[name].as_str().map(str::to_owned).with_context(|| format!("gateway-observer's manifest has no {name}"))
    };
    let architecture = util::output("dpkg", &["--print-architecture"]).context("dpkg --print-architecture failed")?;
    let inputs = stage::Inputs {
        binary: &binary,
        man_dir: &man_dir,
        version: &field("version")?,
        license: &field("license")?,
        summary: &field("description")?,
        architecture: architecture.trim(),
    };
    stage::build_deb(&inputs, &debian.join("root"), &debian)
}

/// gateway-observer's entry in `cargo metadata`: version, license and description.
fn manifest() -> anyhow::Result<Value> {
    let root = util::workspace_root();
    let printed = util::output(
        "cargo",
        &[
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
            stage::path_str(&root.join("Cargo.toml"))?,
        ],
    )
    .context("cargo metadata failed")?;
    let metadata: Value = serde_json::from_str(&printed).context("cargo metadata printed no JSON")?;
    metadata["packages"]
        .as_array()
        .and_then(|packages| packages.iter().find(|p| p["name"] == control::PACKAGE))
        .cloned()
        .context("cargo metadata lists no gateway-observer package")
}

#[cfg(test)]
mod tests {
    use crate::{Command, tests::parse};

    #[test]
    fn built_only_unless_checked() {
        for (args, check) in [(&[][..], false), (&["--check"], true)] {
            let Command::Package(options) = parse(&[&["package"], args].concat()) else { panic!("not package") };
            assert_eq!(options.check, check);
        }
    }
}
