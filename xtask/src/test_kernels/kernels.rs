//! Debian's own kernel packages: the newest of a series the package lists know, downloaded with
//! `apt-get download` (no other source) and reduced to its `vmlinuz` and the modules kernel TLS
//! needs (for the guest's kTLS server). Both are kept under `target/kernels/`, so a rerun
//! downloads nothing until Debian publishes a newer build.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

use crate::util::output;

/// What `--kernel` accepts, oldest first: Debian 12's LTS kernel and its backported 6.12.
pub const SERIES: &[&str] = &["6.1", "6.12"];

/// Debian's cloud flavour: small, with BTF, the 8250 serial console built in and no signed-shim
/// dance; `-unsigned` is the plain image.
const FLAVOUR: &str = "-cloud-amd64-unsigned";

pub struct Kernel {
    /// The package it came from, e.g. `linux-image-6.1.0-57-cloud-amd64-unsigned`.
    pub package: String,
    pub vmlinuz: PathBuf,
    /// Kernel TLS's modules, uncompressed, in load order (`TLS_MODULES`): busybox's insmod
    /// loads them in the guest, which has no modprobe.
    pub tls_modules: Vec<PathBuf>,
}

/// What kernel TLS needs with AES-GCM, in load order: `tls`, and the crypto it asks for (`gcm`,
/// with `ghash` and what they depend on), which a guest without modprobe cannot load on demand.
/// Those built into a kernel are absent from its package.
const TLS_MODULES: &[&str] = &["gf128mul", "crypto_null", "ctr", "ghash-generic", "gcm", "tls"];

impl Kernel {
    /// The release as `uname -r` says it, for the matrix.
    pub fn release(&self) -> &str {
        self.package.trim_start_matches("linux-image-").trim_end_matches("-unsigned")
    }
}

/// The newest kernel of `series`, from the cache or downloaded into `dir`.
pub fn fetch(series: &str, dir: &Path) -> anyhow::Result<Kernel> {
    let package = newest_package(series, dir)?;
    let unpacked = dir.join(&package);
    let vmlinuz = unpacked.join("vmlinuz");
    let modules = unpacked.join("modules");
    // The list of modules looked for, kept with them: a change to it unpacks them again.
    let wanted = TLS_MODULES.join(" ");
    let unpacked_list = modules.join("looked-for");
    if vmlinuz.exists() && std::fs::read_to_string(&unpacked_list).is_ok_and(|list| list == wanted) {
        return Ok(Kernel { package, vmlinuz, tls_modules: tls_modules(&modules) });
    }
    let debs = dir.join("debs");
    std::fs::create_dir_all(&debs).with_context(|| format!("cannot create {}", debs.display()))?;
    let deb = match find_deb(&debs, &package) {
        Some(deb) => deb,
        None => {
            eprintln!("test-kernels: downloading {package}");
            let status = Command::new("apt-get")
                .args(["download", "-q", &package])
                .current_dir(&debs)
                .status()
                .context("failed to run apt-get download")?;
            anyhow::ensure!(status.success(), "apt-get download {package} failed ({status})");
            find_deb(&debs, &package).with_context(|| format!("apt-get download left no {package}_*.deb"))?
        }
    };
    extract(&deb, &unpacked, &["./boot/vmlinuz-*"])?;
    let image = find_file(&unpacked.join("boot"), "vmlinuz-")
        .with_context(|| format!("no /boot/vmlinuz-* in {}", deb.display()))?;
    std::fs::rename(&image, &vmlinuz).with_context(|| format!("cannot move {} into place", image.display()))?;
    unpack_tls_modules(&deb, &unpacked, &modules)?;
    std::fs::write(&unpacked_list, wanted).with_context(|| format!("cannot write {}", unpacked_list.display()))?;
    Ok(Kernel { package, vmlinuz, tls_modules: tls_modules(&modules) })
}

/// The newest `linux-image-SERIES.*-cloud-amd64-unsigned` in the package lists; when they name
/// none, the newest one already unpacked in `dir`; when there is none either (a fresh machine
/// whose lists were emptied after its packages were installed), the lists after an
/// `apt-get update`.
fn newest_package(series: &str, dir: &Path) -> anyhow::Result<String> {
    let prefix = format!("linux-image-{series}.");
    let mut names = listed(&prefix);
    if names.is_empty() {
        names = unpacked(&prefix, dir);
    }
    if names.is_empty() {
        eprintln!("test-kernels: the package lists know no {prefix}*{FLAVOUR}: apt-get update");
        crate::util::run("apt-get", &["update", "-q"]).context("apt-get update failed")?;
        names = listed(&prefix);
    }
    names.into_iter().max_by_key(|n| version_key(n)).with_context(|| {
        format!("no {prefix}*{FLAVOUR} package known: run apt-get update (Debian 12's lists carry them)")
    })
}

