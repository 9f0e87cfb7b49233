//! What `dpkg-deb --contents` says a .deb holds, and the rules its entries must keep: the
//! required files present, everything owned by root, modes as `layout` gives them.

use anyhow::{Context as _, bail};

use super::layout;

#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    pub is_dir: bool,
    pub mode: u32,
    pub owner: String,
    /// Without the leading `./`; directories without their trailing `/`.
    pub path: String,
}

/// Parses `dpkg-deb --contents` (tar's verbose listing): mode, owner/group, size, date, time, path.
pub fn parse(printed: &str) -> anyhow::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    for line in printed.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [perms, owner, _size, _date, _time, path] = fields[..] else {
            bail!("unexpected line in dpkg-deb --contents: {line:?}");
        };
        let (kind, bits) = perms.split_at_checked(1).with_context(|| format!("no mode in {line:?}"))?;
        let path = path.trim_start_matches("./").trim_end_matches('/');
        if path.is_empty() {
            continue; // the archive's root, ./
        }
        if !matches!(kind, "d" | "-") {
            bail!("{path} is neither a file nor a directory ({perms}): the package holds neither links nor devices");
        }
        entries.push(Entry {
            is_dir: kind == "d",
            mode: mode_bits(bits, line)?,
            owner: owner.to_owned(),
            path: path.to_owned(),
        });
    }
    Ok(entries)
}

/// `rwxr-xr-x` → 0o755 (no set-id or sticky bits are expected, so `s`/`t` are errors).
fn mode_bits(bits: &str, line: &str) -> anyhow::Result<u32> {
    if bits.len() != 9 {
        bail!("mode {bits:?} is not nine rwx letters in {line:?}");
    }
    bits.chars().zip("rwxrwxrwx".chars()).try_fold(0, |mode, (c, want)| match c {
        '-' => Ok(mode << 1),
        c if c == want => Ok(mode << 1 | 1),
        _ => bail!("unexpected mode letter {c:?} in {line:?}"),
    })
}

/// Every rule the archive must keep, all violations in one error.
pub fn check(entries: &[Entry]) -> anyhow::Result<()> {
    let mut wrong = Vec::new();
    for required in layout::REQUIRED {
        if !entries.iter().any(|e| !e.is_dir && e.path == *required) {
            wrong.push(format!("{required} is missing"));
        }
    }
    for e in entries {
        let want = if e.is_dir { 0o755 } else { layout::mode_of(&e.path) };
        if e.mode != want {
            wrong.push(format!("{} has mode {:o}, not {want:o}", e.path, e.mode));
        }
        if e.owner != "root/root" {
            wrong.push(format!("{} is owned by {}, not root/root", e.path, e.owner));
        }
    }
    if !wrong.is_empty() {
        bail!("the package's contents are wrong:\n  {}", wrong.join("\n  "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "\
drwxr-xr-x root/root         0 2026-12-03 10:00 ./
drwxr-xr-x root/root         0 2026-12-03 10:00 ./usr/
drwxr-xr-x root/root         0 2026-12-03 10:00 ./usr/bin/
-rwxr-xr-x root/root   9000000 2026-12-03 10:00 ./usr/bin/gateway-observer
-rw-r--r-- root/root      3000 2026-12-03 10:00 ./etc/gateway-observer/config.toml
-rw-r--r-- root/root      2000 2026-12-03 10:00 ./lib/systemd/system/gateway-observer.service
-rw-r--r-- root/root      1000 2026-12-03 10:00 ./usr/share/man/man1/gateway-observer.1.gz
-rw-r--r-- root/root       900 2026-12-03 10:00 ./usr/share/man/man1/gateway-observer-run.1.gz
-rw-r--r-- root/root      1500 2026-12-03 10:00 ./usr/share/doc/gateway-observer/copyright
-rw-r--r-- root/root       200 2026-12-03 10:00 ./usr/share/doc/gateway-observer/changelog.gz
";

    #[test]
    fn a_listing_parses_into_entries() {
        let entries = parse(LISTING).expect("parses");
        assert_eq!(entries.len(), 9, "the root entry is dropped");
        assert_eq!(
            entries[2],
            Entry { is_dir: false, mode: 0o755, owner: "root/root".into(), path: "usr/bin/gateway-observer".into() }
        );
        assert_eq!(entries[0], Entry { is_dir: true, mode: 0o755, owner: "root/root".into(), path: "usr".into() });
        check(&entries).expect("a good package passes");
    }

    #[test]
    fn wrong_modes_owners_and_missing_files_are_each_named() {
        let bad = LISTING
            .replace("-rwxr-xr-x root/root   9000000", "-rw-r--r-- root/root   9000000")
            .replace("-rw-r--r-- root/root      3000", "-rw-rw-r-- user/user      3000")
            .replace("./usr/share/doc/gateway-observer/copyright", "./usr/share/doc/gateway-observer/COPYING");
        let err = check(&parse(&bad).expect("parses")).expect_err("rejected").to_string();
        for wanted in [
            "usr/bin/gateway-observer has mode 644, not 755",
            "etc/gateway-observer/config.toml has mode 664, not 644",
            "etc/gateway-observer/config.toml is owned by user/user",
            "usr/share/doc/gateway-observer/copyright is missing",
        ] {
            assert!(err.contains(wanted), "{wanted:?} in {err}");
        }
    }

    #[test]
    fn links_and_odd_modes_are_refused() {
        assert!(parse("lrwxrwxrwx root/root 0 2026-12-03 10:00 ./usr/bin/x -> y\n").is_err());
        assert!(parse("-rwsr-xr-x root/root 0 2026-12-03 10:00 ./usr/bin/x\n").is_err());
        assert!(parse("garbage\n").is_err());
    }
}
