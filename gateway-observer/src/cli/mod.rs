//! Command-line surface: one file per subcommand.

pub mod calibrate;
pub mod check;
pub mod output;
pub mod run;

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Parser, Subcommand};

use crate::state::targets::TargetSpec;

#[derive(Debug, Parser)]
#[command(name = "gateway-observer", version, about = "eBPF latency observer for API gateway hosts")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the privileged daemon: attach the probes, watch the targets, serve /metrics.
    Run(RunArgs),
    /// Check kernel features and privileges, one line per requirement, with a verdict.
    Check,
    /// The live view of a running daemon (reads its local API; needs no privileges).
    Top(TopArgs),
    /// Attach empty programs to the hottest hooks and print their kernel cost per event (the
    /// floor under our programs' cost); used by `cargo xtask bench probes`.
    #[command(hide = true)]
    Calibrate {
        #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// TOML config file; flags override its values.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// A process to watch, with its descendants: pid=N, comm=NAME, port=N (whoever listens on
    /// that TCP port) or cgroup=PATH (a cgroup subtree: a systemd service, a pod). Repeatable.
    #[arg(long = "target", value_name = "pid=N|comm=NAME|port=N|cgroup=PATH")]
    pub targets: Vec<TargetSpec>,
    /// Address for /metrics, /live, /ready and the API [default: 127.0.0.1:9464]. The API
    /// answers loopback clients only, unless --api-token-file is given.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// File with a bearer token that lets clients other than loopback ones read the API.
    #[arg(long, value_name = "PATH")]
    pub api_token_file: Option<PathBuf>,
    /// Collection interval, e.g. 1s, 500ms [default: 1s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub interval: Option<Duration>,
    /// Off-CPU waits at least this long are reported as events [default: 10ms].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub block_threshold: Option<Duration>,
    /// An event-loop iteration busy at least this long is EventLoopBusy [default: 100ms].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub busy_iteration: Option<Duration>,
    /// Push alerts to this Alertmanager (v2 API), e.g. http://127.0.0.1:9093.
    #[arg(long, value_name = "URL")]
    pub alertmanager: Option<String>,
    /// Read HTTPS requests from the targets' OpenSSL calls (uprobes per target). Off by default:
    /// every hooked call traps into the kernel (README, TLS, for what it costs).
    #[arg(long)]
    pub tls_plaintext: bool,
    /// The daemon's nice value, -20..19 [default: 10: the gateways come first].
    #[arg(long, allow_hyphen_values = true)]
    pub nice: Option<i32>,
    /// Log lines as text (`gateway-observer: message key=value`) or as JSON objects, one a line;
    /// `RUST_LOG` filters them (default `info`).
    #[arg(long, value_enum, default_value_t)]
    pub log_format: crate::logging::LogFormat,
}

#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// The daemon's --listen address.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:9464")]
    pub connect: String,
    /// Refresh interval, e.g. 1s, 500ms.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// Print one snapshot and exit (for scripts and bug reports).
    #[arg(long)]
    pub once: bool,
    /// Output of --once.
    #[arg(long, value_enum, default_value_t = crate::top::Format::Text)]
    pub format: crate::top::Format,
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[test]
    fn run_flags_parse() {
        let cli = Cli::try_parse_from([
            "gateway-observer",
            "run",
            "--target",
            "pid=5",
            "--target",
            "comm=nginx",
            "--listen",
            "127.0.0.1:1234",
            "--interval",
            "500ms",
        ])
        .expect("parses");
        let Command::Run(args) = cli.command else { panic!("run") };
        assert_eq!(args.targets, vec![TargetSpec::Pid(5), TargetSpec::Comm("nginx".into())]);
        assert_eq!(args.listen.map(|a| a.port()), Some(1234));
        assert_eq!(args.interval, Some(Duration::from_millis(500)));
    }

    #[test]
    fn top_flags_parse() {
        let cli = Cli::try_parse_from(["gateway-observer", "top"]).expect("parses");
        let Command::Top(args) = cli.command else { panic!("top") };
        assert_eq!(
            (args.connect.as_str(), args.interval, args.once),
            ("http://127.0.0.1:9464", Duration::from_secs(1), false)
        );
        assert_eq!(args.format, crate::top::Format::Text);
        let cli = Cli::try_parse_from([
            "gateway-observer",
            "top",
            "--once",
            "--format",
            "json",
            "--interval",
            "250ms",
            "--connect",
            "http://[::1]:1",
        ])
        .expect("parses");
        let Command::Top(args) = cli.command else { panic!("top") };
        assert_eq!(
            (args.connect.as_str(), args.interval, args.once),
            ("http://[::1]:1", Duration::from_millis(250), true)
        );
        assert_eq!(args.format, crate::top::Format::Json);
        let err = Cli::try_parse_from(["gateway-observer", "top", "--format", "yaml"]).expect_err("rejected");
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn bad_target_is_a_usage_error() {
        let err = Cli::try_parse_from(["gateway-observer", "run", "--target", "pid=abc"]).expect_err("rejected");
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("pid must be a positive number"), "{err}");
    }
}