/// The packages named `PREFIX*FLAVOUR` the package lists know.
fn listed(prefix: &str) -> Vec<String> {
    let pattern = format!("^{}.*{FLAVOUR}$", prefix.replace('.', "\\."));
    let listed = output("apt-cache", &["search", "--names-only", &pattern]).unwrap_or_default();
    listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| of_series(prefix, n))
        .map(str::to_owned)
        .collect()
}

/// The packages named `PREFIX*FLAVOUR` already unpacked in `dir`.
fn unpacked(prefix: &str, dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| of_series(prefix, n))
        .collect()
}

fn of_series(prefix: &str, name: &str) -> bool {
    name.starts_with(prefix) && name.ends_with(FLAVOUR)
}

/// The numbers in a package name, in order: `6.1.0-57` → [6, 1, 0, 57], `6.12.118+deb12` →
/// [6, 12, 118, 12]. Enough to order the builds of one series.
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse().ok()).collect()
}

fn find_deb(debs: &Path, package: &str) -> Option<PathBuf> {
    let prefix = format!("{package}_");
    std::fs::read_dir(debs)
        .ok()?
        .filter_map(|e| Some(e.ok()?.path()))
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb")))
}

/// `TLS_MODULES` found in the package, uncompressed into `modules` as `NAME.ko`.
fn unpack_tls_modules(deb: &Path, unpacked: &Path, modules: &Path) -> anyhow::Result<()> {
    let deb_path = deb.to_str().context("a path that is not UTF-8")?;
    let listing = output("dpkg-deb", &["--contents", deb_path]).context("dpkg-deb --contents failed")?;
    let paths: Vec<(&str, &str)> = TLS_MODULES
        .iter()
        .filter_map(|name| {
            let path = listing
                .lines()
                .filter_map(|l| l.split_whitespace().last())
                .find(|p| p.ends_with(&format!("/{name}.ko")) || p.ends_with(&format!("/{name}.ko.xz")))?;
            Some((*name, path))
        })
        .collect();
    anyhow::ensure!(paths.iter().any(|(name, _)| *name == "tls"), "no tls.ko in {}", deb.display());
    extract(deb, unpacked, &paths.iter().map(|(_, path)| *path).collect::<Vec<_>>())?;
    std::fs::create_dir_all(modules).with_context(|| format!("cannot create {}", modules.display()))?;
    for (name, path) in paths {
        let mut file = unpacked.join(path);
        if file.extension().is_some_and(|e| e == "xz") {
            let compressed = file.to_str().context("a path that is not UTF-8")?;
            crate::util::run("xz", &["--decompress", "--force", compressed])
                .context("cannot decompress a module: is xz-utils installed (cargo xtask setup)?")?;
            file.set_extension("");
        }
        let dest = modules.join(format!("{name}.ko"));
        std::fs::rename(&file, &dest).with_context(|| format!("cannot move {} into place", file.display()))?;
    }
    Ok(())
}

/// The modules `unpack_tls_modules` left in `modules`, in `TLS_MODULES`' order.
fn tls_modules(modules: &Path) -> Vec<PathBuf> {
    TLS_MODULES.iter().map(|name| modules.join(format!("{name}.ko"))).filter(|path| path.exists()).collect()
}

/// `dpkg-deb --fsys-tarfile DEB | tar -x PATTERNS`: only what is asked for.
fn extract(deb: &Path, unpacked: &Path, patterns: &[&str]) -> anyhow::Result<()> {
    std::fs::create_dir_all(unpacked).with_context(|| format!("cannot create {}", unpacked.display()))?;
    let mut dpkg = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .spawn()
        .context("failed to run dpkg-deb")?;
    let tar = Command::new("tar")
        .args(["-x", "--wildcards"])
        .args(patterns)
        .current_dir(unpacked)
        .stdin(dpkg.stdout.take().context("dpkg-deb has no stdout")?)
        .status()
        .context("failed to run tar")?;
    let dpkg = dpkg.wait().context("dpkg-deb did not finish")?;
    if !dpkg.success() || !tar.success() {
        bail!("cannot unpack {patterns:?} from {} (dpkg-deb {dpkg}, tar {tar})", deb.display());
    }
    Ok(())
}

/// The first file in `dir` whose name starts with `prefix`.
fn find_file(dir: &Path, prefix: &str) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| Some(e.ok()?.path()))
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_builds_sort_after_older_ones() {
        let key = |v: &str| version_key(&format!("linux-image-{v}{FLAVOUR}"));
        assert!(key("6.1.0-57") > key("6.1.0-9"));
        assert!(key("6.12.118+deb12") > key("6.12.107+deb12"));
    }

    #[test]
    fn release_is_what_uname_says() {
        let kernel = Kernel {
            package: "linux-image-6.1.0-57-cloud-amd64-unsigned".into(),
            vmlinuz: PathBuf::new(),
            tls_modules: Vec::new(),
        };
        assert_eq!(kernel.release(), "6.1.0-57-cloud-amd64");
    }
}
