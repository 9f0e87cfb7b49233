//! The confinement in deploy/ against what the daemon does, checked statically (no container
//! runtime here, and no AppArmor in this kernel). The seccomp profile parses, denies by default
//! and allows every syscall of a traced run (`kubernetes/seccomp/syscalls.recorded`, regenerated
//! by `record-syscalls.sh` beside it) and nothing `syscalls.extra` does not explain; the systemd
//! unit's `SystemCallFilter=` allows the same; the unit, the DaemonSet and the AppArmor profile
//! grant exactly the capabilities the daemon keeps; the DaemonSet uses both profiles; the AppArmor
//! profile compiles with `apparmor_parser` (parsed and compiled only: nothing loads or enforces it).

use std::{collections::BTreeSet, path::Path, process::Command};

use gateway_observer::host::privileges::KEPT;
use serde::Deserialize as _;
use serde_json::Value;
use tests::deploy::{DAEMONSET, UNIT, deploy_path, read_deploy, unit_words};

const SECCOMP: &str = "kubernetes/seccomp/gateway-observer.json";
const RECORDED: &str = "kubernetes/seccomp/syscalls.recorded";
const EXTRA: &str = "kubernetes/seccomp/syscalls.extra";
const APPARMOR: &str = "apparmor/gateway-observer";

/// The names of a syscall list: one a line, `#` starts a comment.
fn syscall_list(relative: &str) -> BTreeSet<String> {
    read_deploy(relative)
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn recorded() -> BTreeSet<String> {
    let recorded = syscall_list(RECORDED);
    for needed in ["bpf", "capset", "prctl", "accept4", "execve"] {
        assert!(recorded.contains(needed), "{RECORDED} lacks {needed}: not a full run of the daemon?");
    }
    recorded
}

/// Every syscall the daemon may make: the recorded ones and the explained extras.
fn needed() -> BTreeSet<String> {
    recorded().union(&syscall_list(EXTRA)).cloned().collect()
}

#[test]
fn seccomp_profile_allows_every_recorded_syscall_and_nothing_unexplained() {
    let profile: Value = serde_json::from_str(&read_deploy(SECCOMP)).unwrap_or_else(|e| panic!("{SECCOMP}: {e}"));
    assert_eq!(profile["defaultAction"], "SCMP_ACT_ERRNO", "a syscall not listed is refused");
    let architectures = profile["architectures"].as_array().expect("architectures");
    assert!(architectures.iter().any(|a| a == "SCMP_ARCH_X86_64"), "{architectures:?}");
    let mut allowed = BTreeSet::new();
    for rule in profile["syscalls"].as_array().expect("a syscalls list") {
        assert_eq!(rule["action"], "SCMP_ACT_ALLOW", "only allow rules: {rule}");
        assert!(rule.get("args").is_none() && rule.get("includes").is_none(), "unconditional rules only: {rule}");
        for name in rule["names"].as_array().expect("names") {
            let name = name.as_str().expect("a syscall name").to_owned();
            assert!(allowed.insert(name.clone()), "{name} listed twice");
        }
    }
    let recorded = recorded();
    let missing: Vec<_> = recorded.difference(&allowed).collect();
    assert!(missing.is_empty(), "{SECCOMP} refuses syscalls the daemon made: {missing:?}");
    let extra = syscall_list(EXTRA);
    let both: Vec<_> = extra.intersection(&recorded).collect();
    assert!(both.is_empty(), "{EXTRA} explains syscalls the run recorded anyway: {both:?}");
    for line in read_deploy(EXTRA).lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        assert!(line.split_once('#').is_some_and(|(_, why)| !why.trim().is_empty()), "{EXTRA}: no reason in {line:?}");
    }
    let needed = needed();
    let unexplained: Vec<_> = allowed.difference(&needed).collect();
    assert!(unexplained.is_empty(), "{SECCOMP} allows syscalls neither recorded nor explained: {unexplained:?}");
}

/// `systemd-analyze syscall-filter`: each `@group` header, then its members (syscalls and
/// nested groups) indented below it.
fn systemd_groups(listing: &str) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for line in listing.lines() {
        let item = line.trim();
        if item.is_empty() || item.starts_with('#') {
            continue;
        }
        if line.starts_with('@') {
            groups.push((item.to_owned(), Vec::new()));
        } else if let Some((_, members)) = groups.last_mut() {
            members.push(item.to_owned());
        }
    }
    groups
}

fn expand(item: &str, groups: &[(String, Vec<String>)], into: &mut BTreeSet<String>) {
    match groups.iter().find(|(name, _)| name == item) {
        Some((_, members)) => members.iter().for_each(|m| expand(m, groups, into)),
        None if item.starts_with('@') => panic!("systemd knows no group {item}"),
        None => {
            into.insert(item.to_owned());
        }
    }
}

