//! The files under /usr/share/doc/gateway-observer that Debian policy asks of every package:
//! `copyright` in the machine-readable format (DEP-5) and a changelog.

use anyhow::bail;

use super::control::{MAINTAINER, PACKAGE};

/// The text of the MIT license, which DEP-5 calls Expat and Debian ships no copy of.
const EXPAT: &str = "Permission is hereby granted, free of charge, to any person obtaining a copy of this
software and associated documentation files (the \"Software\"), to deal in the Software without
restriction, including without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT
NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES
OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN
CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.";

/// DEP-5 text for the crate's SPDX `license` expression (alternatives joined by OR only), for
/// work done in `years` (`2026`, `2025-2026`).
pub fn copyright(spdx: &str, years: &str) -> anyhow::Result<String> {
    let mut names = Vec::new();
    let mut paragraphs = Vec::new();
    for id in spdx.split(" OR ").map(str::trim) {
        let (name, body) = match id {
            "MIT" => ("Expat", folded(EXPAT)),
            "Apache-2.0" => (
                "Apache-2.0",
                folded(
                    "On Debian systems, the full text of the Apache License, Version 2.0 is in\n/usr/share/common-licenses/Apache-2.0.",
                ),
            ),
            other => bail!(
                "license {other:?} (from {spdx:?}) has no copyright text here: add it to xtask/src/package/docs.rs"
            ),
        };
        names.push(name);
        paragraphs.push(format!("License: {name}\n{body}"));
    }
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: {PACKAGE}\n\n\
         Files: *\n\
         Copyright: {years} the {PACKAGE} authors\n\
         License: {}\n\n\
         {}\n",
        names.join(" or "),
        paragraphs.join("\n\n")
    ))
}

/// A DEP-5 (and control-file) continuation: every line indented, empty lines as " .".
fn folded(text: &str) -> String {
    text.lines().map(|l| if l.is_empty() { " .".to_owned() } else { format!(" {l}") }).collect::<Vec<_>>().join("\n")
}

/// The years of a copyright notice: the first commit's to the last's.
pub fn years(first: &str, last: &str) -> String {
    if first == last { first.to_owned() } else { format!("{first}-{last}") }
}

/// changelog.gz's text before compression: one entry for the commit it was built from. `date` is
/// in RFC 2822 form (`git log --format=%aD`).
pub fn changelog(version: &str, commit: &str, date: &str) -> String {
    format!(
        "{PACKAGE} ({version}) unstable; urgency=medium\n\n  \
         * Built from commit {commit}.\n\n \
         -- {MAINTAINER}  {date}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dual_license_gets_both_paragraphs() {
        let text = copyright("MIT OR Apache-2.0", "2026").expect("known licenses");
        for wanted in [
            "Files: *\nCopyright: 2026 the gateway-observer authors\nLicense: Expat or Apache-2.0\n",
            "License: Expat\n Permission is hereby granted",
            "\n .\n THE SOFTWARE IS PROVIDED", // paragraph breaks folded
            "License: Apache-2.0\n On Debian systems",
        ] {
            assert!(text.contains(wanted), "{wanted:?} in\n{text}");
        }
        // Stanzas are separated by one empty line; inside one every line is a field or indented.
        for stanza in text.trim_end().split("\n\n") {
            for line in stanza.lines() {
                assert!(line.starts_with(' ') || line.contains(": "), "{line:?}");
            }
        }
    }

    #[test]
    fn an_unknown_license_is_an_error_that_names_it() {
        let err = copyright("GPL-2.0-only", "2026").expect_err("unknown");
        assert!(err.to_string().contains("GPL-2.0-only"), "{err}");
    }

    #[test]
    fn years_span_first_to_last_commit() {
        assert_eq!(years("2026", "2026"), "2026");
        assert_eq!(years("2025", "2026"), "2025-2026");
    }

    #[test]
    fn changelog_entry_has_the_trailer_dpkg_parses() {
        let text = changelog("0.1.0", "7e07916", "Thu, 3 Dec 2026 10:00:00 +0000");
        assert!(
            text.starts_with("gateway-observer (0.1.0) unstable; urgency=medium\n\n  * Built from commit 7e07916.\n")
        );
        assert!(text.ends_with(&format!("\n -- {MAINTAINER}  Thu, 3 Dec 2026 10:00:00 +0000\n")), "{text}");
    }
}
