//! `cargo xtask bench jvm-dump`: what one thread dump, taken as the daemon takes it when an
//! EventLoopBlocked or PoolSaturated alert is pending, costs a JVM: the safepoint pause per dump
//! from the JVM's own counters, the longest stall a running Java thread saw, and the dump's wall
//! time (gateway-observer/examples/jvm_dump_bench/). Unprivileged; needs the JDK.

use anyhow::Context as _;

use crate::{args, util::cargo};

/// A thread dump's cost to a JVM of N parked threads (README.md, "Java frames in the evidence")
///
/// A JVM with N threads parked DEPTH frames deep is dumped through the daemon's own attach code,
/// REPEATS times per size; the pause is read from its hsperfdata safepoint counters before and
/// after each dump, and a Java thread running throughout reports its longest stall.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// JVM sizes, in parked threads (the JVM's own threads come on top).
    #[arg(long, value_name = "N,N", value_delimiter = ',', default_values_t = [200_usize, 1024],
        value_parser = args::number_in(1_usize..=4096))]
    threads: Vec<usize>,
    /// Dumps measured per size.
    #[arg(long, value_name = "N", default_value_t = 9, value_parser = args::number_in(1_usize..=100))]
    repeats: usize,
    /// Frames below each parked thread's park call.
    #[arg(long, value_name = "N", default_value_t = 40, value_parser = args::number_in(0_usize..=1000))]
    depth: usize,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let sizes: Vec<String> = options.threads.iter().map(usize::to_string).collect();
    // The dev profile: every figure is the JVM's; the daemon's side of a dump is a socket read.
    cargo(&[
        "run",
        "-p",
        "gateway-observer",
        "--example",
        "jvm_dump_bench",
        "--",
        &sizes.join(","),
        &options.repeats.to_string(),
        &options.depth.to_string(),
    ])
    .context("the JVM dump benchmark failed")
}
