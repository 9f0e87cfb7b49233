//! Lays out the package tree in target/debian/root and packs it with dpkg-deb.

use std::{
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use super::{
    control::{self, Control},
    docs, ebpf_object, layout,
    tree::{self, Tree},
};
use crate::util;

const POSTINST: &str = include_str!("maintainer/postinst");
const PRERM: &str = include_str!("maintainer/prerm");
const POSTRM: &str = include_str!("maintainer/postrm");

/// What the build produced and what the crate's manifest says about it.
pub struct Inputs<'a> {
    pub binary: &'a Path,
    /// The man pages the clap definition gave, uncompressed.
    pub man_dir: &'a Path,
    pub version: &'a str,
    pub license: &'a str,
    pub summary: &'a str,
    pub architecture: &'a str,
}

/// Writes the tree under `root` (emptied first) and returns the .deb dpkg-deb built from it in `out_dir`.
pub fn build_deb(inputs: &Inputs, root: &Path, out_dir: &Path) -> anyhow::Result<PathBuf> {
    if root.exists() {
        std::fs::remove_dir_all(root).with_context(|| format!("cannot empty {}", root.display()))?;
    }
    let deploy = util::workspace_root().join("deploy/systemd");
    install_stripped(inputs.binary, &root.join(layout::BINARY))?;
    // Checked on the copy that ships, after stripping.
    ebpf_object::require_real_object(&root.join(layout::BINARY))?;
    copy(&deploy.join("gateway-observer.service"), &root.join(layout::UNIT))?;
    copy(&deploy.join("config.toml"), &root.join(layout::CONFIG))?;
    man_pages(inputs.man_dir, root)?;
    let provenance = provenance()?;
    write(&root.join(layout::COPYRIGHT), &docs::copyright(inputs.license, &provenance.years)?)?;
    let changelog = root.join(layout::CHANGELOG.trim_end_matches(".gz"));
    write(&changelog, &docs::changelog(inputs.version, &provenance.commit, &provenance.date))?;
    gzip(&changelog)?;

    let tree = Tree::walk(root)?;
    for dir in std::iter::once(Path::new("")).chain(tree.dirs.iter().map(PathBuf::as_path)) {
        tree::set_mode(&root.join(dir), 0o755)?;
    }
    let mut sizes = Vec::new();
    for file in &tree.files {
        let path = root.join(file);
        tree::set_mode(&path, layout::mode_of(&file.to_string_lossy()))?;
        sizes.push(std::fs::metadata(&path).with_context(|| format!("cannot stat {}", path.display()))?.size());
    }

    let debian = root.join("DEBIAN");
    let control = Control {
        version: inputs.version.to_owned(),
        architecture: inputs.architecture.to_owned(),
        depends: shlib_depends(&root.join(layout::BINARY), root.parent().unwrap_or(root))?,
        installed_size_kib: control::installed_size_kib(&sizes, tree.dirs.len()),
        summary: inputs.summary.to_owned(),
    };
    write(&debian.join("control"), &control.render())?;
    write(&debian.join("conffiles"), &layout::conffiles())?;
    write(&debian.join("md5sums"), &md5sums(root, &tree)?)?;
    for (name, script) in [("postinst", POSTINST), ("prerm", PRERM), ("postrm", POSTRM)] {
        write(&debian.join(name), script)?;
        tree::set_mode(&debian.join(name), 0o755)?;
    }
    tree::set_mode(&debian, 0o755)?;

    let deb = out_dir.join(format!("{}_{}_{}.deb", control::PACKAGE, inputs.version, inputs.architecture));
    let (root_arg, deb_arg) = (path_str(root)?, path_str(&deb)?);
    // --root-owner-group: every file root:root in the archive, without fakeroot.
    util::run("dpkg-deb", &["--root-owner-group", "--build", root_arg, deb_arg])
        .with_context(|| format!("dpkg-deb could not build {}", deb.display()))?;
    Ok(deb)
}

/// The binary without its symbol table (Debian policy 10.1; the daemon never reads its own).
fn install_stripped(binary: &Path, dest: &Path) -> anyhow::Result<()> {
    create_parent(dest)?;
    let args = ["--strip-unneeded", "--remove-section=.comment", "-o", path_str(dest)?, path_str(binary)?];
    util::run("strip", &args).with_context(|| format!("cannot strip {} into {}", binary.display(), dest.display()))
}

