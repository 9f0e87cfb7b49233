//! Keeps each target's TLS library hooked while it is a target: looked for when a target
//! appears (and again every few ticks while none is found: Python loads `libssl` at `import
//! ssl`), hooked for that pid, unhooked when the target goes. Parsed libraries are cached by file
//! identity, so a hundred workers of one nginx parse its `libssl` once.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::{
    host::mapped_files::MappedFile,
    host::target_files::Identity,
    host::tls_libraries::{self, Entries},
    probes::{Probes, tls::TlsHooks},
    sinks::{families, prometheus::Exposition},
    uprobe_opener::UprobeOpener,
};

/// An unhooked target is looked at again after this many ticks.
const RECHECK_TICKS: u64 = 5;

/// Files whose calls are remembered, at most: every executable file a target maps is looked at.
const MAX_PARSED: usize = 4096;

#[derive(Default)]
pub struct TlsWatch {
    /// None while `tls_plaintext` is off.
    hooks: Option<TlsHooks>,
    /// A library's calls, or that it has none, by file identity.
    parsed: HashMap<Identity, Option<Entries>>,
    /// Unhooked targets and the tick they were last looked at.
    looked_at: HashMap<u32, u64>,
    /// Unhooked targets whose mapped files were all looked at without a TLS library or a failure,
    /// with a digest of those files' paths: not opened again until the process maps others.
    settled: HashMap<u32, u64>,
    /// The library each hooked target's hooks are in (its file name).
    library_of: HashMap<u32, String>,
    /// (pid, library path) that could not be hooked: counted and logged once each, though
    /// looked at again every few ticks.
    failed: HashSet<(u32, String)>,
    failures: u64,
    /// Processes hooked since start.
    hooked: u64,
}

impl TlsWatch {
    /// Hooks targets' TLS libraries from the next sync on, with uprobes from `opener`.
    pub fn enable(&mut self, opener: UprobeOpener) {
        self.hooks = Some(TlsHooks::new(opener));
    }

    /// Brings the hooks in line with `live` targets at tick `tick`.
    pub fn sync(&mut self, probes: &mut Probes, live: &HashSet<u32>, tick: u64) {
        let Some(hooks) = &mut self.hooks else { return };
        let gone: Vec<u32> = hooks.pids().filter(|pid| !live.contains(pid)).collect();
        for pid in gone {
            hooks.detach(probes, pid);
            self.library_of.remove(&pid);
        }
        self.looked_at.retain(|pid, _| live.contains(pid));
        self.settled.retain(|pid, _| live.contains(pid));
        self.failed.retain(|(pid, _)| live.contains(pid));
        for &pid in live {
            if self.hooks.as_ref().is_some_and(|hooks| hooks.is_hooked(pid)) {
                continue;
            }
            if self.looked_at.get(&pid).is_some_and(|&at| tick < at + RECHECK_TICKS) {
                continue;
            }
            self.looked_at.insert(pid, tick);
            let candidates = tls_libraries::mapped_candidates(pid);
            let digest = digest(&candidates);
            if self.settled.get(&pid) == Some(&digest) {
                continue;
            }
            if self.hook(probes, pid, candidates) {
                self.settled.insert(pid, digest);
            } else {
                self.settled.remove(&pid);
            }
        }
    }

    /// Hooks the first TLS library among the files `pid` maps that can be hooked. True when
    /// there is nothing to look at again: no file had the calls, and nothing failed.
    fn hook(&mut self, probes: &mut Probes, pid: u32, candidates: Vec<MappedFile>) -> bool {
        let Some(hooks) = &self.hooks else { return false };
        let mut open_mapped = |pid: u32, mapped: &MappedFile| {
            hooks.opener().open_mapped(pid, mapped).map_err(tls_libraries::BoxedError::from)
        };
        let (libraries, refused) = tls_libraries::open_libraries(pid, candidates, &mut open_mapped);
        let mut settled = refused.is_empty();
        for (path, error) in refused {
            self.fail(pid, &path, &error);
        }
        for library in libraries {
            if self.parsed.len() >= MAX_PARSED {
                self.parsed.clear();
            }
            // Every file a target maps executable is looked at: only libssl itself is expected to
            // have the calls, so only its failures are reported.
            let libssl = tls_libraries::is_libssl(&library.path);
            let entries = match self.parsed.get(&library.identity) {
                Some(entries) => entries.clone(),
                None => {
                    let parsed = tls_libraries::entries(&library.file);
                    // A Go executable whose calls cannot be hooked (too old, stripped): said once.
                    if let Err(error) = &parsed
                        && (libssl || matches!(error, tls_libraries::LibraryError::Go(_)))
                    {
                        self.fail(pid, &library.path, error);
                    }
                    let entries = parsed.ok();
                    self.parsed.insert(library.identity, entries.clone());
                    entries
                }
            };
            let Some(entries) = entries else {
                if libssl {
                    settled = false;
                    self.fail(pid, &library.path, &tls_libraries::LibraryError::NoCalls);
                }
                continue;
            };
            let Some(hooks) = &mut self.hooks else { return false };
            match hooks.attach(probes, pid, &library, &entries) {
                Ok(()) => {
                    let name = library.path.rsplit('/').next().unwrap_or(&library.path).to_owned();
                    let (path, deleted) = (&library.path, library.deleted);
                    tracing::info!(pid, path, deleted, calls = entries.len(), "TLS library hooked");
                    self.library_of.insert(pid, name);
                    self.hooked += 1;
                    self.looked_at.remove(&pid);
                    return false;
                }
                Err(error) => {
                    settled = false;
                    self.fail(pid, &library.path, &error);
                }
            }
        }
        settled
    }

    /// A library of `pid` that cannot be hooked: counted and logged the first time only.
    fn fail(&mut self, pid: u32, path: &str, error: &dyn std::error::Error) {
        if self.failed.insert((pid, path.to_owned())) {
            self.failures += 1;
            let error = crate::logging::error_chain(error);
            tracing::warn!(pid, path, error, "TLS library of a target not hooked");
        }
    }

    pub fn render(&self, e: &mut Exposition, unattributed: u64) {
        let mut per_library: BTreeMap<&str, usize> = BTreeMap::new();
        for library in self.library_of.values() {
            *per_library.entry(library).or_default() += 1;
        }
        let name = &families::TLS_HOOKED_PROCESSES;
        e.family(name);
        for (library, processes) in per_library {
            e.sample(name, &[("library", library)], processes as f64);
        }
        let name = &families::TLS_HOOKS;
        e.family(name);
        e.sample(name, &[], self.hooked as f64);
        let name = &families::TLS_HOOK_FAILURES;
        e.family(name);
        e.sample(name, &[], self.failures as f64);
        let name = &families::TLS_UNATTRIBUTED_RECORDS;
        e.family(name);
        e.sample(name, &[], unattributed as f64);
    }
}

/// A digest of a process's mapped executable files, to notice that it maps others.
fn digest(files: &[MappedFile]) -> u64 {
    use std::hash::{BuildHasher as _, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(files)
}
