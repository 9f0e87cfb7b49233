//! `cargo xtask bench parser`: the HTTP/1.x parser's CPU cost per segment, in process and
//! unprivileged (gateway-observer-http/examples/parser_bench.rs, built with the release profile).

use anyhow::{Context as _, bail};

use crate::util::cargo;

pub fn run(args: &[String]) -> anyhow::Result<()> {
    if !args.is_empty() {
        bail!("usage: cargo xtask bench parser");
    }
    cargo(&["run", "--release", "-p", "gateway-observer-http", "--example", "parser_bench"])
        .context("the parser benchmark failed")
}