#[test]
fn systemd_unit_filters_syscalls_to_what_the_daemon_makes() {
    let unit = read_deploy(UNIT);
    let filter = unit_words(&unit, "SystemCallFilter");
    assert!(!filter.is_empty(), "{UNIT} has no SystemCallFilter=");
    assert!(filter.iter().all(|f| !f.starts_with('~')), "an allow list, not a deny list: {filter:?}");
    assert!(unit.contains("\nSystemCallErrorNumber=EPERM\n"), "a refused syscall fails, it does not kill");
    let Ok(out) = Command::new("systemd-analyze").args(["syscall-filter", "--no-pager"]).output() else {
        eprintln!("SKIPPED the syscall groups of {UNIT}: systemd-analyze is not installed");
        return;
    };
    let groups = systemd_groups(&String::from_utf8_lossy(&out.stdout));
    let mut allowed = BTreeSet::new();
    filter.iter().for_each(|item| expand(item, &groups, &mut allowed));
    let mut known = BTreeSet::new();
    expand("@known", &groups, &mut known);
    let needed = needed();
    let unknown: Vec<_> = needed.difference(&known).collect();
    assert!(unknown.is_empty(), "not x86-64 syscalls systemd knows: {unknown:?}");
    let refused: Vec<_> = needed.difference(&allowed).collect();
    assert!(refused.is_empty(), "{UNIT}'s SystemCallFilter= refuses syscalls the daemon makes: {refused:?}");
}

/// The AppArmor profile's `capability NAME,` rules.
fn apparmor_capabilities(profile: &str) -> BTreeSet<String> {
    profile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("capability "))
        .map(|c| c.trim_end_matches(',').trim().to_owned())
        .collect()
}

#[test]
fn unit_daemonset_and_apparmor_grant_the_capabilities_the_daemon_keeps() {
    let kept: BTreeSet<String> = KEPT.iter().map(|k| k.name.to_owned()).collect();
    let unit = read_deploy(UNIT);
    let bounding: BTreeSet<String> = unit_words(&unit, "CapabilityBoundingSet").into_iter().collect();
    assert_eq!(bounding, kept, "{UNIT}'s bounding set");
    assert!(unit.contains("\nNoNewPrivileges=yes\n"));

    let container = daemonset_container();
    let security = &container["securityContext"];
    let added: BTreeSet<String> = security["capabilities"]["add"]
        .as_array()
        .expect("added capabilities")
        .iter()
        .map(|c| format!("CAP_{}", c.as_str().unwrap_or_default()))
        .collect();
    assert_eq!(added, kept, "the DaemonSet's capabilities");
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(security["allowPrivilegeEscalation"], false);

    // setpcap besides: the drop narrows the bounding set with it when the daemon has it.
    let mut expected: BTreeSet<String> = kept.iter().map(|k| k.trim_start_matches("CAP_").to_lowercase()).collect();
    expected.insert("setpcap".to_owned());
    assert_eq!(apparmor_capabilities(&read_deploy(APPARMOR)), expected, "{APPARMOR}'s capability rules");
}

fn daemonset_container() -> Value {
    let text = read_deploy(DAEMONSET);
    let daemonset = serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{DAEMONSET}: {e}")))
        .find(|doc| doc["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    daemonset["spec"]["template"]["spec"]["containers"][0].clone()
}

/// The profile's name: the word after `profile`.
fn apparmor_profile_name(profile: &str) -> String {
    let line = profile.lines().find_map(|l| l.strip_prefix("profile ")).expect("a `profile NAME` line");
    line.split_whitespace().next().expect("a profile name").to_owned()
}

#[test]
fn daemonset_runs_under_our_seccomp_and_apparmor_profiles() {
    let security = &daemonset_container()["securityContext"];
    let seccomp = &security["seccompProfile"];
    assert_eq!(seccomp["type"], "Localhost", "{seccomp}");
    let file = Path::new(SECCOMP).file_name().and_then(|n| n.to_str()).expect("file name");
    assert_eq!(seccomp["localhostProfile"], format!("profiles/{file}"), "where the profile's comment installs it");
    let apparmor = &security["appArmorProfile"];
    assert_eq!(apparmor["type"], "Localhost", "{apparmor}");
    assert_eq!(apparmor["localhostProfile"], apparmor_profile_name(&read_deploy(APPARMOR)).as_str());
}

#[test]
fn apparmor_profile_compiles() {
    let path = deploy_path(APPARMOR);
    let text = read_deploy(APPARMOR);
    assert_eq!(text.matches('{').count(), text.matches('}').count(), "unbalanced braces");
    // The unit's binary (the Debian package's /usr/bin) and the image's (/usr/local/bin).
    assert!(text.contains(" /usr/{,local/}bin/gateway-observer "), "attaches to the binary the unit and image run");
    // -Q: no kernel load, -K: no cache, -N: print the profile names. Parsed and compiled to
    // policy only: this kernel has no AppArmor, so nothing is loaded or enforced.
    let Ok(out) = Command::new("apparmor_parser").arg("-QKN").arg(&path).output() else {
        // `cargo xtask setup` installs it: under CI a skipped check is a failure.
        assert!(std::env::var("CI").as_deref() != Ok("true"), "apparmor_parser not installed, and CI=true");
        eprintln!("SKIPPED apparmor_parser on {APPARMOR}: not installed (Debian package apparmor)");
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "apparmor_parser rejects {APPARMOR}:\n{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), apparmor_profile_name(&text));
}
