//! The layer check of `cargo xtask lint`: the daemon crate's top-level modules form a pipeline
//! (ARCHITECTURE.md), and a module may name only modules of its own layer or of the layers below.
//! `detect` names none of the `host` layer (it is pure). Only `probes` names aya. There are no
//! exceptions: an upward import fails the lint.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use anyhow::Context as _;

/// Bottom to top. A module may use its own layer and any layer listed before it.
const LAYERS: &[(&str, &[&str])] = &[
    // Pure helpers and the wire types every layer may use.
    ("foundation", &["clock", "heap", "printable", "opaque", "reason", "syscalls", "thread_group", "api", "logging"]),
    // The kernel, /proc and the target's files: the only I/O below the tick.
    ("host", &["probes", "host", "symbolize", "stacks", "jvm_attach", "uprobe_opener"]),
    ("events", &["events"]),
    ("state", &["state"]),
    ("detect", &["detect"]),
    ("alerts", &["alerts"]),
    ("sinks", &["sinks"]),
    // The tick that ties the layers together, and the programs around it.
    ("collector", &["collector"]),
    ("commands", &["cli", "top", "config"]),
];

/// Layers whose modules must stay pure: they name no module of the `host` layer, the I/O below
/// the tick (the detectors judge state and time handed to them; ARCHITECTURE.md, "Invariants").
const PURE: &[&str] = &["detect"];

/// Files outside `probes` that may name aya: the embedded object and the ring-buffer drains.
const AYA_OUTSIDE_PROBES: &[&str] = &["lib.rs", "cli/run.rs"];

pub fn check(src: &Path) -> anyhow::Result<()> {
    let files = rust_files(src)?;
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut aya_users = Vec::new();
    for (relative, text) in &files {
        let module = top_module(relative);
        if module == "lib" || module == "main" {
            // The crate root and the binary sit above every layer.
            continue;
        }
        for used in crate_modules(text) {
            if used != module {
                uses.entry(module.clone()).or_default().insert(used);
            }
        }
        if module != "probes" && names_aya(text) && !AYA_OUTSIDE_PROBES.contains(&relative.as_str()) {
            aya_users.push(relative.clone());
        }
    }
    let problems = judge(&uses, &aya_users);
    anyhow::ensure!(problems.is_empty(), "layer check (xtask/src/layers.rs):\n  {}", problems.join("\n  "));
    println!("layer check: passed");
    Ok(())
}

/// What breaks the layers: upward imports, modules in no layer, aya named outside `probes`.
fn judge(uses: &BTreeMap<String, BTreeSet<String>>, aya_users: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let layer_of = |module: &str| LAYERS.iter().position(|(_, modules)| modules.contains(&module));
    for (from, used) in uses {
        let Some(from_layer) = layer_of(from) else {
            problems.push(format!("module `{from}` is in no layer: add it to LAYERS"));
            continue;
        };
        for to in used {
            let Some(to_layer) = layer_of(to) else {
                problems.push(format!("module `{to}` (used by `{from}`) is in no layer: add it to LAYERS"));
                continue;
            };
            if PURE.contains(&from.as_str()) && LAYERS[to_layer].0 == "host" {
                problems.push(format!("`{from}` must stay pure: it uses `{to}` (host), which does I/O"));
                continue;
            }
            if to_layer <= from_layer {
                continue;
            }
            problems.push(format!(
                "`{from}` ({}) uses `{to}` ({}), a layer above it",
                LAYERS[from_layer].0, LAYERS[to_layer].0
            ));
        }
    }
    for file in aya_users {
        problems.push(format!("{file} names aya: only probes/ may"));
    }
    problems
}

/// Every `.rs` file under `src`, as (path relative to `src` with `/`, text).
fn rust_files(src: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
                let relative = path.strip_prefix(src)?.to_string_lossy().replace('\\', "/");
                out.push((relative, text));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `collector/mod.rs` → `collector`, `heap.rs` → `heap`; the crate root and the binary are
/// `lib` and `main`, above every layer.
fn top_module(relative: &str) -> String {
    let first = relative.split('/').next().unwrap_or(relative);
    first.strip_suffix(".rs").unwrap_or(first).to_owned()
}

/// The top-level modules a file names as `crate::NAME`, in paths and in `use crate::{a, b::c}`
/// groups. Line comments are skipped; string contents are not, which at worst reports a use that
/// is not there (a false failure, never a missed one).
fn crate_modules(text: &str) -> BTreeSet<String> {
    let code: String = text.lines().map(|l| l.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n");
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => found.extend(group_heads(group)),
            None => found.extend(ident(rest)),
        }
    }
    // Items of the crate root (`crate::EBPF_OBJECT`) are no module.
    found.retain(|m| m != "self" && m != "super" && m.starts_with(|c: char| c.is_ascii_lowercase()));
    found
}

/// The first path segment of each item of a `{...}` group, from just after its `{`.
fn group_heads(group: &str) -> Vec<String> {
    let mut depth = 1;
    let mut item_start = true;
    let mut heads = Vec::new();
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => item_start = true,
            c if item_start && depth == 1 && (c.is_ascii_alphabetic() || c == '_') => {
                heads.extend(ident(&group[i..]));
                item_start = false;
            }
            _ => {}
        }
    }
    heads
}

fn ident(text: &str) -> Option<String> {
    let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(text.len());
    (end > 0).then(|| text[..end].to_owned())
}

fn names_aya(text: &str) -> bool {
    text.lines().map(|l| l.split("//").next().unwrap_or_default()).any(|l| l.contains("aya::") || l.contains("use aya"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uses(pairs: &[(&str, &str)]) -> BTreeMap<String, BTreeSet<String>> {
        let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in pairs {
            map.entry((*from).to_owned()).or_default().insert((*to).to_owned());
        }
        map
    }

    #[test]
    fn paths_and_use_groups_name_their_modules() {
        let text = "use crate::{\n    detect::Detectors,\n    sinks::{families, prometheus::Exposition},\n    state::x,\n};\n\
                    fn f() { crate::host::procfs::comm(1); } // crate::top is a comment\n";
        let found: Vec<String> = crate_modules(text).into_iter().collect();
        assert_eq!(found, ["detect", "host", "sinks", "state"]);
    }

    #[test]
    fn a_new_upward_import_fails_and_downward_ones_pass() {
        let mut pairs = vec![("collector", "detect"), ("detect", "state"), ("state", "host")];
        assert!(judge(&uses(&pairs), &[]).is_empty(), "{:?}", judge(&uses(&pairs), &[]));
        pairs.push(("detect", "collector"));
        let problems = judge(&uses(&pairs), &[]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("`detect` (detect) uses `collector` (collector)"), "{problems:?}");
    }

    #[test]
    fn detectors_name_no_io() {
        let pairs = [("detect", "state"), ("detect", "api"), ("detect", "host"), ("state", "host")];
        let problems = judge(&uses(&pairs), &[]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("`detect` must stay pure: it uses `host`"), "{problems:?}");
    }

    #[test]
    fn unknown_modules_and_aya_outside_probes_fail() {
        let pairs = [("newcomer", "host")];
        let problems = judge(&uses(&pairs), &["detect/pool.rs".to_owned()]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("`newcomer` is in no layer"));
        assert!(problems[1].contains("detect/pool.rs names aya"));
    }

    #[test]
    fn the_daemon_crate_holds_its_layers() {
        let src = crate::util::workspace_root().join("gateway-observer/src");
        check(&src).expect("the tree as it is passes");
    }
}
