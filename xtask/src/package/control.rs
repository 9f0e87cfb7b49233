//! DEBIAN/control: the package's name, version, dependencies and description.

use anyhow::{Context as _, bail};

pub const PACKAGE: &str = "gateway-observer";
/// The project's address, as its commits carry it.
pub const MAINTAINER: &str = "gateway-observer maintainers <maintainers@users.noreply.a-seed-6e31b2ce.example>";

/// What the control file says beyond the constants.
pub struct Control {
    pub version: String,
    pub architecture: String,
    /// The shared libraries' packages, as dpkg-shlibdeps computed them from the binary. The
    /// maintainer scripts' deb-systemd-helper and -invoke come with init-system-helpers, which is
    /// essential: no dependency on it.
    pub depends: String,
    pub installed_size_kib: u64,
    /// The one-line summary (the crate's `description`).
    pub summary: String,
}

impl Control {
    pub fn render(&self) -> String {
        let Self { version, architecture, depends, installed_size_kib, summary } = self;
        format!(
            "Package: {PACKAGE}\n\
             Version: {version}\n\
             Architecture: {architecture}\n\
             Maintainer: {MAINTAINER}\n\
             Installed-Size: {installed_size_kib}\n\
             Depends: {depends}\n\
             Section: admin\n\
             Priority: optional\n\
             Description: {summary}\n\
             {DESCRIPTION}"
        )
    }
}

/// The extended description: each line starts with a space (Debian policy 5.6.13).
const DESCRIPTION: &str = " Kernel probes watch gateway processes from outside, in any language, and a\n \
privileged daemon turns what they see into Prometheus metrics: per thread\n \
group, how long threads are off the CPU and why, request and upstream latency,\n \
and alerts for blocked event loops, saturated pools and silent upstreams.\n \
.\n \
The service is enabled but not started on installation: edit the targets in\n \
/etc/gateway-observer/config.toml, then start gateway-observer.service.\n";

/// The value of `shlibs:Depends` in what `dpkg-shlibdeps -O` prints.
pub fn parse_shlibdeps(printed: &str) -> anyhow::Result<String> {
    let value = printed
        .lines()
        .find_map(|l| l.strip_prefix("shlibs:Depends="))
        .with_context(|| format!("dpkg-shlibdeps printed no shlibs:Depends: {printed:?}"))?;
    if !value.contains("libc6") {
        bail!("dpkg-shlibdeps found no libc6 dependency in {value:?}: is the binary dynamically linked?");
    }
    Ok(value.trim().to_owned())
}

/// Installed-Size in KiB, as dpkg-gencontrol counts it: each file rounded up to a KiB, and one
/// KiB per directory.
pub fn installed_size_kib(file_sizes: &[u64], directories: usize) -> u64 {
    file_sizes.iter().map(|size| size.div_ceil(1024)).sum::<u64>() + directories as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control() -> Control {
        Control {
            version: "0.1.0".into(),
            architecture: "amd64".into(),
            depends: "libc6 (>= 2.34), libgcc-s1 (>= 4.2)".into(),
            installed_size_kib: 9000,
            summary: "eBPF-assisted latency observer for API gateway hosts".into(),
        }
    }

    #[test]
    fn control_file_has_every_field_once_and_a_folded_description() {
        let text = control().render();
        for field in [
            "Package: gateway-observer\n",
            "Version: 0.1.0\n",
            "Architecture: amd64\n",
            "Installed-Size: 9000\n",
            "Depends: libc6 (>= 2.34), libgcc-s1 (>= 4.2)\n",
            "Section: admin\n",
            "Priority: optional\n",
            "Description: eBPF-assisted latency observer for API gateway hosts\n",
        ] {
            assert_eq!(text.matches(field).count(), 1, "{field:?} in\n{text}");
        }
        let after_summary = text.split_once("Description: ").expect("description").1.lines().skip(1);
        for line in after_summary {
            assert!(line.starts_with(' ') && line.len() <= 80, "extended description line {line:?}");
        }
        assert!(text.ends_with('\n'), "a control file ends with a newline");
        assert!(!text.contains("\n\n"), "an empty line would end the stanza");
    }

    #[test]
    fn shlibdeps_output_gives_the_depends_value() {
        let printed = "shlibs:Depends=libc6 (>= 2.34), libgcc-s1 (>= 4.2)\n";
        assert_eq!(parse_shlibdeps(printed).expect("parses"), "libc6 (>= 2.34), libgcc-s1 (>= 4.2)");
        assert!(parse_shlibdeps("").is_err());
        assert!(parse_shlibdeps("shlibs:Depends=libgcc-s1 (>= 4.2)\n").is_err(), "libc6 must be among them");
    }

    #[test]
    fn installed_size_rounds_each_file_up() {
        assert_eq!(installed_size_kib(&[1, 1024, 1025], 3), 1 + 1 + 2 + 3);
        assert_eq!(installed_size_kib(&[], 0), 0);
    }
}
