//! The host as the daemon reads it: `/proc`, the files a target names (its binaries, its JVM's
//! perf data), the daemon's own privileges and usage. The only I/O below the tick besides the
//! kernel maps (`probes/`) and the stack readers (`stacks/`, `symbolize`, `jvm_attach/`).

pub mod dynamic_symbols;
pub mod forwarded_calls;
pub mod go_pclntab;
pub mod go_tls;
pub mod hsperfdata;
pub mod mapped_files;
pub mod privileges;
pub mod procfs;
pub mod self_usage;
pub mod sock_diag;
pub mod target_files;
pub mod tls_libraries;
