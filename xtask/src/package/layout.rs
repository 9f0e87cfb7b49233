//! Where each file of the package goes and with which mode: the one list that staging writes
//! and the install check holds the installed system to.

/// Paths inside the package, relative to `/`.
pub const BINARY: &str = "usr/bin/gateway-observer";
pub const UNIT: &str = "lib/systemd/system/gateway-observer.service";
pub const CONFIG: &str = "etc/gateway-observer/config.toml";
pub const MAN_DIR: &str = "usr/share/man/man1";
pub const COPYRIGHT: &str = "usr/share/doc/gateway-observer/copyright";
pub const CHANGELOG: &str = "usr/share/doc/gateway-observer/changelog.gz";
/// The main man page; one more per visible subcommand sits beside it.
pub const MAN_PAGE: &str = "usr/share/man/man1/gateway-observer.1.gz";
/// The symlink `deb-systemd-helper enable` makes (the unit's `WantedBy=multi-user.target`).
pub const ENABLED_LINK: &str = "/etc/systemd/system/multi-user.target.wants/gateway-observer.service";
/// The directory the package owns under /etc; purge removes it whole.
pub const CONFIG_DIR: &str = "/etc/gateway-observer";

/// Files every package must hold, whatever the CLI's subcommands are.
pub const REQUIRED: &[&str] = &[BINARY, UNIT, CONFIG, MAN_PAGE, COPYRIGHT, CHANGELOG];

/// Regular files: executables 0755, everything else 0644 (Debian policy 10.9).
pub fn mode_of(path: &str) -> u32 {
    if path == BINARY { 0o755 } else { 0o644 }
}

/// DEBIAN/conffiles: dpkg keeps an edited config across upgrades and removes it only on purge.
pub fn conffiles() -> String {
    format!("/{CONFIG}\n")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn only_the_binary_is_executable() {
        assert_eq!(mode_of(BINARY), 0o755);
        for path in [UNIT, CONFIG, MAN_PAGE, COPYRIGHT, CHANGELOG] {
            assert_eq!(mode_of(path), 0o644, "{path}");
        }
    }

    #[test]
    fn the_config_is_the_only_conffile() {
        assert_eq!(conffiles(), "/etc/gateway-observer/config.toml\n");
    }

    #[test]
    fn required_files_sit_under_their_directories() {
        assert!(MAN_PAGE.starts_with(MAN_DIR));
        assert_eq!(Path::new(COPYRIGHT).parent(), Path::new(CHANGELOG).parent());
        assert!(CONFIG.starts_with(CONFIG_DIR.trim_start_matches('/')));
    }
}
