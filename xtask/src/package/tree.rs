//! The staged package tree: its files and directories, relative to its root, and their modes.

use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use anyhow::Context as _;

/// Every directory and regular file under `root`, relative to it, sorted; `DEBIAN` excluded
/// (it is the package's metadata, not its contents).
pub struct Tree {
    pub dirs: Vec<PathBuf>,
    pub files: Vec<PathBuf>,
}

impl Tree {
    pub fn walk(root: &Path) -> anyhow::Result<Self> {
        let mut tree = Self { dirs: Vec::new(), files: Vec::new() };
        walk(root, Path::new(""), &mut tree)?;
        tree.dirs.sort();
        tree.files.sort();
        Ok(tree)
    }
}

fn walk(root: &Path, rel: &Path, tree: &mut Tree) -> anyhow::Result<()> {
    let dir = root.join(rel);
    for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let path = rel.join(entry.file_name());
        if path == Path::new("DEBIAN") {
            continue;
        }
        let kind = entry.file_type().with_context(|| format!("cannot stat {}", entry.path().display()))?;
        if kind.is_dir() {
            tree.dirs.push(path.clone());
            walk(root, &path, tree)?;
        } else {
            tree.files.push(path);
        }
    }
    Ok(())
}

/// Sets a mode whatever the umask made of it.
pub fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set mode {mode:o} on {}", path.display()))
}
