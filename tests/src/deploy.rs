//! The files in deploy/, for the suites that check them against the daemon (`tests/deploy.rs`,
//! `tests/deploy_confinement.rs`).

use std::path::{Path, PathBuf};

pub const UNIT: &str = "systemd/gateway-observer.service";
pub const DAEMONSET: &str = "kubernetes/daemonset.yaml";

/// A file of deploy/, named by its path there.
pub fn deploy_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(relative)
}

pub fn read_deploy(relative: &str) -> String {
    let path = deploy_path(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The words of every `KEY=` line of a systemd unit, in order (empty when it has none).
pub fn unit_words(unit: &str, key: &str) -> Vec<String> {
    let prefix = format!("{key}=");
    unit.lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .flat_map(str::split_whitespace)
        .map(str::to_owned)
        .collect()
}
