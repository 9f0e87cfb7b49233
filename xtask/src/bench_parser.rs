//! `cargo xtask bench parser`: the HTTP/1.x parser's CPU cost per segment, in process and
//! unprivileged (gateway-observer-http/examples/parser_bench.rs, built with the release profile).

use anyhow::Context as _;

use crate::util::cargo;

pub fn run() -> anyhow::Result<()> {
    cargo(&["run", "--release", "-p", "gateway-observer-http", "--example", "parser_bench"])
        .context("the parser benchmark failed")
}