/// Each page clap_mangen wrote, gzipped at maximum compression without a timestamp (`-n`).
fn man_pages(man_dir: &Path, root: &Path) -> anyhow::Result<()> {
    let mut found = false;
    for entry in std::fs::read_dir(man_dir).with_context(|| format!("cannot list {}", man_dir.display()))? {
        let entry = entry.with_context(|| format!("cannot list {}", man_dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let dest = root.join(layout::MAN_DIR).join(&name);
        copy(&entry.path(), &dest)?;
        gzip(&dest)?;
        found = true;
    }
    if !found || !root.join(layout::MAN_PAGE).exists() {
        bail!("no {} among the man pages generated in {}", layout::MAN_PAGE, man_dir.display());
    }
    Ok(())
}

/// `shlibs:Depends` of the staged binary. dpkg-shlibdeps wants a debian/control to read, so it
/// runs in a scratch directory beside the tree that holds a minimal one.
fn shlib_depends(binary: &Path, scratch_parent: &Path) -> anyhow::Result<String> {
    let scratch = scratch_parent.join("shlibdeps");
    write(
        &scratch.join("debian/control"),
        &format!("Source: {0}\n\nPackage: {0}\nArchitecture: any\n", control::PACKAGE),
    )?;
    let out = Command::new("dpkg-shlibdeps")
        .arg("-O")
        .arg(format!("-e{}", path_str(binary)?))
        .current_dir(&scratch)
        .output()
        .context("failed to run dpkg-shlibdeps (`cargo xtask setup` installs dpkg-dev)")?;
    if !out.status.success() {
        bail!(
            "dpkg-shlibdeps failed on {} ({}): {}",
            binary.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    control::parse_shlibdeps(&String::from_utf8_lossy(&out.stdout))
        .with_context(|| format!("no dependencies for {}", binary.display()))
}

/// DEBIAN/md5sums for `dpkg --verify`; conffiles are left out, as dpkg tracks those itself.
fn md5sums(root: &Path, tree: &Tree) -> anyhow::Result<String> {
    let conffile = Path::new(layout::CONFIG);
    let files: Vec<&Path> = tree.files.iter().map(PathBuf::as_path).filter(|f| *f != conffile).collect();
    let out = Command::new("md5sum")
        .args(&files)
        .current_dir(root)
        .output()
        .with_context(|| format!("failed to run md5sum in {}", root.display()))?;
    if !out.status.success() {
        bail!("md5sum failed in {} ({}): {}", root.display(), out.status, String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8(out.stdout).context("md5sum printed non-UTF-8 paths")
}

/// Where the package was built from: the changelog's entry and the copyright's years.
struct Provenance {
    commit: String,
    /// RFC 2822, as a changelog trailer wants it.
    date: String,
    years: String,
}

fn provenance() -> anyhow::Result<Provenance> {
    let root = util::workspace_root();
    let git = |args: &[&str]| -> anyhow::Result<String> {
        let mut all = vec!["-C", path_str(&root)?, "log"];
        all.extend(args);
        util::output("git", &all)
            .with_context(|| format!("git log failed in {}: the changelog names the commit built", root.display()))
    };
    let head = git(&["-1", "--format=%h%n%aD%n%ad", "--date=format:%Y"])?;
    let [commit, date, last_year] = head.lines().collect::<Vec<_>>()[..] else {
        bail!("git log printed no commit, date and year: {head:?}");
    };
    // The root commits (several after merged histories; one in a shallow clone's view).
    let roots = git(&["--max-parents=0", "--format=%ad", "--date=format:%Y"])?;
    let first_year = roots.lines().min().unwrap_or(last_year);
    Ok(Provenance { commit: commit.to_owned(), date: date.to_owned(), years: docs::years(first_year, last_year) })
}

fn gzip(path: &Path) -> anyhow::Result<()> {
    util::run("gzip", &["-9", "-n", "-f", path_str(path)?]).with_context(|| format!("cannot gzip {}", path.display()))
}

fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    create_parent(to)?;
    std::fs::copy(from, to).with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    Ok(())
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    create_parent(path)?;
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

fn create_parent(path: &Path) -> anyhow::Result<()> {
    let parent = path.parent().with_context(|| format!("{} has no parent", path.display()))?;
    std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))
}

pub fn path_str(path: &Path) -> anyhow::Result<&str> {
    path.to_str().with_context(|| format!("{} is not UTF-8", path.display()))
}
